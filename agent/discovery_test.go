package agent

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiscoverAcceptsAValidCompany(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.Equal(t, "example.com", c.Domain)
	require.Equal(t, c.Issuer, c.Identifier)
	require.Equal(t, f.url("/t/shop"), c.Issuer)
	ok, endpoint := c.Operations()
	require.True(t, ok)
	require.Equal(t, f.url("/poppy/operations"), endpoint)
	require.Equal(t, f.url("/poppy/conversations"), c.ConversationEndpoint())
}

// The operations entry is read in both forms: draft 0.3's object (spec
// 3.3: "Each entry has a version"), which poppyhost publishes, and the
// extension excerpt's array; an entry of another version is not ours.
func TestDiscoverReadsBothOperationsForms(t *testing.T) {
	t.Parallel()
	const ep = "https://example.com/poppy/operations"
	for name, tc := range map[string]struct {
		entry any
		ok    bool
	}{
		"object":                       {map[string]any{"version": "3", "endpoint": ep}, true},
		"array":                        {[]any{map[string]any{"version": "2"}, map[string]any{"version": "3", "endpoint": ep}}, true},
		"other version":                {map[string]any{"version": "4", "endpoint": ep}, false},
		"neither a list nor an object": {"3", false},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(doc, _, _ map[string]any) {
				doc["extensions"] = map[string]any{"operations": tc.entry}
			})
			c, err := f.agent.Discover(f.ctx, f.domain())
			require.NoError(t, err)
			ok, _ := c.Operations()
			require.Equal(t, tc.ok, ok)
		})
	}
}

// A 404 of the resource metadata is a Company without an issuer: its
// identifier is https://{domain} (spec 3.2).
func TestDiscoverWithoutIssuer(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_, prm, _ map[string]any) { prm["_status"] = http.StatusNotFound })
	c, err := f.agent.Discover(f.ctx, f.domain())
	require.NoError(t, err)
	require.Empty(t, c.Issuer)
	require.Equal(t, "https://example.com", c.Identifier)
}

// Each check of spec 3 fails discovery with the error that names it.
func TestDiscoverRefusesEachFailedCheck(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		edit func(doc, prm, as map[string]any)
		want error
	}{
		"domain of another Company": {func(doc, _, _ map[string]any) {
			doc["organization"] = map[string]any{"name": "X", "domain": "other.example"}
		}, ErrDomainMismatch},
		"resource not the domain": {func(_, prm, _ map[string]any) {
			prm["resource"] = "https://other.example"
		}, ErrResourceMetadata},
		"issuer metadata names another issuer": {func(_, _, as map[string]any) {
			as["issuer"] = "https://evil.example/t/shop"
		}, ErrIssuerMismatch},
		"issuer does not list the domain": {func(_, _, as map[string]any) {
			as["protected_resources"] = []any{"https://other.example"}
		}, ErrProtectedResources},
		"http endpoint": {func(doc, _, _ map[string]any) {
			doc["agent"] = map[string]any{"protocols": []any{map[string]any{"type": "poppy", "endpoint": "http://example.com/c"}}}
		}, ErrNotHTTPS},
		"auth.issuer not an authorization server": {func(doc, _, _ map[string]any) {
			doc["auth"] = map[string]any{"issuer": "https://other.example"}
		}, ErrAuthIssuer},
		// Spec 3.2: only a 404 means no issuer; never fall back.
		"resource metadata failing": {func(_, prm, _ map[string]any) {
			prm["_status"] = http.StatusInternalServerError
		}, ErrResourceMetadata},
		"resource metadata forbidden": {func(_, prm, _ map[string]any) {
			prm["_status"] = http.StatusForbidden
		}, ErrResourceMetadata},
		"no refresh_token grant": {func(_, _, as map[string]any) {
			as["grant_types_supported"] = []any{"authorization_code"}
		}, ErrIssuerMetadata},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, tc.edit)
			_, err := f.agent.Discover(f.ctx, f.domain())
			require.ErrorIs(t, err, tc.want)
			var de *DiscoveryError
			require.ErrorAs(t, err, &de)
		})
	}
}

// Redirects: only to HTTPS, and the last URL must be the well-known path
// without a query (spec 3).
func TestDiscoverRedirectRules(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		location string
		want     error
	}{
		"to http":       {"http://example.com/.well-known/poppy.json", ErrNotHTTPS},
		"to an upload":  {"/uploads/poppy.json", ErrRedirectPath},
		"with a query":  {"/.well-known/poppy.json?x=1", ErrRedirectPath},
		"to the doc ok": {"/.well-known/poppy.json", nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, nil)
			f.mux.HandleFunc("GET /uploads/poppy.json", func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, map[string]any{"organization": map[string]any{"domain": "example.com"}})
			})
			f.mux.HandleFunc("GET /start/.well-known/poppy.json", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, tc.location, http.StatusFound)
			})
			_, _, err := f.agent.fetchWellKnown(f.ctx, f.url("/start/.well-known/poppy.json"))
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

// Without AllowPrivate the agent refuses loopback addresses a Company
// gave it (spec 3, "Redirects and addresses").
func TestRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.agent.opts.AllowPrivate = false
	f.agent.client.Transport = f.agent.Recorder.wrap(f.agent.transport())
	_, err := f.agent.Discover(f.ctx, f.domain())
	require.ErrorIs(t, err, ErrFetch)
	require.ErrorContains(t, err, "private")
}
