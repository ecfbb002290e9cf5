package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// OAuthError is an OAuth error response (RFC 6749 §5.2).
type OAuthError struct {
	Status      int
	Code        string `json:"error"`
	Description string `json:"error_description"`
}

func (e *OAuthError) Error() string {
	return fmt.Sprintf("oauth: %d %s: %s", e.Status, e.Code, e.Description)
}

// ErrNoSignIn is returned when the Company offers no sign-in of the kind
// asked for (no issuer, auth.disabled, or the grant type not listed).
var ErrNoSignIn = errors.New("agent: the Company offers no such sign-in")

// Grant is the User's sign-in at a Company: its refresh token and the
// access tokens got from it, by resource.
type Grant struct {
	RefreshToken string
	// Scopes are the scopes granted (spec 4.7).
	Scopes []string
	tokens map[string]*AccessToken
}

// AccessToken is an access token and its scheme (spec 4.5).
type AccessToken struct {
	Value  string
	Type   string
	Expiry time.Time
}

// tokenResponse is the token endpoint's answer (spec 4.7).
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
}

// clientAssertion signs a private_key_jwt assertion addressed to the
// issuer (spec 4.1): short-lived, with iat and a fresh jti.
func (a *Agent) clientAssertion(issuer string) (string, error) {
	now := a.now()
	return signES256(a.key, map[string]any{"typ": "JWT", "kid": a.kid}, map[string]any{
		"iss": a.ClientID(),
		"sub": a.ClientID(),
		"aud": issuer,
		"iat": now,
		"exp": now + 60,
		"jti": randomID(16),
	})
}

// postForm sends a form with the client assertion to an issuer endpoint
// and decodes a 200 answer into v, or returns an *OAuthError. A token
// request refused with use_dpop_nonce is sent once more with the server
// nonce it handed out (RFC 9449 §8).
func (c *Company) postForm(ctx context.Context, endpoint string, form url.Values, v any) error {
	if c.AS == nil {
		return ErrNoSignIn
	}
	for attempt := 0; ; attempt++ {
		status, body, nonced, err := c.sendForm(ctx, endpoint, form)
		if err != nil {
			return err
		}
		if status == http.StatusOK {
			if v == nil {
				return nil
			}
			return json.Unmarshal(body, v)
		}
		e := &OAuthError{Status: status}
		_ = json.Unmarshal(body, e)
		if e.Code == "use_dpop_nonce" && nonced && attempt == 0 {
			c.agent.Recorder.Note("use_dpop_nonce: sending the token request again with the server nonce")
			continue
		}
		return e
	}
}

// sendForm sends one attempt of postForm, with a fresh client assertion
// and, at the token endpoint of an issuer that binds tokens, a DPoP
// proof. nonced reports that the answer handed out a server nonce.
func (c *Company) sendForm(ctx context.Context, endpoint string, form url.Values) (status int, body []byte, nonced bool, err error) {
	assertion, err := c.agent.clientAssertion(c.Issuer)
	if err != nil {
		return 0, nil, false, err
	}
	form.Set("client_id", c.agent.ClientID())
	form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
	form.Set("client_assertion", assertion)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if endpoint == c.AS.TokenEndpoint && c.bindsTokens() {
		if err := c.agent.addDPoP(req, ""); err != nil {
			return 0, nil, false, err
		}
	}
	resp, err := c.agent.client.Do(req)
	if err != nil {
		return 0, nil, false, err
	}
	defer resp.Body.Close()
	nonced = c.agent.noteNonce(resp)
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, nonced, err
}

// token asks the token endpoint and stores the answer in the grant.
func (c *Company) token(ctx context.Context, form url.Values, requested []string) error {
	var tr tokenResponse
	if err := c.postForm(ctx, c.AS.TokenEndpoint, form, &tr); err != nil {
		return err
	}
	if tr.AccessToken == "" || tr.TokenType == "" {
		return errors.New("agent: token response without access_token or token_type")
	}
	granted := requested
	if tr.Scope != "" {
		granted = strings.Fields(tr.Scope)
	}
	for _, s := range granted {
		if !slices.Contains(requested, s) && requested != nil {
			return fmt.Errorf("agent: granted scope %q was not requested (spec 4.7)", s)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	refreshing := form.Get("grant_type") == "refresh_token"
	g := c.grant
	if !refreshing {
		g = &Grant{tokens: map[string]*AccessToken{}, Scopes: granted}
	} else if g == nil {
		return errors.New("agent: signed out while refreshing")
	}
	if tr.RefreshToken != "" {
		g.RefreshToken = tr.RefreshToken // spec 4.4: use the new one from now on
	}
	if g.RefreshToken == "" {
		return errors.New("agent: sign-in returned no refresh token (spec 4.4)")
	}
	g.tokens[form.Get("resource")] = &AccessToken{
		Value:  tr.AccessToken,
		Type:   tr.TokenType,
		Expiry: c.agent.opts.Now().Add(time.Duration(tr.ExpiresIn) * time.Second),
	}
	c.grant = g
	return nil
}

// SignedIn reports whether the agent holds a sign-in at the Company.
func (c *Company) SignedIn() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grant != nil
}

// Grant is a copy of the current sign-in, or nil.
func (c *Company) Grant() *Grant {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grant == nil {
		return nil
	}
	g := *c.grant
	g.Scopes = slices.Clone(g.Scopes)
	g.tokens = nil
	return &g
}

// refreshToken is the current refresh token, or "" when signed out.
func (c *Company) refreshToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grant == nil {
		return ""
	}
	return c.grant.RefreshToken
}

