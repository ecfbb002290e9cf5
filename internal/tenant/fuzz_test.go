package tenant_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// requireInvalidRequest fails unless err is what the admin API answers a
// body it cannot take with: an *httpx.Error, invalid_request, 400.
func requireInvalidRequest(t *testing.T, err error) {
	t.Helper()
	var he *httpx.Error
	if !errors.As(err, &he) || he.Code != httpx.CodeInvalidRequest || he.Status() != 400 {
		t.Fatalf("error %T %v is not invalid_request", err, err)
	}
}

// settingsSeeds are Company bodies from the tests: valid ones and ones
// refused for each kind of reason.
var settingsSeeds = []string{
	fullBody,
	minimalBody("acme", "acme.example"),
	`{"slug": "acme", "organization": {"name": "A", "domain": "acme.example"}, "rate_limits": {"per_agent": 5}, "RATE_LIMITS": {"per_agent": 6}}`,
	`{"slug": "acme", "organization": {"name": "A", "domain": "acme.example", "domain": "b.example"}}`,
	"{\"slug\": \"acme\", \"organization\": {\"name\": \"Acme \xc3\x28\", \"domain\": \"acme.example\"}}",
	`{"slug": "acme", "organization": {"name": "Acme \udc00", "domain": "acme.example"}}`,
	`{"slug": "acme", "organization": {"name": "A\u202e", "domain": "acme.example"}, "domains": ["b.acme.example", "B.ACME.EXAMPLE."]}`,
	`{"slug": "acme", "organization": {"name": "A", "domain": "acme.example"}, "auth": {"scopes": {"orders": "Orders"}, "scope_hints": {"orders": {"changes": "none"}}}}`,
	`{"slug": "acme", "organization": {"name": "A", "domain": "acme.example"}, "extensions": {"acme.example/gift-wrap": {"version": "1", "x": [1, {"y": null}]}}}`,
	`{"slug": "acme", "organization": {"name": "A", "domain": "acme.example"}, "sessions": {"idle_timeout_seconds": 1e400}}`,
	`{"slug": "-", "organization": {"name": "A", "domain": "127.0.0.1"}}`,
	`[]`,
}

// FuzzCompanySettings feeds Company bodies to the admin API's decoding
// and Validate: a refusal is invalid_request; settings that pass read
// back from their stored JSON as the same settings, and pass again, as
// the platform reads them from PostgreSQL on every request.
func FuzzCompanySettings(f *testing.F) {
	for _, seed := range settingsSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		slug, s, err := tenant.DecodeCompany(body)
		if err != nil {
			requireInvalidRequest(t, err)
			return
		}
		if err := tenant.Validate(slug, &s, publicHost, true); err != nil {
			requireInvalidRequest(t, err)
			return
		}
		stored, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("valid settings do not serialize: %v", err)
		}
		var back tenant.Settings
		if err := json.Unmarshal(stored, &back); err != nil {
			t.Fatalf("stored settings %s do not read back: %v", stored, err)
		}
		tenant.Normalize(&back)
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("stored settings %s read back as %+v, not %+v", stored, back, s)
		}
		if err := tenant.Validate(slug, &back, publicHost, true); err != nil {
			t.Fatalf("stored settings %s no longer pass: %v", stored, err)
		}
	})
}

// FuzzCompanyPatch feeds merge patches (PATCH of a Company) to a Company
// with every setting: a refusal is invalid_request; settings that pass
// are valid as they are.
func FuzzCompanyPatch(f *testing.F) {
	for _, seed := range []string{
		`{"organization": {"name": "Acme Two"}}`,
		`{"slug": "other"}`,
		`{"auth": null}`,
		`{"domains": null, "apis": [{"type": "openapi", "url": "https://api.acme.example/o.json"}]}`,
		`{"organization": {"domain": "poppyhost.test"}}`,
		`{"extensions": {"acme.example/gift-wrap": {"version": null}}}`,
		`{"sessions": {"idle_timeout_seconds": -1}}`,
		`{"a": {"b": {"c": {"d": {"e": {"f": {}}}}}}}`,
		`{}`,
		`{`,
	} {
		f.Add([]byte(seed))
	}
	slug, full, err := tenant.DecodeCompany([]byte(fullBody))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, patch []byte) {
		c := &tenant.Company{Slug: slug, Settings: full}
		s, err := tenant.MergePatch(c, patch, publicHost)
		if err != nil {
			requireInvalidRequest(t, err)
			return
		}
		if err := tenant.Validate(slug, &s, publicHost, true); err != nil {
			t.Fatalf("patched settings do not pass again: %v", err)
		}
	})
}
