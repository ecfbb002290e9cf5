package agentid_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/devca"
	"github.com/poppyhost/poppyhost/internal/safehttp"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

const (
	metadataPath = "/agent.json"
	jwksPath     = "/jwks.json"
)

// clock is a fake clock for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is one test's Personal Agent and the Resolver that fetches it.
type bundle struct {
	agent    *peers.Agent
	hosts    *peers.Hosts
	clock    *clock
	resolver *agentid.Resolver
}

type setupOptions struct {
	// Block leaves AllowPrivate off, as in production.
	Block bool
	// Resolver options; Now is always the bundle's clock.
	Resolver agentid.Options
}

// setup starts a test Personal Agent on agent.test and a Resolver that
// reaches it over HTTPS through safehttp.
func setup(t *testing.T, o setupOptions) *bundle {
	t.Helper()
	ca, err := devca.New()
	require.NoError(t, err)
	agent := peers.StartAgent(t, ca, peers.AgentOptions{})
	hosts := &peers.Hosts{}
	hosts.Add(agent.Host)
	clk := &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	o.Resolver.Now = clk.Now
	fetch := safehttp.New(safehttp.Options{AllowPrivate: !o.Block, RootCAs: ca.Pool(), Resolver: hosts, Timeout: 5 * time.Second})
	return &bundle{agent: agent, hosts: hosts, clock: clk, resolver: agentid.NewResolver(fetch, o.Resolver)}
}

// client resolves the agent's client_id and fails the test on error.
func (b *bundle) client(t *testing.T) *agentid.Client {
	t.Helper()
	c, err := b.resolver.Client(context.Background(), b.agent.ClientID)
	require.NoError(t, err)
	return c
}

// metadataWith returns the agent's metadata with name set to v.
func (b *bundle) metadataWith(name string, v any) map[string]any {
	m := b.agent.Metadata()
	m[name] = v
	return m
}

func requireInvalid(t *testing.T, err error, reason string) {
	t.Helper()
	var inv *agentid.InvalidError
	require.ErrorAs(t, err, &inv)
	require.Contains(t, inv.Reason, reason)
	require.NotErrorIs(t, err, agentid.ErrUnavailable)
}

func TestClient(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	c := b.client(t)
	require.Equal(t, b.agent.ClientID, c.ClientID)
	require.Equal(t, "Test Agent", c.Name)
	require.Equal(t, b.agent.JWKSURI, c.JWKSURI)
	require.Equal(t, []string{b.agent.URL("/callback")}, c.RedirectURIs)
	require.Equal(t, map[string]string{}, c.Extensions)

	_, kid := b.agent.Key("ES256")
	k, err := b.resolver.Key(context.Background(), c, kid)
	require.NoError(t, err)
	require.Equal(t, kid, k.KeyID())
	_, kid = b.agent.Key("PS384")
	k, err = b.resolver.Key(context.Background(), c, kid)
	require.NoError(t, err)
	require.Equal(t, kid, k.KeyID())
	require.Equal(t, 1, b.agent.Hits(metadataPath))
	require.Equal(t, 1, b.agent.Hits(jwksPath))
}

func TestClientDocumentRules(t *testing.T) {
	t.Parallel()
	// parseMetadata's rules in metadata_test.go, here as fetched: the
	// metadata comes from the agent and client_id is its real URL.
	tests := []struct {
		name   string
		mutate func(b *bundle) map[string]any
		want   string // "" accepts
	}{
		{"served as is", func(b *bundle) map[string]any { return b.agent.Metadata() }, ""},
		{"client_id other path", func(b *bundle) map[string]any {
			return b.metadataWith("client_id", b.agent.URL("/other.json"))
		}, "client_id"},
		{"client_id without port", func(b *bundle) map[string]any {
			return b.metadataWith("client_id", "https://agent.test/agent.json")
		}, "client_id"},
		{"jwks_uri on another domain", func(b *bundle) map[string]any {
			return b.metadataWith("jwks_uri", "https://keys.agent.example/jwks.json")
		}, "same domain"},
		{"redirect to localhost", func(b *bundle) map[string]any {
			return b.metadataWith("redirect_uris", []string{"http://localhost:9000/cb"})
		}, "redirect_uri"},
		{"extensions", func(b *bundle) map[string]any {
			return b.metadataWith("extensions", map[string]any{"a.test/x": map[string]any{"version": "1"}})
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			b.agent.SetMetadata(tt.mutate(b))
			c, err := b.resolver.Client(context.Background(), b.agent.ClientID)
			if tt.want == "" {
				require.NoError(t, err)
				require.Equal(t, b.agent.ClientID, c.ClientID)
				return
			}
			requireInvalid(t, err, tt.want)
		})
	}
}

