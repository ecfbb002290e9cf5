package console

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// leafPaths lists the dotted JSON paths of t's members, descending into
// structs only: a list, a map or a pointer is one setting.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if sf.Anonymous || name == "-" {
			continue
		}
		path := prefix + name
		if sf.Type.Kind() == reflect.Struct {
			out = append(out, leafPaths(sf.Type, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// TestSectionsCoverSettings checks that every setting is on one of the
// Settings pages, once: a member added to tenant.Settings without a field
// fails here.
func TestSectionsCoverSettings(t *testing.T) {
	seen := map[string]string{}
	for _, sec := range sections {
		for _, f := range sec.Fields {
			require.NotContains(t, seen, f.Path, "%s is on %s and %s", f.Path, seen[f.Path], sec.ID)
			seen[f.Path] = sec.ID
		}
	}
	for _, p := range leafPaths(reflect.TypeOf(tenant.Settings{}), "") {
		require.Contains(t, seen, p, "setting %s is on no Settings page", p)
	}
	require.Len(t, seen, len(leafPaths(reflect.TypeOf(tenant.Settings{}), "")), "every field is a setting")
}

// TestUnchangedFormPatchesNothing checks that a form posted as shown
// changes no setting, for each section, so that an entry in the audit log
// names only what the staff member changed.
func TestUnchangedFormPatchesNothing(t *testing.T) {
	s := tenant.DefaultSettings()
	tenant.Normalize(&s)
	s.Auth.Scopes = map[string]string{"orders": "Your orders", "profile": "Your profile"}
	s.Auth.DPoP = tenant.DPoPOff
	s.Domains = []string{"a.example", "b.example"}
	s.Auth.TokenLifetimes.AccessSeconds = 600
	tree, err := settingsTree(s)
	require.NoError(t, err)
	for _, sec := range sections {
		patch, errs := buildPatch(&sec, tree, initialValues(&sec, tree))
		require.Empty(t, errs, sec.ID)
		require.Empty(t, patch, sec.ID)
	}
}

// TestBuildPatch checks the patch a form makes: only what changed, maps
// replaced with null for the names removed, unreadable inputs as field
// errors.
func TestBuildPatch(t *testing.T) {
	s := tenant.DefaultSettings()
	tenant.Normalize(&s)
	s.Auth.Scopes = map[string]string{"orders": "Your orders", "profile": "Your profile"}
	tree, err := settingsTree(s)
	require.NoError(t, err)
	sec := sectionByID("sign-in")
	v := initialValues(sec, tree)
	v["auth.scopes"] = []string{"orders Your orders\r\nbasket  Your basket\r\n"}
	v["auth.token_lifetimes.access_seconds"] = []string{" 900 "}
	v["auth.grant_types"] = []string{tenant.GrantDeviceCode}
	delete(v, "auth.issuer")
	patch, errs := buildPatch(sec, tree, v)
	require.Empty(t, errs)
	require.Equal(t, map[string]any{"auth": map[string]any{
		"issuer":          false,
		"scopes":          map[string]any{"orders": "Your orders", "basket": "Your basket", "profile": nil},
		"token_lifetimes": map[string]any{"access_seconds": int64(900)},
		"grant_types":     []any{tenant.GrantDeviceCode},
	}}, patch)

	v["auth.token_lifetimes.refresh_seconds"] = []string{"a day"}
	v["auth.scope_hints"] = []string{"{"}
	v["auth.scopes"] = []string{"orders x\norders y"}
	_, errs = buildPatch(sec, tree, v)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	require.Equal(t, []string{"auth.scopes", "auth.scope_hints", "auth.token_lifetimes.refresh_seconds"}, fields)
}

// TestFieldFor checks that the API's error paths find their inputs.
func TestFieldFor(t *testing.T) {
	for path, want := range map[string]string{
		"auth.scopes.read":                     "auth.scopes",
		"auth.token_lifetimes":                 "auth.token_lifetimes.access_seconds",
		"auth.token_lifetimes.refresh_seconds": "auth.token_lifetimes.refresh_seconds",
		"auth.grant_types[1]":                  "auth.grant_types",
		"auth.scope_hints.read.changes":        "auth.scope_hints",
		"auth.dpop":                            "auth.dpop",
		"auth.dpop_nonce":                      "auth.dpop_nonce",
		"conversations.access":                 "",
		"slug":                                 "",
	} {
		require.Equal(t, want, fieldFor(sectionByID("sign-in"), path), path)
	}
	require.Equal(t, "domains", fieldFor(sectionByID("organization"), "domains[2]"))
	require.Equal(t, "web.scope_rules", fieldFor(sectionByID("web"), "web.scope_rules[0].methods[1]"))
	require.Equal(t, "operations.enabled", fieldFor(sectionByID("operations"), "operations"))
}
