package sessions_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/botauth"
	"github.com/poppyhost/poppyhost/internal/httpsig"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// botSigner signs requests as a Web Bot Auth operator whose key directory
// the test agent serves.
type botSigner struct {
	key   ed25519.PrivateKey
	keyID string
	agent string // the Signature-Agent origin
}

func serveDirectory(t *testing.T, a *peers.Agent) *botSigner {
	t.Helper()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	kid, err := botauth.Thumbprint(pub)
	require.NoError(t, err)
	jk, err := jwk.FromRaw(pub)
	require.NoError(t, err)
	set := jwk.NewSet()
	require.NoError(t, set.AddKey(jk))
	doc, err := json.Marshal(set)
	require.NoError(t, err)
	a.Serve(botauth.DirectoryPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", botauth.DirectoryMediaType)
		_, _ = w.Write(doc)
	})
	return &botSigner{key: key, keyID: kid, agent: strings.TrimSuffix(a.URL("/"), "/")}
}

type botOpts struct {
	key        ed25519.PrivateKey
	created    time.Time
	components []string
	nonce      string
}

// sign adds the Web Bot Auth fields to h for a POST to u.
func (b *botSigner) sign(t *testing.T, u string, h http.Header, o botOpts) http.Header {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, nil)
	require.NoError(t, err)
	h.Set("Signature-Agent", `"`+b.agent+`"`)
	req.Header = h
	if o.key == nil {
		o.key = b.key
	}
	if o.created.IsZero() {
		o.created = time.Now()
	}
	if o.components == nil {
		o.components = []string{"@authority", "@method", "@path", "signature-agent"}
	}
	params := []httpsig.Param{{Name: "created", Value: o.created.Unix()}, {Name: "expires", Value: o.created.Add(time.Minute).Unix()},
		{Name: "keyid", Value: b.keyID}, {Name: "tag", Value: botauth.Tag}}
	if o.nonce != "" {
		params = append(params, httpsig.Param{Name: "nonce", Value: o.nonce})
	}
	in, sig, err := httpsig.Sign(httpsig.FromRequest(req), "sig1", o.components, params, o.key)
	require.NoError(t, err)
	h.Set("Signature-Input", in)
	h.Set("Signature", sig)
	return h
}

// TestWebBotAuth covers spec 5.3's Web Bot Auth at the Session middleware:
// a bad signature never fails a valid Session request, unless the Company
// requires signatures; then only a valid, unreplayed one passes.
func TestWebBotAuth(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := env.StartAgent(t, "")
	bot := serveDirectory(t, a)
	none := peers.SessionOptions{}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	cases := map[string]botOpts{
		"expired":           {created: time.Now().Add(-10 * time.Minute)},
		"wrong key":         {key: otherKey},
		"missing component": {components: []string{"@method", "@path", "signature-agent"}},
	}
	signed := func(c *company, o botOpts) *peers.Response {
		h := sessionHeader(t, a, c.claims(newSID()), none)
		return post(t, env, c.FeedbackURL, bot.sign(t, c.FeedbackURL, h, o))
	}

	t.Run("not required", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, nil)
		requireStatus(t, signed(c, botOpts{}), http.StatusAccepted)
		requireStatus(t, send(t, env, a, c, c.claims(newSID()), none), http.StatusAccepted)
		for name, o := range cases {
			t.Run(name, func(t *testing.T) { requireStatus(t, signed(c, o), http.StatusAccepted) })
		}
	})
	t.Run("required", func(t *testing.T) {
		t.Parallel()
		c := newCompany(t, env, map[string]any{"agents": map[string]any{"accept": "all", "require_signature": true}})
		requireStatus(t, signed(c, botOpts{}), http.StatusAccepted)
		requireError(t, send(t, env, a, c, c.claims(newSID()), none), http.StatusBadRequest, "invalid_session")
		for name, o := range cases {
			t.Run(name, func(t *testing.T) {
				requireError(t, signed(c, o), http.StatusBadRequest, "invalid_session")
			})
		}
		t.Run("replayed nonce", func(t *testing.T) {
			requireStatus(t, signed(c, botOpts{nonce: "n-" + newSID()}), http.StatusAccepted)
			nonce := "n-" + newSID()
			requireStatus(t, signed(c, botOpts{nonce: nonce}), http.StatusAccepted)
			requireError(t, signed(c, botOpts{nonce: nonce}), http.StatusBadRequest, "invalid_session")
		})
	})
}

// TestWebBotAuthOperator: the operator a valid signature names is the
// Session's for the request, on its first request, which creates the
// Session, and on later ones; an unsigned request has none.
func TestWebBotAuthOperator(t *testing.T) {
	t.Parallel()
	env := setup(t)
	a := env.StartAgent(t, "")
	bot := serveDirectory(t, a)
	c := newCompany(t, env, nil)
	whoami := env.PublicURL("/t/" + c.Slug + "/whoami")
	sid := newSID()
	ask := func(signed bool) map[string]any {
		cl := c.claims(sid)
		cl.URL = whoami
		h := sessionHeader(t, a, cl, peers.SessionOptions{})
		if signed {
			h = bot.sign(t, whoami, h, botOpts{})
		}
		resp := post(t, env, whoami, h)
		requireStatus(t, resp, http.StatusOK)
		return resp.JSON(t)
	}
	host := strings.TrimPrefix(bot.agent, "https://")
	first := ask(true)
	require.Equal(t, true, first["new"], "the first request creates the Session")
	require.Equal(t, host, first["operator"])
	require.Equal(t, host, ask(true)["operator"])
	require.Equal(t, "", ask(false)["operator"])
}