func TestClientNotJSONObject(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`["` + b.agent.ClientID + `"]`))
	})
	_, err := b.resolver.Client(context.Background(), b.agent.ClientID)
	requireInvalid(t, err, "JSON object")
}

func TestClientRefusesBadClientIDWithoutFetching(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	for _, id := range []string{
		strings.Replace(b.agent.ClientID, "https:", "http:", 1),
		b.agent.ClientID + "#x",
		strings.Replace(b.agent.ClientID, "https://", "https://u@", 1),
		b.agent.ClientID + "/" + strings.Repeat("a", agentid.MaxClientID),
	} {
		_, err := b.resolver.Client(context.Background(), id)
		requireInvalid(t, err, "client_id")
	}
	require.Zero(t, b.agent.Hits(metadataPath))
}

func TestKeysOnSubdomain(t *testing.T) {
	t.Parallel()
	// jwks_uri on a subdomain of client_id's registrable domain (4.1).
	b := setup(t, setupOptions{})
	b.hosts.Add("keys.agent.test")
	jwksURI := strings.Replace(b.agent.JWKSURI, "://agent.test", "://keys.agent.test", 1)
	b.agent.SetMetadata(b.metadataWith("jwks_uri", jwksURI))
	c := b.client(t)
	require.Equal(t, jwksURI, c.JWKSURI)
	_, kid := b.agent.Key("ES256")
	k, err := b.resolver.Key(context.Background(), c, kid)
	require.NoError(t, err)
	require.Equal(t, kid, k.KeyID())
	require.Equal(t, 1, b.agent.Hits(jwksPath))
}

// publicJWK returns a fresh P-256 public key as a JWK object with kid.
func publicJWK(t *testing.T, kid string, extra map[string]any) map[string]any {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	k, err := jwk.FromRaw(priv.Public())
	require.NoError(t, err)
	raw, err := json.Marshal(k)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["kid"] = kid
	for n, v := range extra {
		m[n] = v
	}
	return m
}

func TestKeySets(t *testing.T) {
	t.Parallel()
	privateEC := func(t *testing.T) map[string]any {
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		k, err := jwk.FromRaw(priv)
		require.NoError(t, err)
		require.NoError(t, k.Set(jwk.KeyIDKey, "k1"))
		raw, err := json.Marshal(k)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		require.Contains(t, m, "d")
		return m
	}
	tests := []struct {
		name string
		keys func(t *testing.T) []any
		// found says Key("k1") returns the key; want is otherwise the
		// InvalidError reason, or "" for ErrUnknownKey.
		found bool
		want  string
	}{
		{"use sig", func(t *testing.T) []any { return []any{publicJWK(t, "k1", map[string]any{"use": "sig"})} }, true, ""},
		{"no use", func(t *testing.T) []any { return []any{publicJWK(t, "k1", nil)} }, true, ""},
		{"use enc", func(t *testing.T) []any { return []any{publicJWK(t, "k1", map[string]any{"use": "enc"})} }, false, ""},
		{"other kid", func(t *testing.T) []any { return []any{publicJWK(t, "k2", nil)} }, false, ""},
		{"20 keys", func(t *testing.T) []any {
			keys := []any{publicJWK(t, "k1", nil)}
			for i := range 19 {
				keys = append(keys, publicJWK(t, "x"+strconv.Itoa(i), nil))
			}
			return keys
		}, true, ""},
		{"21 keys", func(t *testing.T) []any {
			keys := []any{publicJWK(t, "k1", nil)}
			for i := range 20 {
				keys = append(keys, publicJWK(t, "x"+strconv.Itoa(i), nil))
			}
			return keys
		}, false, "more than 20"},
		{"private EC key", func(t *testing.T) []any { return []any{privateEC(t)} }, false, "private"},
		{"private key among public ones", func(t *testing.T) []any {
			return []any{publicJWK(t, "k0", nil), privateEC(t)}
		}, false, "private"},
		{"oct key", func(t *testing.T) []any {
			return []any{map[string]any{"kty": "oct", "kid": "k1", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}}
		}, false, "private"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			b.agent.SetJWKS(map[string]any{"keys": tt.keys(t)})
			c := b.client(t)
			k, err := b.resolver.Key(context.Background(), c, "k1")
			switch {
			case tt.found:
				require.NoError(t, err)
				require.Equal(t, "k1", k.KeyID())
			case tt.want == "":
				require.ErrorIs(t, err, agentid.ErrUnknownKey)
			default:
				requireInvalid(t, err, tt.want)
			}
		})
	}
}

