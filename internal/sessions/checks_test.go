package sessions_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// checkRow breaks one check of spec 5.2, 5.3 or 5.6 on a request to the
// feedback endpoint, so the whole middleware runs, or makes a valid
// request that a too strict check would refuse.
type checkRow struct {
	name string
	// settings are the row's Company settings; settingsFor may name the
	// row's agent.
	settings    map[string]any
	settingsFor func(a *peers.Agent) map[string]any
	// agent, when set, gives the row a fresh Personal Agent of its own
	// (resolved metadata is cached by client_id) and prepares it.
	agent func(t *testing.T, a *peers.Agent)
	// sign edits the claims and options before signing; send edits the
	// request's URL and headers after.
	sign func(r *rowCtx)
	send func(r *rowCtx)
	// prime sends a valid request in the same Session first; replay sends
	// the row's exact request twice, the first time successfully.
	prime, replay bool

	status int
	code   string
	// desc is part of error_description: it shows which check refused.
	desc  string
	after func(r *rowCtx)
}

type rowCtx struct {
	t      *testing.T
	env    *kit
	agent  *peers.Agent
	c      *company
	claims peers.SessionClaims
	opts   peers.SessionOptions
	jwt    string
	url    string
	header http.Header
}

func mutateHeader(f func(h map[string]any)) func(*rowCtx) {
	return func(r *rowCtx) { r.opts.MutateHeader = f }
}

func mutateClaims(f func(c map[string]any)) func(*rowCtx) {
	return func(r *rowCtx) { r.opts.MutateClaims = f }
}

func mutateDelegationHeader(f func(h map[string]any)) func(*rowCtx) {
	return func(r *rowCtx) { r.opts.MutateDelegationHeader = f }
}

func mutateDelegationClaims(f func(c map[string]any)) func(*rowCtx) {
	return func(r *rowCtx) { r.opts.MutateDelegationClaims = f }
}

func setClaim(name string, v any) func(*rowCtx) {
	return mutateClaims(func(c map[string]any) { c[name] = v })
}

func dropClaim(name string) func(*rowCtx) {
	return mutateClaims(func(c map[string]any) { delete(c, name) })
}

// setCnf replaces the delegation's cnf.jwk.
func setCnf(jwk func(r *rowCtx) any) func(*rowCtx) {
	return func(r *rowCtx) {
		v := jwk(r)
		r.opts.MutateDelegationClaims = func(c map[string]any) { c["cnf"] = map[string]any{"jwk": v} }
	}
}

// replaceSegment swaps segment i of the Session JWT for raw, base64url
// encoded.
func replaceSegment(i int, raw string) func(*rowCtx) {
	return func(r *rowCtx) {
		parts := strings.Split(r.jwt, ".")
		parts[i] = base64.RawURLEncoding.EncodeToString([]byte(raw))
		r.header.Set("Poppy-Session", strings.Join(parts, "."))
	}
}

func setSessionHeader(v string) func(*rowCtx) {
	return func(r *rowCtx) { r.header.Set("Poppy-Session", v) }
}

