package tenant_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// companyTag reads slug through the admin API and returns its ETag and
// body.
func companyTag(t *testing.T, env *kit, slug string) (string, []byte) {
	t.Helper()
	resp := env.Admin(t, http.MethodGet, "/admin/v1/companies/"+slug, nil)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	tag := resp.Header.Get("ETag")
	require.Regexp(t, `^"[A-Za-z0-9_-]+"$`, tag, "a strong ETag")
	return tag, resp.Body
}

// TestPatchIfMatchRace sends many patches of one Company at once, all with
// the ETag of the same version, each adding its own scope: in every round
// exactly one is applied and every other is refused with 412, so none
// is applied to a version its sender never saw. The losers then read the
// Company again and retry with its new ETag until each is applied: no
// change is lost. Without the check inside the write's transaction, more
// than one patch of a round would succeed.
func TestPatchIfMatchRace(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", `{"auth": {"issuer": true}}`)

	const writers, rounds = 16, 4
	scope := func(round, i int) string { return fmt.Sprintf("r%d-s%02d", round, i) }
	var winners []string
	for round := range rounds {
		tag, _ := companyTag(t, env, "acme")
		reqs := make([]*http.Request, writers)
		for i := range writers {
			reqs[i] = patchRequest(t, env, "acme", fmt.Sprintf(`{"auth": {"scopes": {%q: "Scope"}}}`, scope(round, i)),
				"If-Match", tag)
		}
		resps := peers.SendAll(t, env.Client, reqs)
		won := -1
		for i, resp := range resps {
			switch resp.Status {
			case http.StatusOK:
				require.Equal(t, -1, won, "round %d: writers %d and %d both won with one ETag", round, won, i)
				won = i
			case http.StatusPreconditionFailed:
				requireError(t, resp, http.StatusPreconditionFailed, "precondition_failed")
			default:
				t.Fatalf("round %d, writer %d: %d %s", round, i, resp.Status, resp.Body)
			}
		}
		require.NotEqual(t, -1, won, "round %d: no writer won", round)
		winners = append(winners, scope(round, won))

		// Only the winner's scope is stored; the stored version is the one
		// the winner's answer tagged.
		now, _ := companyTag(t, env, "acme")
		require.Equal(t, resps[won].Header.Get("ETag"), now)
		require.NotEqual(t, tag, now)
		d := getCompanyDoc(t, env, "acme")
		require.Len(t, d.Auth.Scopes, len(winners), "round %d: scopes %v", round, d.Auth.Scopes)
		for _, w := range winners {
			require.Contains(t, d.Auth.Scopes, w)
		}

		// The losers retry, each reading the Company again first.
		for i := range writers {
			if i == won {
				continue
			}
			for attempt := 0; ; attempt++ {
				require.Less(t, attempt, 3, "round %d, writer %d never got through", round, i)
				tag, _ := companyTag(t, env, "acme")
				resp := peers.Send(t, env.Client, patchRequest(t, env, "acme",
					fmt.Sprintf(`{"auth": {"scopes": {%q: "Scope"}}}`, scope(round, i)), "If-Match", tag))
				if resp.Status == http.StatusOK {
					winners = append(winners, scope(round, i))
					break
				}
				requireError(t, resp, http.StatusPreconditionFailed, "precondition_failed")
			}
		}
	}
	d := getCompanyDoc(t, env, "acme")
	require.Len(t, d.Auth.Scopes, writers*rounds, "a change was lost")
}

// TestPatchIfMatch covers the forms of If-Match on PATCH: only the current
// strong ETag (or *) lets the patch through; anything else is 412 and
// changes nothing.
func TestPatchIfMatch(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", "")
	tag, body := companyTag(t, env, "acme")

	// The Company API's view of the Company carries the same tag.
	_, key := createAPIKey(t, env, "acme")
	resp := env.Do(t, http.MethodGet, env.PublicURL("/company/v1/company"), nil, "Authorization", "Bearer "+key)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, tag, resp.Header.Get("ETag"))

	patch := `{"organization": {"name": "Renamed"}}`
	for _, ifMatch := range []string{
		"W/" + tag,                 // weak: If-Match compares strongly
		tag[1 : len(tag)-1],        // unquoted
		`"not-the-tag"`,            // another version
		tag[:len(tag)-1] + `, "x"`, // malformed: the quote closes late
	} {
		resp := peers.Send(t, env.Client, patchRequest(t, env, "acme", patch, "If-Match", ifMatch))
		requireError(t, resp, http.StatusPreconditionFailed, "precondition_failed")
		now, after := companyTag(t, env, "acme")
		require.Equal(t, tag, now, "If-Match %s: the Company changed", ifMatch)
		require.JSONEq(t, string(body), string(after))
	}

	// The current tag, among others, lets it through; the answer carries
	// the new version's tag, which GET then shows.
	resp = peers.Send(t, env.Client, patchRequest(t, env, "acme", patch, "If-Match", `"x", `+tag))
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	newTag := resp.Header.Get("ETag")
	now, _ := companyTag(t, env, "acme")
	require.Equal(t, newTag, now)
	require.NotEqual(t, tag, newTag)

	// The old tag no longer does.
	resp = peers.Send(t, env.Client, patchRequest(t, env, "acme", `{"organization": {"name": "Again"}}`, "If-Match", tag))
	requireError(t, resp, http.StatusPreconditionFailed, "precondition_failed")
	require.Equal(t, "Renamed", getCompanyDoc(t, env, "acme").Organization.Name)

	// * matches any version of an existing Company; no If-Match at all is
	// fine when the server does not require it.
	resp = peers.Send(t, env.Client, patchRequest(t, env, "acme", `{"organization": {"name": "Star"}}`, "If-Match", "*"))
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	resp = peers.Send(t, env.Client, patchRequest(t, env, "acme", `{"organization": {"name": "Plain"}}`))
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "Plain", getCompanyDoc(t, env, "acme").Organization.Name)
}

// TestIfMatchRequired: with If-Match required (POPPYHOST_REQUIRE_IF_MATCH),
// a PATCH without one is refused with 428 and changes nothing; one with the
// current ETag goes through, and creating a Company needs none.
func TestIfMatchRequired(t *testing.T) {
	t.Parallel()
	env := setupWith(t, true)
	createCompany(t, env, "acme", "acme.example", "")
	tag, body := companyTag(t, env, "acme")

	resp := peers.Send(t, env.Client, patchRequest(t, env, "acme", `{"organization": {"name": "Renamed"}}`))
	requireError(t, resp, http.StatusPreconditionRequired, "precondition_required")
	_, after := companyTag(t, env, "acme")
	require.JSONEq(t, string(body), string(after))

	resp = peers.Send(t, env.Client, patchRequest(t, env, "acme", `{"organization": {"name": "Renamed"}}`, "If-Match", tag))
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	var d companyDoc
	require.NoError(t, json.Unmarshal(resp.Body, &d))
	require.Equal(t, "Renamed", d.Organization.Name)

	resp = peers.Send(t, env.Client, patchRequest(t, env, "acme", `{"organization": {"name": "Other"}}`, "If-Match", tag))
	requireError(t, resp, http.StatusPreconditionFailed, "precondition_failed")
}