func TestCacheTTL(t *testing.T) {
	t.Parallel()
	// Options defaults: DefaultTTL 5m within [MinTTL 1m, MaxTTL 1h].
	tests := []struct {
		cacheControl string
		ttl          time.Duration
	}{
		{"", 5 * time.Minute},
		{"max-age=600", 10 * time.Minute},
		{"public, max-age=120", 2 * time.Minute},
		{"max-age=5", time.Minute},
		{"max-age=0", time.Minute},
		{"max-age=999999", time.Hour},
		{"no-store", time.Minute},
		{"no-cache", time.Minute},
		{"no-store, max-age=600", time.Minute},
		{"max-age=600, no-store", time.Minute},
		{"max-age=junk", 5 * time.Minute},
		{"max-age=-5", 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.cacheControl, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			if tt.cacheControl != "" {
				b.agent.SetHeader(metadataPath, "Cache-Control", tt.cacheControl)
			}
			b.client(t)
			b.clock.Advance(tt.ttl - time.Second)
			b.client(t)
			require.Equal(t, 1, b.agent.Hits(metadataPath), "fetched again before the TTL")
			b.clock.Advance(time.Second)
			b.client(t)
			require.Equal(t, 2, b.agent.Hits(metadataPath), "not fetched again at the TTL")
		})
	}
}

func TestCacheRefetchSeesChanges(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	require.Equal(t, "Test Agent", b.client(t).Name)
	b.agent.SetMetadata(b.metadataWith("client_name", "Renamed"))
	require.Equal(t, "Test Agent", b.client(t).Name)
	b.clock.Advance(5 * time.Minute)
	require.Equal(t, "Renamed", b.client(t).Name)
	require.Equal(t, 2, b.agent.Hits(metadataPath))
}

func TestClientSingleFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	doc := b.agent.Metadata()
	raw, err := json.Marshal(doc)
	require.NoError(t, err)
	b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	})
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			<-start
			c, err := b.resolver.Client(context.Background(), b.agent.ClientID)
			if err == nil && c.ClientID != b.agent.ClientID {
				err = &agentid.InvalidError{Reason: "wrong client " + c.ClientID}
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, b.agent.Hits(metadataPath))
}

func TestClientSharedFetchOutlivesCaller(t *testing.T) {
	t.Parallel()
	// A caller that gives up does not fail the fetch the others share.
	b := setup(t, setupOptions{})
	raw, err := json.Marshal(b.agent.Metadata())
	require.NoError(t, err)
	b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := b.resolver.Client(ctx, b.agent.ClientID)
		first <- err
	}()
	// Join the flight while it is in progress.
	require.Eventually(t, func() bool { return b.agent.Hits(metadataPath) == 1 }, 2*time.Second, time.Millisecond)
	b.client(t)
	require.NoError(t, <-first)
	require.Equal(t, 1, b.agent.Hits(metadataPath))
}