func setMetadata(patch map[string]any) func(*testing.T, *peers.Agent) {
	return func(_ *testing.T, a *peers.Agent) {
		m := a.Metadata()
		for k, v := range patch {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		a.SetMetadata(m)
	}
}

// editES256Key changes the ES256 key in the agent's key set.
func editES256Key(edit func(t *testing.T, a *peers.Agent, k map[string]any)) func(*testing.T, *peers.Agent) {
	return func(t *testing.T, a *peers.Agent) {
		set := a.JWKS()
		found := false
		for _, k := range set["keys"].([]any) {
			if k := k.(map[string]any); k["kty"] == "EC" {
				edit(t, a, k)
				found = true
			}
		}
		require.True(t, found)
		a.SetJWKS(set)
	}
}

func pubJWK(t *testing.T, pub any) map[string]any {
	t.Helper()
	k, err := jwk.PublicKeyOf(pub)
	require.NoError(t, err)
	raw, err := json.Marshal(k)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

func athOf(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func checkRows() []checkRow {
	const invalid, ok = http.StatusBadRequest, http.StatusAccepted
	long := strings.Repeat("a", 257)
	iatAfter := func(d time.Duration) func(*rowCtx) {
		return func(r *rowCtx) { r.claims.IAT = time.Now().Add(d) }
	}
	return []checkRow{
		// Valid requests.
		{name: "valid", status: ok, after: func(r *rowCtx) {
			s := getSession(r.t, r.env, r.c, r.agent.ClientID, r.claims.SID)
			require.Equal(r.t, r.claims.Sub, s.UserID)
			require.Empty(r.t, s.AgentID)
			require.Nil(r.t, s.EndedAt)
		}},
		{name: "htu with scheme and host in another case", status: ok, sign: func(r *rowCtx) {
			r.claims.URL = strings.Replace(strings.Replace(r.c.FeedbackURL, "https://", "HTTPS://", 1), publicHost, "PoppyHost.TEST", 1)
			r.claims.Raw = true
		}},
		{name: "PS384 delegation", status: ok, sign: func(r *rowCtx) { r.opts.DelegationAlg = "PS384" }},
		{name: "new delegated key mid-Session", prime: true, status: ok, sign: func(r *rowCtx) {
			k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			require.NoError(r.t, err)
			r.opts.DelegatedKey = k
		}},
		{name: "agent_id present", status: ok, sign: func(r *rowCtx) { r.claims.AgentID = "agt_travel" }, after: func(r *rowCtx) {
			require.Equal(r.t, "agt_travel", getSession(r.t, r.env, r.c, r.agent.ClientID, r.claims.SID).AgentID)
		}},
		{name: "delegation of exactly 24 hours", status: ok, sign: func(r *rowCtx) { r.opts.DelegationLifetime = 24 * time.Hour }},
		{name: "iat 50s old", status: ok, sign: iatAfter(-50 * time.Second)},
		{name: "iat 3s ahead", status: ok, sign: iatAfter(3 * time.Second)},
		{name: "sid of 256 characters", status: ok, sign: func(r *rowCtx) { r.claims.SID = strings.Repeat("S", 256) }},
		{name: "listed agent", settingsFor: func(a *peers.Agent) map[string]any {
			return map[string]any{"agents": map[string]any{"accept": "listed", "client_ids": []string{a.ClientID}}}
		}, status: ok},

		// The header itself.
		{name: "missing header", send: func(r *rowCtx) { r.header.Del("Poppy-Session") }, status: invalid, desc: "header is required"},
		{name: "two Poppy-Session headers", send: func(r *rowCtx) { r.header.Add("Poppy-Session", r.jwt) }, status: invalid, desc: "send one"},
		{name: "garbage", send: setSessionHeader("!!not a jwt!!"), status: invalid, desc: "not a compact JWS"},
		{name: "two segments", send: func(r *rowCtx) { r.header.Set("Poppy-Session", r.jwt[:strings.LastIndex(r.jwt, ".")]) }, status: invalid, desc: "not a compact JWS"},
		{name: "four segments", send: func(r *rowCtx) { r.header.Set("Poppy-Session", r.jwt+".e30") }, status: invalid, desc: "not a compact JWS"},
		{name: "oversized", send: setSessionHeader(strings.Repeat("a", 17<<10)), status: invalid, desc: "too large"},
		{name: "header not JSON", send: replaceSegment(0, "not json"), status: invalid, desc: "header is malformed"},
		{name: "header not base64url", send: func(r *rowCtx) {
			r.header.Set("Poppy-Session", "e30="+r.jwt[strings.Index(r.jwt, "."):])
		}, status: invalid, desc: "header is malformed"},
		{name: "claims not JSON", send: replaceSegment(1, "[1,2"), status: invalid, desc: "claims are malformed"},

		// typ, alg, kid, pap_dlg (5.2).
		{name: "typ pap-delegation+jwt", sign: mutateHeader(func(h map[string]any) { h["typ"] = "pap-delegation+jwt" }), status: invalid, desc: "typ must be poppy-session+jwt"},
		{name: "typ JWT", sign: mutateHeader(func(h map[string]any) { h["typ"] = "JWT" }), status: invalid, desc: "typ must be poppy-session+jwt"},
		{name: "typ missing", sign: mutateHeader(func(h map[string]any) { delete(h, "typ") }), status: invalid, desc: "typ must be poppy-session+jwt"},
		// No header extensions: b64 would change what is signed (RFC 7797).
		{name: "header crit", sign: mutateHeader(func(h map[string]any) { h["crit"] = []string{"exp"} }), status: invalid, desc: "crit or b64"},
		{name: "header b64", sign: mutateHeader(func(h map[string]any) { h["b64"] = true }), status: invalid, desc: "crit or b64"},
		{name: "delegation crit", sign: mutateDelegationHeader(func(h map[string]any) { h["crit"] = []string{"exp"} }), status: invalid, desc: "crit or b64"},
		{name: "delegation b64", sign: mutateDelegationHeader(func(h map[string]any) { h["b64"] = true }), status: invalid, desc: "crit or b64"},
		{name: "typ not a string", sign: mutateHeader(func(h map[string]any) { h["typ"] = 1 }), status: invalid, desc: "header is malformed"},
		{name: "alg ES384", sign: mutateHeader(func(h map[string]any) { h["alg"] = "ES384" }), status: invalid, desc: "alg must be ES256"},
		{name: "alg none", sign: mutateHeader(func(h map[string]any) { h["alg"] = "none" }), status: invalid, desc: "alg must be ES256"},
		{name: "alg missing", sign: mutateHeader(func(h map[string]any) { delete(h, "alg") }), status: invalid, desc: "alg must be ES256"},
		{name: "kid not the delegated key's thumbprint", sign: func(r *rowCtx) {
			_, kid := r.agent.Key("ES256")
			r.opts.MutateHeader = func(h map[string]any) { h["kid"] = kid }
		}, status: invalid, desc: "kid must be the RFC 7638 thumbprint"},
		{name: "kid missing", sign: mutateHeader(func(h map[string]any) { delete(h, "kid") }), status: invalid, desc: "kid must be the RFC 7638 thumbprint"},
		{name: "no pap_dlg", sign: func(r *rowCtx) { r.opts.NoDelegation = true }, status: invalid, desc: "no delegation"},
		{name: "pap_dlg empty", sign: mutateHeader(func(h map[string]any) { h["pap_dlg"] = "" }), status: invalid, desc: "no delegation"},
		{name: "pap_dlg not a JWS", sign: mutateHeader(func(h map[string]any) { h["pap_dlg"] = "abc" }), status: invalid, desc: "delegation is not a compact JWS"},
		{name: "signed directly by a jwks_uri key", sign: func(r *rowCtx) { r.opts.SignDirect = true }, status: invalid, desc: "no delegation"},
		{name: "signed by another key", sign: func(r *rowCtx) { r.opts.SignWithOtherKey = true }, status: invalid, desc: "signature does not verify with the delegated key"},
		{name: "signature tampered", send: func(r *rowCtx) {
			parts := strings.Split(r.jwt, ".")
			sig, err := base64.RawURLEncoding.DecodeString(parts[2])
			require.NoError(r.t, err)
			sig[len(sig)-1] ^= 1
			parts[2] = base64.RawURLEncoding.EncodeToString(sig)
			r.header.Set("Poppy-Session", strings.Join(parts, "."))
		}, status: invalid, desc: "signature does not verify with the delegated key"},

		// The delegation (5.2 "Delegated keys").
		{name: "delegation signed by an unknown key", sign: func(r *rowCtx) { r.opts.DelegationSignedByUnknownKey = true }, status: invalid, desc: "kid names no signing key"},
		{name: "delegation signature by another key under a known kid", sign: func(r *rowCtx) {
			_, kid := r.agent.Key("ES256")
			r.opts.DelegationSignedByUnknownKey = true
			r.opts.MutateDelegationHeader = func(h map[string]any) { h["kid"] = kid }
		}, status: invalid, desc: "delegation's signature does not verify"},
		{name: "delegation kid names an enc key", agent: editES256Key(func(_ *testing.T, _ *peers.Agent, k map[string]any) { k["use"] = "enc" }),
			status: invalid, desc: "kid names no signing key"},
		{name: "delegation kid missing", sign: mutateDelegationHeader(func(h map[string]any) { delete(h, "kid") }), status: invalid, desc: "delegation's kid must name"},
		{name: "delegation typ poppy-session+jwt", sign: mutateDelegationHeader(func(h map[string]any) { h["typ"] = "poppy-session+jwt" }), status: invalid, desc: "delegation's typ must be"},
		{name: "delegation typ missing", sign: mutateDelegationHeader(func(h map[string]any) { delete(h, "typ") }), status: invalid, desc: "delegation's typ must be"},
		{name: "delegation alg RS256", sign: func(r *rowCtx) { r.opts.DelegationAlg = "RS256" }, status: invalid, desc: "alg must be ES256 or PS384"},
		{name: "delegation alg PS256", sign: func(r *rowCtx) { r.opts.DelegationAlg = "PS256" }, status: invalid, desc: "alg must be ES256 or PS384"},
		{name: "delegation alg none", sign: mutateDelegationHeader(func(h map[string]any) { h["alg"] = "none" }), status: invalid, desc: "alg must be ES256 or PS384"},
		{name: "delegation header says PS384, signed ES256", sign: mutateDelegationHeader(func(h map[string]any) { h["alg"] = "PS384" }), status: invalid, desc: "delegation's signature does not verify"},
		{name: "delegation iss is another client", sign: func(r *rowCtx) {
			other := r.agent.URL("/other-agent.json")
			r.opts.MutateDelegationClaims = func(c map[string]any) { c["iss"] = other }
		}, status: invalid, desc: "delegation's iss must be"},
		{name: "delegation iss missing", sign: mutateDelegationClaims(func(c map[string]any) { delete(c, "iss") }), status: invalid, desc: "delegation's iss must be"},
		{name: "delegation expired", sign: func(r *rowCtx) { r.opts.DelegationIAT = time.Now().Add(-2 * time.Hour) }, status: invalid, desc: "delegation has expired"},
		{name: "delegation longer than 24 hours", sign: func(r *rowCtx) { r.opts.DelegationLifetime = 24*time.Hour + time.Minute }, status: invalid, desc: "at most 24 hours after its iat"},
		{name: "delegation iat in the future, exp a year ahead", sign: mutateDelegationClaims(func(c map[string]any) {
			c["iat"], c["exp"] = time.Now().AddDate(1, 0, 1).Unix(), time.Now().AddDate(1, 0, 0).Unix()
		}), status: invalid, desc: "delegation's iat is in the future"},
		{name: "delegation exp missing", sign: mutateDelegationClaims(func(c map[string]any) { delete(c, "exp") }), status: invalid, desc: "iat and exp must be numbers"},
		{name: "delegation exp a numeric string", sign: mutateDelegationClaims(func(c map[string]any) { c["exp"] = fmt.Sprint(c["exp"]) }), status: invalid, desc: "iat and exp must be numbers"},
		{name: "delegation iat a numeric string", sign: mutateDelegationClaims(func(c map[string]any) { c["iat"] = fmt.Sprint(c["iat"]) }), status: invalid, desc: "iat and exp must be numbers"},
		{name: "delegation cnf missing", sign: mutateDelegationClaims(func(c map[string]any) { delete(c, "cnf") }), status: invalid, desc: "no cnf.jwk"},
		{name: "delegation cnf.jwk missing", sign: mutateDelegationClaims(func(c map[string]any) { c["cnf"] = map[string]any{} }), status: invalid, desc: "no cnf.jwk"},
		{name: "delegation cnf.jwk with private member d", sign: setCnf(func(r *rowCtx) any {
			k := r.agent.DelegatedKey(r.claims.Sub)
			m := pubJWK(r.t, &k.PublicKey)
			d, err := k.Bytes()
			require.NoError(r.t, err)
			m["d"] = base64.RawURLEncoding.EncodeToString(d)
			return m
		}), status: invalid, desc: "must not contain private key members"},
		{name: "delegation cnf.jwk on P-384", sign: setCnf(func(r *rowCtx) any {
			k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			require.NoError(r.t, err)
			return pubJWK(r.t, &k.PublicKey)
		}), status: invalid, desc: "must be a P-256 public key"},
		{name: "delegation cnf.jwk RSA", sign: setCnf(func(r *rowCtx) any {
			k, err := rsa.GenerateKey(rand.Reader, 1024)
			require.NoError(r.t, err)
			return pubJWK(r.t, &k.PublicKey)
		}), status: invalid, desc: "must be a P-256 public key"},
		{name: "delegation cnf.jwk not a JWK", sign: setCnf(func(*rowCtx) any { return map[string]any{"kty": "EC", "crv": "P-256"} }),
			status: invalid, desc: "not a valid JWK"},
		{name: "Session JWT iat after the delegation's exp", sign: func(r *rowCtx) {
			// The delegation is still valid when checked (for at least 3 s),
			// but expired before the Session JWT says it was signed, within
			// the 5 s the clock may run ahead.
			now := time.Now()
			r.opts.DelegationIAT = now.Add(-time.Hour)
			r.opts.DelegationLifetime = time.Hour + 4*time.Second
			r.claims.IAT = now.Add(5 * time.Second)
		}, status: invalid, desc: "signed after its delegation expired"},

		// Claims (5.2, 5.3 step 2).
		{name: "iss missing", sign: dropClaim("iss"), status: invalid, desc: "iss is required"},
		{name: "iss an http URL", sign: setClaim("iss", "http://agent.test/agent.json"), status: invalid, desc: "must be an https URL"},
		{name: "iss unreachable", sign: setClaim("iss", "https://nowhere.test/agent.json"), status: invalid, desc: "could not be fetched"},
		{name: "aud another Company", sign: func(r *rowCtx) { r.claims.Aud = r.env.PublicURL("/t/other") }, status: invalid, desc: "aud must be this Company's identifier"},
		{name: "aud an array", sign: func(r *rowCtx) {
			aud := r.c.Aud
			r.opts.MutateClaims = func(c map[string]any) { c["aud"] = []string{aud} }
		}, status: invalid, desc: "aud must be a single string"},
		{name: "aud with a trailing slash", sign: func(r *rowCtx) { r.claims.Aud = r.c.Aud + "/" }, status: invalid, desc: "aud must be this Company's identifier"},
		{name: "aud in another case", sign: func(r *rowCtx) {
			r.claims.Aud = strings.Replace(r.c.Aud, publicHost, strings.ToUpper(publicHost), 1)
		}, status: invalid, desc: "aud must be this Company's identifier"},
		{name: "aud missing", sign: dropClaim("aud"), status: invalid, desc: "aud must be a single string"},
		{name: "htm GET", sign: func(r *rowCtx) { r.claims.Method = http.MethodGet }, status: invalid, desc: "htm must be"},
		{name: "htm lowercase", sign: func(r *rowCtx) { r.claims.Method = "post" }, status: invalid, desc: "htm must be"},
		{name: "htm missing", sign: dropClaim("htm"), status: invalid, desc: "htm must be"},
		{name: "htu wrong host", sign: func(r *rowCtx) {
			r.claims.URL = strings.Replace(r.c.FeedbackURL, publicHost, r.c.Domain, 1)
		}, status: invalid, desc: "htu must be"},
		{name: "htu wrong port", sign: func(r *rowCtx) {
			r.claims.URL = strings.Replace(r.c.FeedbackURL, ":"+r.env.Port, "", 1)
		}, status: invalid, desc: "htu must be"},
		{name: "htu wrong path", sign: func(r *rowCtx) { r.claims.URL = r.c.FeedbackURL + "s" }, status: invalid, desc: "htu must be"},
		{name: "htu with a query", sign: func(r *rowCtx) { r.claims.URL, r.claims.Raw = r.c.FeedbackURL+"?a=1", true }, status: invalid, desc: "htu must be"},
		{name: "htu with an empty query", sign: func(r *rowCtx) { r.claims.URL, r.claims.Raw = r.c.FeedbackURL+"?", true }, status: invalid, desc: "htu must be"},
		{name: "htu with a fragment", sign: func(r *rowCtx) { r.claims.URL, r.claims.Raw = r.c.FeedbackURL+"#f", true }, status: invalid, desc: "htu must be"},
		{name: "htu http", sign: func(r *rowCtx) {
			r.claims.URL = strings.Replace(r.c.FeedbackURL, "https:", "http:", 1)
		}, status: invalid, desc: "htu must be"},
		{name: "htu missing", sign: dropClaim("htu"), status: invalid, desc: "htu must be"},
		{name: "iat too old", sign: iatAfter(-90 * time.Second), status: invalid, desc: "too old"},
		{name: "iat in the future", sign: iatAfter(30 * time.Second), status: invalid, desc: "in the future"},
		{name: "iat not a number", sign: setClaim("iat", "soon"), status: invalid, desc: "iat must be a number"},
		{name: "iat a numeric string", sign: func(r *rowCtx) {
			r.opts.MutateClaims = func(c map[string]any) { c["iat"] = fmt.Sprint(c["iat"]) }
		}, status: invalid, desc: "iat must be a number"},
		{name: "iat missing", sign: dropClaim("iat"), status: invalid, desc: "iat must be a number"},
		{name: "jti missing", sign: dropClaim("jti"), status: invalid, desc: "jti is required"},
		{name: "jti empty", sign: setClaim("jti", ""), status: invalid, desc: "jti is required"},
		{name: "jti too long", sign: setClaim("jti", long), status: invalid, desc: "jti is required"},
		{name: "jti replayed", replay: true, status: invalid, desc: "already used"},
		{name: "sid missing", sign: dropClaim("sid"), status: invalid, desc: "sid must be"},
		{name: "sid with a dot", sign: setClaim("sid", "abc.def"), status: invalid, desc: "sid must be"},
		{name: "sid with a space", sign: setClaim("sid", "abc def"), status: invalid, desc: "sid must be"},
		{name: "sid not ASCII", sign: setClaim("sid", "abcdé"), status: invalid, desc: "sid must be"},
		{name: "sid longer than 256", sign: setClaim("sid", long), status: invalid, desc: "sid must be"},
		{name: "sub missing", sign: dropClaim("sub"), status: invalid, desc: "sub is required"},
		{name: "sub empty", sign: setClaim("sub", ""), status: invalid, desc: "sub is required"},
		{name: "sub longer than 256", sign: setClaim("sub", long), status: invalid, desc: "sub is required"},
		{name: "agent_id empty", sign: setClaim("agent_id", ""), status: invalid, desc: "agent_id must be"},
		{name: "agent_id longer than 256", sign: setClaim("agent_id", long), status: invalid, desc: "agent_id must be"},

		// ath and the access token (5.3 step 3).
		{name: "ath without an access token", sign: setClaim("ath", athOf("tok")), status: invalid, desc: "ath must be absent"},
		{name: "access token without ath", send: func(r *rowCtx) { r.header.Set("Authorization", "Bearer tok") }, status: invalid, desc: "ath must be the base64url"},
		{name: "DPoP access token without ath", send: func(r *rowCtx) { r.header.Set("Authorization", "DPoP tok") },
			status: invalid, desc: "ath must be the base64url"},
		{name: "ath of another token", sign: func(r *rowCtx) { r.claims.AccessToken = "tok-1" },
			send: func(r *rowCtx) { r.header.Set("Authorization", "Bearer tok-2") }, status: invalid, desc: "ath must be the base64url"},

		// Client metadata and keys (5.3 step 1, 4.1).
		{name: "metadata client_id mismatch", agent: func(t *testing.T, a *peers.Agent) {
			setMetadata(map[string]any{"client_id": a.URL("/other.json")})(t, a)
		}, status: invalid, desc: "client_id must equal the URL"},
		{name: "metadata jwks_uri http", agent: func(t *testing.T, a *peers.Agent) {
			setMetadata(map[string]any{"jwks_uri": strings.Replace(a.JWKSURI, "https:", "http:", 1)})(t, a)
		}, status: invalid, desc: "jwks_uri must be an https URL"},
		{name: "metadata jwks_uri on another domain", agent: func(t *testing.T, a *peers.Agent) {
			setMetadata(map[string]any{"jwks_uri": strings.Replace(a.JWKSURI, a.Host, "keys.elsewhere.test", 1)})(t, a)
		}, status: invalid, desc: "same domain"},
		{name: "metadata without jwks_uri", agent: setMetadata(map[string]any{"jwks_uri": nil}), status: invalid, desc: "no jwks_uri"},
		{name: "metadata not JSON", agent: func(_ *testing.T, a *peers.Agent) {
			a.Serve("/agent.json", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte("not json"))
			})
		}, status: invalid, desc: "not a JSON object"},
		{name: "metadata redirect is not followed", agent: func(_ *testing.T, a *peers.Agent) {
			a.Serve("/agent.json", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/moved.json", http.StatusFound)
			})
		}, status: invalid, desc: "could not be fetched", after: func(r *rowCtx) {
			require.Zero(r.t, r.agent.Hits("/moved.json"))
		}},
		{name: "metadata 404", agent: func(_ *testing.T, a *peers.Agent) { a.Serve("/agent.json", http.NotFound) },
			status: invalid, desc: "could not be fetched"},
		{name: "metadata over 64 KiB", agent: func(t *testing.T, a *peers.Agent) {
			setMetadata(map[string]any{"client_name": strings.Repeat("n", 64<<10)})(t, a)
		}, status: invalid, desc: "could not be fetched"},
		{name: "metadata content type text/html", agent: func(_ *testing.T, a *peers.Agent) {
			a.SetHeader("/agent.json", "Content-Type", "text/html")
		}, status: invalid, desc: "could not be fetched"},
		{name: "jwks with private key members", agent: editES256Key(func(t *testing.T, a *peers.Agent, k map[string]any) {
			priv, _ := a.Key("ES256")
			d, err := priv.(*ecdsa.PrivateKey).Bytes()
			require.NoError(t, err)
			k["d"] = base64.RawURLEncoding.EncodeToString(d)
		}), status: invalid},
		{name: "jwks 404", agent: func(_ *testing.T, a *peers.Agent) { a.Serve("/jwks.json", http.NotFound) },
			status: invalid, desc: "could not be fetched"},
		{name: "jwks not a key set", agent: func(_ *testing.T, a *peers.Agent) { a.SetJWKS(`{"keys":"no"}`) },
			status: invalid, desc: "did not return a JWK Set"},

		// The Company refuses the Personal Agent (4.1, 5.3).
		{name: "listed without it", settings: map[string]any{"agents": map[string]any{
			"accept": "listed", "client_ids": []string{"https://other-agent.test/agent.json"}}},
			status: invalid, desc: "does not accept"},
		{name: "unlisted with it", settingsFor: func(a *peers.Agent) map[string]any {
			return map[string]any{"agents": map[string]any{"accept": "unlisted", "client_ids": []string{a.ClientID}}}
		}, status: invalid, desc: "does not accept"},
		{name: "listed: same origin, another path", settingsFor: func(a *peers.Agent) map[string]any {
			return map[string]any{"agents": map[string]any{"accept": "listed", "client_ids": []string{a.URL("/agents/other.json")}}}
		}, status: invalid, desc: "does not accept"},

		// Spec 5.6: "Companies MUST NOT accept them [tokens or Session JWTs]
		// from [a URL]". The names are an API's to use: a query parameter
		// called access_token or session is an ordinary one, and a Session
		// JWT there is never read.
		{name: "query parameters named like tokens", send: func(r *rowCtx) {
			r.url += "?access_token=x&Session=y&POPPY_SESSION=z&poppy-session=w"
		}, status: ok},
		{name: "Session JWT in the query only", send: func(r *rowCtx) {
			r.url += "?poppy_session=" + r.jwt + "&session=" + r.jwt
			r.header.Del("Poppy-Session")
		}, status: invalid, desc: "header is required"},

		// A Company without an issuer is identified by its domain (3.2).
		{name: "no issuer: aud https://{domain}", settings: map[string]any{"auth": map[string]any{"issuer": false}},
			sign: func(r *rowCtx) { require.Equal(r.t, "https://"+r.c.Domain, r.c.Aud) }, status: ok},
		{name: "no issuer: aud the issuer-style URL", settings: map[string]any{"auth": map[string]any{"issuer": false}},
			sign: func(r *rowCtx) { r.claims.Aud = r.env.PublicURL("/t/" + r.c.Slug) }, status: invalid, desc: "aud must be"},
		{name: "no issuer: aud with the domain in upper case", settings: map[string]any{"auth": map[string]any{"issuer": false}},
			sign: func(r *rowCtx) { r.claims.Aud = "https://" + strings.ToUpper(r.c.Domain) }, status: invalid, desc: "aud must be"},
		{name: "no issuer: aud with a trailing slash", settings: map[string]any{"auth": map[string]any{"issuer": false}},
			sign: func(r *rowCtx) { r.claims.Aud = "https://" + r.c.Domain + "/" }, status: invalid, desc: "aud must be"},
	}
}

