package agent

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// Web Bot Auth (spec 5.3: a Personal Agent SHOULD sign its Session
// requests with an HTTP Message Signature, RFC 9421, so that traffic
// management can recognise its operator). The agent is its own operator:
// it serves its key directory on its own origin, named by the
// Signature-Agent header of every request it signs.

// botDirectoryPath is where the agent serves its key directory.
const botDirectoryPath = "/.well-known/http-message-signatures-directory"

// botKey is the agent's Web Bot Auth key and its keyid, the RFC 7638
// thumbprint of its JWK.
type botKey struct {
	priv ed25519.PrivateKey
	kid  string
}

func newBotKey() (*botKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	// Members in lexicographic order, no whitespace (RFC 7638 §3).
	sum := sha256.Sum256(fmt.Appendf(nil, `{"crv":"Ed25519","kty":"OKP","x":"%s"}`, b64.EncodeToString(pub)))
	return &botKey{priv: priv, kid: b64.EncodeToString(sum[:])}, nil
}

// BotDirectory is the agent's key directory: a JWK Set with its Web Bot
// Auth key.
func (a *Agent) BotDirectory() map[string]any {
	pub := a.bot.priv.Public().(ed25519.PublicKey)
	return map[string]any{"keys": []any{map[string]any{"kty": "OKP", "crv": "Ed25519", "x": b64.EncodeToString(pub), "kid": a.bot.kid}}}
}

// botLifetime is how long a signature is good for.
const botLifetime = 60

// signBot adds the Web Bot Auth fields to req: Signature-Agent naming the
// agent's origin, and a signature tagged web-bot-auth covering
// @authority, @method, @path and signature-agent, with a fresh nonce.
func (a *Agent) signBot(req *http.Request) {
	created := a.opts.Now().Unix()
	agent := `"` + a.base + `"`
	params := fmt.Sprintf(`("@authority" "@method" "@path" "signature-agent");created=%d;expires=%d;keyid="%s";nonce="%s";tag="web-bot-auth"`,
		created, created+botLifetime, a.bot.kid, randomID(16))
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	host := strings.ToLower(req.URL.Host)
	host = strings.TrimSuffix(host, ":443")
	// The signature base of RFC 9421 §2.5.
	base := `"@authority": ` + host + "\n" +
		`"@method": ` + req.Method + "\n" +
		`"@path": ` + path + "\n" +
		`"signature-agent": ` + agent + "\n" +
		`"@signature-params": ` + params
	sig := ed25519.Sign(a.bot.priv, []byte(base))
	req.Header.Set("Signature-Agent", agent)
	req.Header.Set("Signature-Input", "sig1="+params)
	req.Header.Set("Signature", "sig1=:"+base64.StdEncoding.EncodeToString(sig)+":")
}
