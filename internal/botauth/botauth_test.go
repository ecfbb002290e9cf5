package botauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"

	"github.com/poppyhost/poppyhost/internal/httpsig"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

const agentOrigin = "https://agent.example"

// fakeFetcher serves key directories from memory and counts fetches.
type fakeFetcher struct {
	docs    map[string][]byte
	header  http.Header
	fetches atomic.Int32
	fail    error
}

func (f *fakeFetcher) Get(_ context.Context, req safehttp.Request) (*safehttp.Response, error) {
	f.fetches.Add(1)
	if f.fail != nil {
		return nil, f.fail
	}
	b, ok := f.docs[req.URL]
	if !ok {
		return nil, errors.New("404")
	}
	return &safehttp.Response{URL: req.URL, Status: 200, Header: f.header, Body: b}, nil
}

func directory(t testing.TB, keys ...ed25519.PublicKey) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		jk, err := jwk.FromRaw(k)
		if err != nil {
			t.Fatal(err)
		}
		_ = set.AddKey(jk)
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fixture struct {
	v     *Verifier
	f     *fakeFetcher
	key   ed25519.PrivateKey
	keyID string
	now   time.Time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	kid, err := Thumbprint(pub)
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{key: key, keyID: kid, now: time.Unix(1_800_000_000, 0)}
	fx.f = &fakeFetcher{docs: map[string][]byte{agentOrigin + DirectoryPath: directory(t, pub)}}
	fx.v = NewVerifier(fx.f, Options{Now: func() time.Time { return fx.now }})
	return fx
}

// signOpts shape one signed request.
type signOpts struct {
	components       []string
	created, expires time.Time
	keyID            string
	key              ed25519.PrivateKey
	nonce            string
	tag              string
	noAgent          bool
}

func (fx *fixture) request(t testing.TB, o signOpts) *http.Request {
	t.Helper()
	r := httptest.NewRequest("GET", "https://shop.example/t/acme/api/items?x=1", nil)
	if !o.noAgent {
		r.Header.Set("Signature-Agent", `"`+agentOrigin+`"`)
	}
	if o.components == nil {
		o.components = []string{"@authority", "@method", "@path", "signature-agent"}
	}
	if o.created.IsZero() {
		o.created = fx.now
	}
	if o.expires.IsZero() {
		o.expires = o.created.Add(time.Minute)
	}
	if o.keyID == "" {
		o.keyID = fx.keyID
	}
	if o.key == nil {
		o.key = fx.key
	}
	if o.tag == "" {
		o.tag = Tag
	}
	params := []httpsig.Param{{Name: "created", Value: o.created.Unix()}, {Name: "expires", Value: o.expires.Unix()},
		{Name: "keyid", Value: o.keyID}, {Name: "alg", Value: "ed25519"}}
	if o.nonce != "" {
		params = append(params, httpsig.Param{Name: "nonce", Value: o.nonce})
	}
	params = append(params, httpsig.Param{Name: "tag", Value: o.tag})
	in, sig, err := httpsig.Sign(httpsig.FromRequest(r), "sig1", o.components, params, o.key)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Signature-Input", in)
	r.Header.Set("Signature", sig)
	return r
}