// TestSessionChecks sends one request per row through the whole
// middleware and checks that a refused request leaves no Session and no
// report behind. The rows share one platform; each has its own Company.
func TestSessionChecks(t *testing.T) {
	t.Parallel()
	env := setup(t)
	shared := env.StartAgent(t, "")
	for _, tc := range checkRows() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := shared
			if tc.agent != nil {
				// A host of its own: an agent on a port another row's agent
				// used would share its client_id, and the resolver's
				// cached document or remembered failure with it.
				a = env.StartAgent(t, "a"+randHex(6)+".test")
				tc.agent(t, a)
			}
			settings := tc.settings
			if tc.settingsFor != nil {
				settings = tc.settingsFor(a)
			}
			c := newCompany(t, env, settings)
			r := &rowCtx{t: t, env: env, agent: a, c: c, claims: c.claims(newSID()), url: c.FeedbackURL}

			if tc.prime {
				requireStatus(t, send(t, env, a, c, r.claims, peers.SessionOptions{}), http.StatusAccepted)
			}
			if tc.sign != nil {
				tc.sign(r)
			}
			r.header = sessionHeader(t, a, r.claims, r.opts)
			r.jwt = r.header.Get("Poppy-Session")
			if tc.send != nil {
				tc.send(r)
			}
			if tc.replay {
				requireStatus(t, post(t, env, r.url, r.header), http.StatusAccepted)
			}
			resp := post(t, env, r.url, r.header)

			wantSessions, wantFeedback := 0, 0
			if tc.prime || tc.replay {
				wantSessions, wantFeedback = 1, 1
			}
			if tc.status == http.StatusAccepted {
				requireStatus(t, resp, tc.status)
				wantSessions, wantFeedback = 1, wantFeedback+1
			} else {
				code := tc.code
				if code == "" {
					code = "invalid_session"
				}
				desc := requireError(t, resp, tc.status, code)
				require.NotEmpty(t, desc)
				require.Contains(t, desc, tc.desc)
			}
			gotSessions, gotFeedback := rows(t, env, c)
			require.Equal(t, wantSessions, gotSessions, "sessions rows")
			require.Equal(t, wantFeedback, gotFeedback, "feedback rows")
			if tc.after != nil {
				tc.after(r)
			}
		})
	}
}
