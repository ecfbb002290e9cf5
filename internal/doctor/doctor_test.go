package doctor_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/cert"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/doctor"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/testkit"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// loopback resolves every name to 127.0.0.1, where the test's platform
// and peers listen.
type loopback struct{}

func (loopback) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func run(t *testing.T, env *testkit.Env, domain string) *doctor.Report {
	t.Helper()
	c := safehttp.New(safehttp.Options{AllowPrivate: true, RootCAs: env.CA.Pool(), Resolver: loopback{}})
	rep := doctor.Run(t.Context(), domain, doctor.Options{Client: c, Timeout: 10 * time.Second})
	var text bytes.Buffer
	require.NoError(t, rep.WriteText(&text))
	t.Log(text.String())
	return rep
}

func statuses(rep *doctor.Report) map[string]doctor.Status {
	m := map[string]doctor.Status{}
	for _, r := range rep.Results {
		m[r.Check] = r.Status
	}
	return m
}

const ordersYAML = `openapi: 3.0.3
info: {title: Orders, version: "1"}
paths:
  /orders:
    get:
      responses:
        "200": {description: ok}
`

// shop creates a Company with every part the doctor checks: sign-in,
// conversations, feedback, an API and a tool (so the hosted MCP server).
func shop(t *testing.T, env *testkit.Env, slug, domain string) {
	t.Helper()
	env.CreateCompany(t, map[string]any{"slug": slug,
		"organization":  map[string]any{"name": "Shop", "domain": domain},
		"conversations": map[string]any{"enabled": true, "agent_webhook": "https://hook.doctor.test/poppy"},
		"feedback":      map[string]any{"enabled": true}})
	resp := env.Admin(t, http.MethodPost, "/admin/v1/companies/"+slug+"/api-keys", map[string]any{"name": "doctor"})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	key := resp.JSON(t)["key"].(string)
	for path, body := range map[string]any{
		"/apis/orders": map[string]any{"origin": "https://orders.doctor.example/v1", "openapi": ordersYAML},
		"/tools/orders.lookup": map[string]any{"description": "Finds an order.",
			"input_schema": map[string]any{"type": "object"}, "url": "https://tools.doctor.example/lookup"},
	} {
		resp := env.Do(t, http.MethodPut, env.PublicURL("/company/v1"+path), body, "Authorization", "Bearer "+key)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	}
}

// A Company set up on the platform passes every check, none skipped.
func TestDoctorPassesOnThePlatform(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	shop(t, env, "shop", "shop.doctor.example")
	rep := run(t, env, "shop.doctor.example:"+env.Site.Port)
	require.True(t, rep.OK, "failed: %v", rep.Failed())
	for _, r := range rep.Results {
		require.Equal(t, doctor.Pass, r.Status, r.Check)
	}
	var out bytes.Buffer
	require.NoError(t, rep.WriteJSON(&out))
	var back doctor.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &back))
	require.Equal(t, rep, &back)
}