func TestValid(t *testing.T) {
	fx := newFixture(t)
	op, err := fx.v.Verify(context.Background(), fx.request(t, signOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	if op.Host != "agent.example" || op.Directory != agentOrigin+DirectoryPath || op.KeyID != fx.keyID {
		t.Fatalf("operator %+v", op)
	}
}

func TestUnsigned(t *testing.T) {
	fx := newFixture(t)
	op, err := fx.v.Verify(context.Background(), httptest.NewRequest("GET", "https://shop.example/", nil))
	if op != nil || err != nil {
		t.Fatalf("unsigned: %v %v", op, err)
	}
}

func TestRefused(t *testing.T) {
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	otherPub := otherKey.Public().(ed25519.PublicKey)
	otherID, _ := Thumbprint(otherPub)
	for name, c := range map[string]struct {
		want   string
		o      signOpts
		mangle func(*http.Request)
	}{
		"expired":                 {want: "has expired", o: signOpts{created: time.Unix(1_800_000_000-120, 0)}},
		"created in future":       {want: "in the future", o: signOpts{created: time.Unix(1_800_000_000+120, 0)}},
		"lifetime too long":       {want: "at most", o: signOpts{expires: time.Unix(1_800_000_000+3600, 0)}},
		"expires before":          {want: "at most", o: signOpts{expires: time.Unix(1_800_000_000-1, 0)}},
		"wrong key":               {want: "does not verify", o: signOpts{key: otherKey}},
		"unknown keyid":           {want: "not the thumbprint", o: signOpts{key: otherKey, keyID: otherID}},
		"missing @authority":      {want: "cover @authority", o: signOpts{components: []string{"@method", "@path", "signature-agent"}}},
		"missing signature-agent": {want: "cover signature-agent", o: signOpts{components: []string{"@authority", "@method", "@path"}}},
		"no Signature-Agent":      {want: "header is required", o: signOpts{noAgent: true, components: []string{"@authority"}}},
		"other tag":               {want: "tagged web-bot-auth", o: signOpts{tag: "other"}},
		"authority changed":       {want: "does not verify", mangle: func(r *http.Request) { r.Host = "other.example" }},
		"agent changed": {want: "not the thumbprint", mangle: func(r *http.Request) {
			r.Header.Set("Signature-Agent", `"https://evil.example"`)
		}},
		"http agent": {want: "https URL", mangle: func(r *http.Request) {
			r.Header.Set("Signature-Agent", `"http://agent.example"`)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			fx := newFixture(t)
			fx.f.docs["https://evil.example"+DirectoryPath] = directory(t, otherPub)
			r := fx.request(t, c.o)
			if c.mangle != nil {
				c.mangle(r)
			}
			op, err := fx.v.Verify(context.Background(), r)
			if !errors.Is(err, ErrInvalid) || op != nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, %v; want ErrInvalid saying %q", op, err, c.want)
			}
		})
	}
}

func TestReplayedNonce(t *testing.T) {
	fx := newFixture(t)
	r := fx.request(t, signOpts{nonce: "n-1"})
	if _, err := fx.v.Verify(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.v.Verify(context.Background(), r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("replayed nonce: %v", err)
	}
	// Another nonce is fine.
	if _, err := fx.v.Verify(context.Background(), fx.request(t, signOpts{nonce: "n-2"})); err != nil {
		t.Fatal(err)
	}
}

func TestDictionarySignatureAgent(t *testing.T) {
	fx := newFixture(t)
	r := httptest.NewRequest("GET", "https://shop.example/x", nil)
	r.Header.Set("Signature-Agent", `sig1="`+agentOrigin+`"`)
	in, sig, err := httpsig.Sign(httpsig.FromRequest(r), "sig1", []string{"@authority", "signature-agent"},
		[]httpsig.Param{{Name: "created", Value: fx.now.Unix()}, {Name: "expires", Value: fx.now.Unix() + 60},
			{Name: "keyid", Value: fx.keyID}, {Name: "tag", Value: Tag}}, fx.key)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Signature-Input", in)
	r.Header.Set("Signature", sig)
	if op, err := fx.v.Verify(context.Background(), r); err != nil || op.Host != "agent.example" {
		t.Fatalf("%v %v", op, err)
	}
}

func TestDirectoryCache(t *testing.T) {
	fx := newFixture(t)
	for range 3 {
		if _, err := fx.v.Verify(context.Background(), fx.request(t, signOpts{})); err != nil {
			t.Fatal(err)
		}
	}
	if n := fx.f.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for one directory; want 1", n)
	}
	// An unknown keyid refetches once per RefetchEvery, not per request.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherID, _ := Thumbprint(other.Public())
	fx.now = fx.now.Add(31 * time.Second)
	for range 3 {
		_, _ = fx.v.Verify(context.Background(), fx.request(t, signOpts{key: other, keyID: otherID}))
	}
	if n := fx.f.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after unknown keyids; want 2", n)
	}
	// Past its TTL the directory is fetched again.
	fx.now = fx.now.Add(6 * time.Minute)
	if _, err := fx.v.Verify(context.Background(), fx.request(t, signOpts{})); err != nil {
		t.Fatal(err)
	}
	if n := fx.f.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches after expiry; want 3", n)
	}
}

func TestDirectoryFailureRemembered(t *testing.T) {
	fx := newFixture(t)
	fx.f.fail = errors.New("connection refused")
	for range 3 {
		if _, err := fx.v.Verify(context.Background(), fx.request(t, signOpts{})); !errors.Is(err, ErrInvalid) {
			t.Fatalf("unreachable directory: %v", err)
		}
	}
	if n := fx.f.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches of a failing directory; want 1", n)
	}
}

func TestDirectoryRefusesPrivateKeys(t *testing.T) {
	_, err := parseDirectory([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs","d":"n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU"}]}`))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("private key members: %v", err)
	}
}

// TestThumbprintOfRFCKey checks the keyid of the RFC 9421 Appendix B.1.4
// key, as the Web Bot Auth architecture draft's examples use it.
func TestThumbprintOfRFCKey(t *testing.T) {
	b, err := os.ReadFile("../httpsig/testdata/test-key-ed25519.pem")
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Thumbprint(k); got != "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U" {
		t.Fatalf("thumbprint %s", got)
	}
}