// currentToken is the access token for resource; nil when there is none
// or, unless just refreshed, it expires within 30 seconds.
func (c *Company) currentToken(resource string, justRefreshed bool) (*AccessToken, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grant == nil {
		return nil, errors.New("agent: not signed in")
	}
	t := c.grant.tokens[resource]
	if t == nil || !justRefreshed && c.agent.opts.Now().Add(30*time.Second).After(t.Expiry) {
		return nil, nil
	}
	return t, nil
}

// accessToken returns a token for resource, refreshing when there is none
// or it expires within 30 seconds; concurrent callers refresh once.
func (c *Company) accessToken(ctx context.Context, resource string) (*AccessToken, error) {
	if t, err := c.currentToken(resource, false); t != nil || err != nil {
		return t, err
	}
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if t, err := c.currentToken(resource, false); t != nil || err != nil {
		return t, err // refreshed meanwhile
	}
	if err := c.refreshLocked(ctx, resource); err != nil {
		return nil, err
	}
	t, err := c.currentToken(resource, true)
	if t == nil && err == nil {
		err = errors.New("agent: the refresh gave no access token")
	}
	return t, err
}

// Refresh gets a new access token with the refresh token (spec 4.4).
// Only an invalid_grant answer signs the User out (spec 5.5); after any
// other failure the sign-in is kept.
func (c *Company) Refresh(ctx context.Context) error { return c.refresh(ctx, "") }

func (c *Company) refresh(ctx context.Context, resource string) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	return c.refreshLocked(ctx, resource)
}

// refreshLocked is refresh with refreshMu held.
func (c *Company) refreshLocked(ctx context.Context, resource string) error {
	rt := c.refreshToken()
	if rt == "" {
		return errors.New("agent: not signed in")
	}
	c.agent.Recorder.Note("Refresh the access token (spec 4.4)%s", map[bool]string{true: " for " + resource}[resource != ""])
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}
	if resource != "" {
		form.Set("resource", resource)
	}
	err := c.token(ctx, form, nil)
	var oe *OAuthError
	if errors.As(err, &oe) && oe.Code == "invalid_grant" {
		// Spec 5.5: disconnected or revoked; continue signed out.
		c.signedOut(rt)
	}
	return err
}

// signedOut drops the grant whose refresh token is rt.
func (c *Company) signedOut(rt string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.grant != nil && c.grant.RefreshToken == rt {
		c.grant = nil
	}
}

// SignOut revokes the refresh token (spec 4.6, 5.5); Sessions continue
// signed out.
func (c *Company) SignOut(ctx context.Context) error {
	rt := c.refreshToken()
	if rt == "" {
		return nil
	}
	c.agent.Recorder.Note("Sign out: revoke the refresh token (spec 5.5)")
	err := c.postForm(ctx, c.AS.RevocationEndpoint, url.Values{
		"token":           {rt},
		"token_type_hint": {"refresh_token"},
	}, nil)
	if err == nil {
		c.signedOut(rt)
	}
	return err
}

// offers reports whether the issuer offers a grant type to agents.
func (c *Company) offers(grantType string) bool {
	if c.AS == nil || (c.Doc.Auth != nil && c.Doc.Auth.Disabled) {
		return false
	}
	return slices.Contains(c.AS.GrantTypesSupported, grantType)
}

// bearerError reads error="..." of a WWW-Authenticate challenge.
func bearerError(h http.Header) string {
	return challengeParam(h, "error")
}

// challengeParam reads a parameter of the WWW-Authenticate challenges.
func challengeParam(h http.Header, name string) string {
	for _, v := range h.Values("WWW-Authenticate") {
		_, params, _ := strings.Cut(v, " ")
		// Challenge parameters look like an RFC 9651 dictionary often
		// enough; fall back to a plain scan.
		if d, err := httpsfv.UnmarshalDictionary([]string{params}); err == nil {
			if m, ok := d.Get(name); ok {
				if it, ok := m.(httpsfv.Item); ok {
					return fmt.Sprint(it.Value)
				}
			}
		}
		for _, p := range strings.Split(params, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(k, name) {
				return strings.Trim(val, `"`)
			}
		}
	}
	return ""
}