// proxy forwards to the platform keeping the Host, as a Company's own
// front server routes its Poppy paths; block answers 404 to the paths it
// names and rewrite changes poppy.json.
func proxy(t *testing.T, env *testkit.Env, block func(path string) bool, rewrite func([]byte) []byte) *peers.Site {
	t.Helper()
	target, err := url.Parse("https://127.0.0.1:" + env.Site.Port)
	require.NoError(t, err)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.CA.Pool(), ServerName: "proxied.doctor.example"}},
		ModifyResponse: func(resp *http.Response) error {
			if rewrite == nil || resp.Request.URL.Path != "/.well-known/poppy.json" {
				return nil
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			body = rewrite(body)
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return nil
		},
	}
	return peers.StartSite(t, env.CA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if block(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
}

// A Company whose front server does not route a Poppy path to the
// platform fails the check of that path.
func TestDoctorNamesAnUnroutedPath(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	shop(t, env, "proxied", "proxied.doctor.example")
	domain := "proxied.doctor.example"

	var fetched atomic.Int32
	routed := proxy(t, env, func(p string) bool {
		if p == "/.well-known/poppy.json" {
			fetched.Add(1)
		}
		return false
	}, nil)
	rep := run(t, env, domain+":"+routed.Port)
	require.True(t, rep.OK, "failed: %v", rep.Failed())
	require.EqualValues(t, 1, fetched.Load(), "one run fetches poppy.json once")

	noWellKnown := proxy(t, env, func(p string) bool { return p == "/.well-known/poppy.json" }, nil)
	rep = run(t, env, domain+":"+noWellKnown.Port)
	require.Equal(t, []string{"poppy.json"}, rep.Failed())
	require.Equal(t, doctor.Pass, statuses(rep)["tls"])
	require.Equal(t, doctor.Skip, statuses(rep)["mcp"])

	// The MCP server on the Company's own domain, where it is not routed.
	var noMCP *peers.Site
	noMCP = proxy(t, env, func(p string) bool { return p == "/mcp" }, func(b []byte) []byte {
		return bytes.ReplaceAll(b, []byte(env.PublicURL("/t/proxied/mcp")), []byte("https://"+domain+":"+noMCP.Port+"/mcp"))
	})
	rep = run(t, env, domain+":"+noMCP.Port)
	require.Equal(t, []string{"mcp"}, rep.Failed())

	// Two MCP servers listed, the unrouted one first: each is checked.
	var twoMCP *peers.Site
	twoMCP = proxy(t, env, func(p string) bool { return p == "/mcp" }, func(b []byte) []byte {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		apis, _ := doc["apis"].([]any)
		unrouted := map[string]any{"type": "mcp", "url": "https://" + domain + ":" + twoMCP.Port + "/mcp"}
		doc["apis"] = append([]any{unrouted}, apis...)
		out, err := json.Marshal(doc)
		require.NoError(t, err)
		return out
	})
	rep = run(t, env, domain+":"+twoMCP.Port)
	require.Equal(t, []string{"mcp"}, rep.Failed())
}

// Of several bad members of poppy.json, every run names the same one.
func TestDoctorNamesOneFaultAlways(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	shop(t, env, "proxied", "proxied.doctor.example")
	site := proxy(t, env, func(string) bool { return false }, func(b []byte) []byte {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		for _, k := range []string{"z_url", "m_uri", "a_endpoint", "k_issuer"} {
			doc[k] = "http://plain.example/" + k
		}
		out, err := json.Marshal(doc)
		require.NoError(t, err)
		return out
	})
	details := map[string]bool{}
	for range 8 {
		rep := run(t, env, "proxied.doctor.example:"+site.Port)
		for _, r := range rep.Results {
			if r.Check == "poppy.json" {
				require.Equal(t, doctor.Fail, r.Status)
				details[r.Detail] = true
			}
		}
	}
	require.Equal(t, map[string]bool{"a_endpoint is not an https URL": true}, details)
}

// fake is a Company served by a test peer, not the platform: poppy.json,
// resource and authorization server metadata, and the key set keys.
func fake(t *testing.T, env *testkit.Env, orgDomain string, keys any) string {
	t.Helper()
	var origin string
	mux := http.NewServeMux()
	serve := func(path string, doc func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(doc())
		})
	}
	serve("/.well-known/poppy.json", func() any {
		return map[string]any{"protocol_version": "0.3", "organization": map[string]any{"name": "Fake", "domain": orgDomain}}
	})
	serve("/.well-known/oauth-protected-resource", func() any {
		return map[string]any{"resource": "https://fake.doctor.test", "authorization_servers": []string{origin}}
	})
	serve("/.well-known/oauth-authorization-server", func() any {
		return map[string]any{"issuer": origin, "token_endpoint": origin + "/token", "revocation_endpoint": origin + "/revoke",
			"jwks_uri": origin + "/jwks.json", "grant_types_supported": []string{"refresh_token"},
			"protected_resources": []string{"https://fake.doctor.test"}}
	})
	serve("/jwks.json", func() any { return keys })
	site := peers.StartSite(t, env.CA, mux)
	origin = "https://fake.doctor.test:" + site.Port
	return "fake.doctor.test:" + site.Port
}

// A key set the doctor refuses, and what is wrong with it.
func TestDoctorNamesABadDomainOrKeySet(t *testing.T) {
	t.Parallel()
	env := testkit.Setup(t)
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	privJWK, err := jwk.FromRaw(priv)
	require.NoError(t, err)
	pubJWK, err := privJWK.PublicKey()
	require.NoError(t, err)
	encJWK, err := privJWK.PublicKey()
	require.NoError(t, err)
	require.NoError(t, encJWK.Set(jwk.KeyUsageKey, "enc"))
	set := func(keys ...any) any { return map[string]any{"keys": keys} }
	// withCert is the public key with an x5c certificate valid until
	// notAfter.
	withCert := func(notAfter time.Time) jwk.Key {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "issuer key"},
			NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
		require.NoError(t, err)
		k, err := privJWK.PublicKey()
		require.NoError(t, err)
		var chain cert.Chain
		require.NoError(t, chain.AddString(base64.StdEncoding.EncodeToString(der)))
		require.NoError(t, k.Set(jwk.X509CertChainKey, &chain))
		return k
	}

	current := run(t, env, fake(t, env, "fake.doctor.test", set(withCert(time.Now().Add(24*time.Hour)))))
	require.True(t, current.OK, "failed: %v", current.Failed())

	good := run(t, env, fake(t, env, "fake.doctor.test", set(pubJWK)))
	require.True(t, good.OK, "failed: %v", good.Failed())
	require.Equal(t, doctor.Pass, statuses(good)["jwks"])

	wrong := run(t, env, fake(t, env, "other.doctor.test", set(pubJWK)))
	require.Equal(t, []string{"poppy.json"}, wrong.Failed())
	require.Contains(t, wrong.Results[1].Detail, "other.doctor.test")
	require.Contains(t, wrong.Results[1].Hint, "domains", "the hint of a wrong domain is its own")
	require.Equal(t, doctor.Skip, statuses(wrong)["authorization-server"], "skipped, not passed, after poppy.json failed")

	for name, keys := range map[string]any{
		"empty":     set(),
		"private":   set(privJWK),
		"symmetric": set(map[string]any{"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ", "kid": "s"}),
		"enc only":  set(encJWK),
		"expired":   set(withCert(time.Now().Add(-time.Hour))),
		"not a set": "keys",
	} {
		rep := run(t, env, fake(t, env, "fake.doctor.test", keys))
		require.Equal(t, []string{"jwks"}, rep.Failed(), name)
	}
	var text bytes.Buffer
	require.NoError(t, wrong.WriteText(&text))
	require.True(t, strings.Contains(text.String(), "FAIL  poppy.json"), text.String())
	require.Contains(t, text.String(), "fix: ")
}