func TestKeyUnknownKidRefetch(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	ctx := context.Background()
	c := b.client(t)
	_, kid := b.agent.Key("ES256")
	_, err := b.resolver.Key(ctx, c, kid)
	require.NoError(t, err)
	require.Equal(t, 1, b.agent.Hits(jwksPath))

	// Just fetched: an unknown kid does not refetch.
	_, err = b.resolver.Key(ctx, c, "unknown")
	require.ErrorIs(t, err, agentid.ErrUnknownKey)
	require.Equal(t, 1, b.agent.Hits(jwksPath))

	// Past RefetchEvery (30s), within the TTL: one refetch for two
	// unknown-kid lookups within 30s.
	b.clock.Advance(31 * time.Second)
	_, err = b.resolver.Key(ctx, c, "unknown")
	require.ErrorIs(t, err, agentid.ErrUnknownKey)
	require.Equal(t, 2, b.agent.Hits(jwksPath))
	b.clock.Advance(20 * time.Second)
	_, err = b.resolver.Key(ctx, c, "unknown-2")
	require.ErrorIs(t, err, agentid.ErrUnknownKey)
	require.Equal(t, 2, b.agent.Hits(jwksPath))

	// A rotated key is found once a refetch is allowed again.
	b.agent.RotateKeys()
	_, newKid := b.agent.Key("ES256")
	require.NotEqual(t, kid, newKid)
	_, err = b.resolver.Key(ctx, c, newKid)
	require.ErrorIs(t, err, agentid.ErrUnknownKey, "refetched within RefetchEvery")
	require.Equal(t, 2, b.agent.Hits(jwksPath))
	b.clock.Advance(10 * time.Second)
	k, err := b.resolver.Key(ctx, c, newKid)
	require.NoError(t, err)
	require.Equal(t, newKid, k.KeyID())
	require.Equal(t, 3, b.agent.Hits(jwksPath))

	// The refetched set is cached: the new kid, and the old one now gone,
	// need no fetch.
	_, err = b.resolver.Key(ctx, c, newKid)
	require.NoError(t, err)
	_, err = b.resolver.Key(ctx, c, kid)
	require.ErrorIs(t, err, agentid.ErrUnknownKey)
	require.Equal(t, 3, b.agent.Hits(jwksPath))
}

