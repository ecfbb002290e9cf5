package tenant_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// patchAll sends every patch to slug at once (sendAll) and returns the
// responses in the order of patches, failing unless each is 200.
func patchAll(t *testing.T, env *kit, slug string, patches []string) []*peers.Response {
	t.Helper()
	reqs := make([]*http.Request, len(patches))
	for i, p := range patches {
		reqs[i] = patchRequest(t, env, slug, p)
	}
	out := peers.SendAll(t, env.Client, reqs)
	for i := range patches {
		require.Equal(t, http.StatusOK, out[i].Status, "patch %s: %s", patches[i], out[i].Body)
	}
	return out
}

// patchRequest is an operator's merge patch of slug.
func patchRequest(t *testing.T, env *kit, slug, patch string, headers ...string) *http.Request {
	t.Helper()
	req := peers.NewRequest(t, http.MethodPatch, env.PublicURL("/admin/v1/companies/"+slug), patch)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

// companyDoc is the part of a Company body these tests look at.
type companyDoc struct {
	Organization struct {
		Name string `json:"name"`
	} `json:"organization"`
	Domains []string `json:"domains"`
	Auth    struct {
		Scopes map[string]string `json:"scopes"`
	} `json:"auth"`
	Agents struct {
		Accept    string   `json:"accept"`
		ClientIDs []string `json:"client_ids"`
	} `json:"agents"`
	RateLimits map[string]int `json:"rate_limits"`
}

func getCompanyDoc(t *testing.T, env *kit, slug string) companyDoc {
	t.Helper()
	resp := env.Admin(t, http.MethodGet, "/admin/v1/companies/"+slug, nil)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	var d companyDoc
	require.NoError(t, json.Unmarshal(resp.Body, &d))
	return d
}

// TestConcurrentPatchesLoseNothing sends many merge patches to one Company
// at once, each changing a different member; every change must survive.
// Before patches were merged under the row's lock, each merged into the
// copy read when its request came in, and most changes were lost.
func TestConcurrentPatchesLoseNothing(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", `{"auth": {"issuer": true}}`)

	// 30 writers a round, each adding its own scope, and three more each
	// setting its own rate limit; three rounds. Bounded: 99 PATCHes.
	const writers, rounds = 30, 3
	limits := []string{"per_agent", "per_session", "per_address"}
	for round := range rounds {
		var patches []string
		for i := range writers {
			patches = append(patches, fmt.Sprintf(`{"auth": {"scopes": {"r%d-s%02d": "Scope %d of round %d"}}}`, round, i, i, round))
		}
		for i, l := range limits {
			patches = append(patches, fmt.Sprintf(`{"rate_limits": {%q: %d}}`, l, 1000+round*10+i))
		}
		resps := patchAll(t, env, "acme", patches)

		// Each answer shows its own change.
		for i := range writers {
			var d companyDoc
			require.NoError(t, json.Unmarshal(resps[i].Body, &d))
			require.Equal(t, fmt.Sprintf("Scope %d of round %d", i, round), d.Auth.Scopes[fmt.Sprintf("r%d-s%02d", round, i)])
		}

		// And every change of this round and the ones before is stored.
		d := getCompanyDoc(t, env, "acme")
		lost := 0
		for r := 0; r <= round; r++ {
			for i := range writers {
				if _, ok := d.Auth.Scopes[fmt.Sprintf("r%d-s%02d", r, i)]; !ok {
					lost++
				}
			}
		}
		for i, l := range limits {
			if d.RateLimits[l] != 1000+round*10+i {
				lost++
			}
		}
		require.Zero(t, lost, "round %d: %d of %d changes lost; scopes %v, rate limits %v",
			round, lost, (round+1)*writers+len(limits), d.Auth.Scopes, d.RateLimits)
		require.Len(t, d.Auth.Scopes, (round+1)*writers)
	}
}

// TestConcurrentBlockAndRenames blocks a Personal Agent while renames run
// at the same time: the block must stay, in every trial.
func TestConcurrentBlockAndRenames(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", "")

	const renames, trials = 20, 3
	for trial := range trials {
		agent := fmt.Sprintf("https://agent%d.example/agent.json", trial)
		var patches []string
		for i := range renames {
			patches = append(patches, fmt.Sprintf(`{"organization": {"name": "Acme %d.%d"}}`, trial, i))
			if i == renames/2 {
				// Each trial blocks one more agent, keeping the earlier ones.
				var ids []string
				for j := 0; j <= trial; j++ {
					ids = append(ids, fmt.Sprintf("%q", fmt.Sprintf("https://agent%d.example/agent.json", j)))
				}
				patches = append(patches, fmt.Sprintf(`{"agents": {"accept": "unlisted", "client_ids": [%s]}}`, strings.Join(ids, ",")))
			}
		}
		patchAll(t, env, "acme", patches)

		d := getCompanyDoc(t, env, "acme")
		require.Equal(t, "unlisted", d.Agents.Accept, "trial %d: the block was undone", trial)
		require.Contains(t, d.Agents.ClientIDs, agent, "trial %d: the block was undone", trial)
		require.Regexp(t, fmt.Sprintf(`^Acme %d\.\d+$`, trial), d.Organization.Name)
	}
}

// TestConcurrentDomainAndRenames adds a domain while renames run: the
// domain must stay the Company's, so another Company cannot take it.
func TestConcurrentDomainAndRenames(t *testing.T) {
	t.Parallel()
	env := setup(t)
	createCompany(t, env, "acme", "acme.example", "")

	const renames, trials = 20, 3
	var added []string
	for trial := range trials {
		added = append(added, fmt.Sprintf("shop%d.acme.example", trial))
		var patches []string
		for i := range renames {
			patches = append(patches, fmt.Sprintf(`{"organization": {"name": "Acme %d.%d"}}`, trial, i))
			if i == renames/2 {
				raw, err := json.Marshal(added)
				require.NoError(t, err)
				patches = append(patches, fmt.Sprintf(`{"domains": %s}`, raw))
			}
		}
		patchAll(t, env, "acme", patches)

		d := getCompanyDoc(t, env, "acme")
		require.Equal(t, added, d.Domains, "trial %d: an added domain vanished", trial)
		want := []string{"acme.example*"}
		want = append(want, added...)
		require.ElementsMatch(t, want, domainsOf(t, env, "acme"), "trial %d", trial)
	}
	// No other Company can register a domain acme added.
	for _, domain := range added {
		resp := env.Admin(t, http.MethodPost, "/admin/v1/companies", merge(t, minimalBody("beta", "beta.example"),
			fmt.Sprintf(`{"domains": [%q]}`, domain)))
		requireError(t, resp, http.StatusConflict, "conflict")
	}
	require.Equal(t, 1, count(t, env, `SELECT count(*) FROM companies`))
}