func TestKeyUnknownKidRefetchThrottledWhenFailing(t *testing.T) {
	t.Parallel()
	// A key set endpoint that fails its refetches cannot make us fetch on
	// every unknown kid: attempts count, not only successes.
	for _, tt := range []struct {
		name  string
		serve http.HandlerFunc
	}{
		{"error status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "down", http.StatusInternalServerError)
		}},
		{"invalid set", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"keys":"none"}`))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			ctx := context.Background()
			c := b.client(t)
			_, kid := b.agent.Key("ES256")
			_, err := b.resolver.Key(ctx, c, kid)
			require.NoError(t, err)
			b.agent.Serve(jwksPath, tt.serve)

			b.clock.Advance(31 * time.Second)
			_, err = b.resolver.Key(ctx, c, "unknown")
			require.Error(t, err)
			require.Equal(t, 2, b.agent.Hits(jwksPath))
			for range 5 {
				b.clock.Advance(time.Second)
				_, err = b.resolver.Key(ctx, c, "unknown")
				require.ErrorIs(t, err, agentid.ErrUnknownKey)
			}
			require.Equal(t, 2, b.agent.Hits(jwksPath))
			// The known key still verifies from the cache meanwhile.
			_, err = b.resolver.Key(ctx, c, kid)
			require.NoError(t, err)

			b.clock.Advance(30 * time.Second)
			_, err = b.resolver.Key(ctx, c, "unknown")
			require.Error(t, err)
			require.Equal(t, 3, b.agent.Hits(jwksPath))
		})
	}
}

func TestClientStaleIfError(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	b.client(t)
	b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	})
	// Expired after the default 5m; StaleFor is 60 s past that.
	b.clock.Advance(5 * time.Minute)
	c := b.client(t)
	require.Equal(t, b.agent.ClientID, c.ClientID)
	require.Equal(t, 2, b.agent.Hits(metadataPath))
	b.clock.Advance(time.Minute - time.Second)
	b.client(t)
	require.Equal(t, 3, b.agent.Hits(metadataPath), "refetched once the 30 s failure ran out")
	b.clock.Advance(time.Second)
	_, err := b.resolver.Client(context.Background(), b.agent.ClientID)
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	require.ErrorIs(t, err, safehttp.ErrStatus)

	// Once the agent is back, the document is fetched and cached again
	// when the last failure's remembered period has run out: 60 s from
	// the second failure in a row (TestFailuresBackOff).
	b.agent.Serve(metadataPath, nil)
	b.clock.Advance(58 * time.Second)
	_, err = b.resolver.Client(context.Background(), b.agent.ClientID)
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	b.clock.Advance(time.Second)
	b.client(t)
	hits := b.agent.Hits(metadataPath)
	b.client(t)
	require.Equal(t, hits, b.agent.Hits(metadataPath))
}

func TestClientStaleDoesNotCoverInvalidDocument(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	b.client(t)
	b.agent.SetMetadata(b.metadataWith("jwks_uri", "http://agent.test/jwks.json"))
	b.clock.Advance(5 * time.Minute)
	_, err := b.resolver.Client(context.Background(), b.agent.ClientID)
	requireInvalid(t, err, "jwks_uri")
}

// TestKeyStaleIfError: issue 18, "A withdrawn key keeps working". When a
// key set stops answering 2xx, its stale copy serves for a short grace
// (StaleFor, 60 s) and no longer; meanwhile failures are remembered, so
// requests do not refetch it each time.
func TestKeyStaleIfError(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	ctx := context.Background()
	c := b.client(t)
	_, kid := b.agent.Key("ES256")
	_, err := b.resolver.Key(ctx, c, kid)
	require.NoError(t, err)
	b.agent.Serve(jwksPath, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "withdrawn", http.StatusNotFound)
	})
	// The metadata keeps its cache by fetching it again when expired.
	b.clock.Advance(5 * time.Minute)
	c = b.client(t)
	before := b.agent.Hits(jwksPath)
	for range 20 {
		_, err = b.resolver.Key(ctx, c, kid)
		require.NoError(t, err, "within the grace")
		b.clock.Advance(time.Second)
	}
	require.Equal(t, before+1, b.agent.Hits(jwksPath), "one fetch while the failure is remembered")
	b.clock.Advance(39 * time.Second)
	_, err = b.resolver.Key(ctx, c, kid)
	require.NoError(t, err, "59 s past expiry")
	require.Equal(t, before+2, b.agent.Hits(jwksPath), "one more fetch once the failure ran out")
	b.clock.Advance(time.Second)
	_, err = b.resolver.Key(ctx, c, kid)
	require.ErrorIs(t, err, agentid.ErrUnavailable, "the grace is over")
	require.Equal(t, before+2, b.agent.Hits(jwksPath))
}

// TestKeyWithdrawnFromFreshKeySet: a key gone from a key set that answers
// 2xx stops working as soon as that answer is fetched, with no grace.
func TestKeyWithdrawnFromFreshKeySet(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	ctx := context.Background()
	c := b.client(t)
	_, kid := b.agent.Key("ES256")
	_, err := b.resolver.Key(ctx, c, kid)
	require.NoError(t, err)
	b.agent.SetJWKS(map[string]any{"keys": []any{}})
	b.clock.Advance(5 * time.Minute)
	c = b.client(t)
	_, err = b.resolver.Key(ctx, c, kid)
	require.ErrorIs(t, err, agentid.ErrUnknownKey)
}

func TestFetchRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(b *bundle)
		want  error
	}{
		{"redirect", func(b *bundle) {
			b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, b.agent.URL("/moved.json"), http.StatusFound)
			})
			b.agent.Serve("/moved.json", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				raw, _ := json.Marshal(b.agent.Metadata())
				_, _ = w.Write(raw)
			})
		}, safehttp.ErrRedirect},
		{"permanent redirect to itself", func(b *bundle) {
			b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, b.agent.ClientID, http.StatusPermanentRedirect)
			})
		}, safehttp.ErrRedirect},
		{"larger than 64 KiB", func(b *bundle) {
			m := b.metadataWith("padding", strings.Repeat("a", 64<<10))
			raw, _ := json.Marshal(m)
			b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(raw)
			})
		}, safehttp.ErrTooLarge},
		{"text/html", func(b *bundle) {
			b.agent.SetHeader(metadataPath, "Content-Type", "text/html")
		}, safehttp.ErrContentType},
		{"no content type", func(b *bundle) {
			b.agent.SetHeader(metadataPath, "Content-Type", "")
		}, safehttp.ErrContentType},
		{"not found", func(b *bundle) {
			b.agent.Serve(metadataPath, http.NotFound)
		}, safehttp.ErrStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			tt.setup(b)
			_, err := b.resolver.Client(context.Background(), b.agent.ClientID)
			require.ErrorIs(t, err, agentid.ErrUnavailable)
			require.ErrorIs(t, err, tt.want)
			require.Zero(t, b.agent.Hits("/moved.json"), "followed a redirect")
		})
	}
}

func TestFetchAtTheSizeLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	m := b.metadataWith("padding", "")
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	m["padding"] = strings.Repeat("a", 64<<10-len(raw))
	raw, err = json.Marshal(m)
	require.NoError(t, err)
	require.Len(t, raw, 64<<10)
	b.agent.Serve(metadataPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(raw)
	})
	b.client(t)
}

func TestKeySetFetchRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(b *bundle)
		want  error
	}{
		{"redirect", func(b *bundle) {
			b.agent.Serve(jwksPath, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, b.agent.URL("/moved.json"), http.StatusFound)
			})
		}, safehttp.ErrRedirect},
		{"larger than 64 KiB", func(b *bundle) {
			b.agent.SetJWKS(`{"keys":[],"padding":"` + strings.Repeat("a", 64<<10) + `"}`)
		}, safehttp.ErrTooLarge},
		{"text/plain", func(b *bundle) {
			b.agent.SetHeader(jwksPath, "Content-Type", "text/plain")
		}, safehttp.ErrContentType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOptions{})
			tt.setup(b)
			c := b.client(t)
			_, err := b.resolver.Key(context.Background(), c, "any")
			require.ErrorIs(t, err, agentid.ErrUnavailable)
			require.ErrorIs(t, err, tt.want)
			require.Zero(t, b.agent.Hits("/moved.json"), "followed a redirect")
		})
	}
}

func TestKeySetJWKContentType(t *testing.T) {
	t.Parallel()
	// The test agent serves application/jwk-set+json; plain JSON works too.
	b := setup(t, setupOptions{})
	b.agent.SetHeader(jwksPath, "Content-Type", "application/json")
	c := b.client(t)
	_, kid := b.agent.Key("ES256")
	_, err := b.resolver.Key(context.Background(), c, kid)
	require.NoError(t, err)
}

func TestFetchBlocksPrivateAddresses(t *testing.T) {
	t.Parallel()
	// Spec 3 "Redirects and addresses": agent.test resolves to 127.0.0.1,
	// which a production fetcher never connects to.
	b := setup(t, setupOptions{Block: true})
	_, err := b.resolver.Client(context.Background(), b.agent.ClientID)
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	require.ErrorIs(t, err, safehttp.ErrBlockedAddress)
	require.Zero(t, b.agent.Hits(metadataPath))

	// An IP literal is refused the same way.
	u, err := url.Parse(b.agent.ClientID)
	require.NoError(t, err)
	literal := "https://127.0.0.1:" + u.Port() + metadataPath
	_, err = b.resolver.Client(context.Background(), literal)
	require.ErrorIs(t, err, safehttp.ErrBlockedAddress)
	require.Zero(t, b.agent.Hits(metadataPath))
}

func TestFetchBlocksPrivateKeySet(t *testing.T) {
	t.Parallel()
	// The metadata is cached; its jwks_uri on a private address is not
	// fetched.
	b := setup(t, setupOptions{})
	c := b.client(t)
	blocked := setup(t, setupOptions{Block: true})
	_, err := blocked.resolver.Key(context.Background(), c, "any")
	require.ErrorIs(t, err, agentid.ErrUnavailable)
	require.ErrorIs(t, err, safehttp.ErrBlockedAddress)
	require.Zero(t, b.agent.Hits(jwksPath))
}

// TestPublicClientIsNoPersonalAgent: a public client's document (MCP
// authorization) resolves through AnyClient, and Client, which Sessions
// and client assertions use, refuses it, from the cache too.
func TestPublicClientIsNoPersonalAgent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOptions{})
	b.agent.SetMetadata(map[string]any{"client_id": b.agent.ClientID, "client_name": "Desk Assistant",
		"redirect_uris": []string{"http://127.0.0.1/callback"}, "token_endpoint_auth_method": "none"})
	c, err := b.resolver.AnyClient(context.Background(), b.agent.ClientID)
	require.NoError(t, err)
	require.True(t, c.Public)
	_, err = b.resolver.Client(context.Background(), b.agent.ClientID)
	requireInvalid(t, err, "not a Personal Agent")
	require.Equal(t, 1, b.agent.Hits(metadataPath), "one fetch, cached for both")
}
