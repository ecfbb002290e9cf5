package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// delegationLifetime is how long a delegation lasts; spec 5.2 allows 24h.
const delegationLifetime = time.Hour

// delegatedKey signs one User ID's Session JWTs (spec 5.2).
type delegatedKey struct {
	key        *ecdsa.PrivateKey
	kid        string // JWK thumbprint
	delegation string
	exp        int64
}

// delegated returns the current delegated key for a User ID, making a new
// key and delegation when there is none or it expires within 5 minutes.
func (a *Agent) delegated(userID string) (*delegatedKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if k := a.keys[userID]; k != nil && k.exp-now > 300 {
		return k, nil
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	exp := now + int64(delegationLifetime/time.Second)
	// Spec 5.2: nothing about the User or the Company in a delegation.
	dlg, err := signES256(a.key,
		map[string]any{"typ": "pap-delegation+jwt", "kid": a.kid},
		map[string]any{
			"iss": a.ClientID(),
			"cnf": map[string]any{"jwk": publicJWK(&key.PublicKey)},
			"iat": now,
			"exp": exp,
			"jti": randomID(16),
		})
	if err != nil {
		return nil, err
	}
	k := &delegatedKey{key: key, kid: thumbprint(&key.PublicKey), delegation: dlg, exp: exp}
	a.keys[userID] = k
	return k, nil
}

// Session is one Session of the User at a Company (spec 5): its sid and
// the User ID. Requests carry a fresh Session JWT each, and the access
// token of the Company's sign-in unless the Session is signed out. It is
// safe for concurrent use.
type Session struct {
	Company *Company
	// SID is the sid; a session_ended answer replaces it (spec 5.5), so
	// read it with CurrentSID while requests are in flight.
	SID    string
	UserID string
	// SignedOut keeps the access token off this Session's requests; set
	// it before sending any.
	SignedOut bool
	agent     *Agent
	mu        sync.Mutex // guards SID and joined
	// joined is set once a browser joined this Session (spec 6).
	joined bool
}

// CurrentSID is the Session's sid now.
func (s *Session) CurrentSID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.SID
}

// joinedAs reports whether a browser joined this Session, and its sid.
func (s *Session) joinedAs() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined, s.SID
}

// endSession moves to a new Session with a new sid, not joined, unless
// another request already did after this one was sent with sent.
func (s *Session) endSession(sent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.SID == sent {
		s.SID = randomID(16)
		s.joined = false
	}
}

// NewSession starts a new Session with a random sid (spec 5.2).
func (c *Company) NewSession() *Session {
	return &Session{Company: c, SID: randomID(16), UserID: c.agent.userID(c.Identifier), agent: c.agent}
}

// sessionJWT signs the Poppy-Session header for one request (spec 5.2).
func (s *Session) sessionJWT(method, target, accessToken string) (string, error) {
	return s.sessionJWTFor(s.CurrentSID(), method, target, accessToken)
}

// sessionJWTFor signs the Poppy-Session header with the given sid.
func (s *Session) sessionJWTFor(sid, method, target, accessToken string) (string, error) {
	k, err := s.agent.delegated(s.UserID)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	claims := map[string]any{
		"iss": s.agent.ClientID(),
		"aud": s.Company.Identifier,
		"sid": sid,
		"sub": s.UserID,
		"htm": method,
		"htu": u.Scheme + "://" + u.Host + u.EscapedPath(),
		"iat": s.agent.now(),
		"jti": randomID(16),
	}
	if accessToken != "" {
		claims["ath"] = tokenHash(accessToken)
	}
	return signES256(k.key, map[string]any{"typ": "poppy-session+jwt", "kid": k.kid, "pap_dlg": k.delegation}, claims)
}

// Request is one request to a Session destination.
type Request struct {
	Method string
	URL    string
	// JSON is marshalled as the body when Body is nil.
	JSON        any
	Body        []byte
	ContentType string
	Header      http.Header
	// Resource is the service whose token to use ("" for the default).
	Resource string
}

// Response is a protocol response, its body read.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Error is the spec's JSON error code of the body, if any.
func (r *Response) Error() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error
}

// Decode decodes the JSON body into v.
func (r *Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("agent: %d answer is not JSON: %w", r.Status, err)
	}
	return nil
}

// Do sends a request with the Session header and, when signed in, the
// access token. It follows spec 5.5 (session_ended: once more in a new
// Session), 5.6 (429: wait Retry-After) and 5.5 (invalid_token: refresh,
// else continue signed out).
func (s *Session) Do(ctx context.Context, r Request) (*Response, error) {
	resp, err := s.Open(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// Open is Do for a response the caller reads itself, such as a stream.
func (s *Session) Open(ctx context.Context, r Request) (*http.Response, error) {
	body := r.Body
	if body == nil && r.JSON != nil {
		b, err := json.Marshal(r.JSON)
		if err != nil {
			return nil, err
		}
		body = b
		if r.ContentType == "" {
			r.ContentType = "application/json"
		}
	}
	ended, refreshed, nonced := false, false, false
	for attempt := 0; ; attempt++ {
		sid := s.CurrentSID()
		resp, err := s.send(ctx, sid, r, body)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusTooManyRequests && attempt < 5:
			wait := retryAfter(resp.Header, time.Second)
			resp.Body.Close()
			if err := sleep(ctx, wait); err != nil {
				return nil, err
			}
			continue
		case resp.StatusCode == http.StatusBadRequest && !ended && peekError(resp) == "session_ended":
			// Spec 5.5: a new Session with a new sid, once.
			resp.Body.Close()
			ended = true
			s.agent.Recorder.Note("session_ended: continuing in a new Session")
			s.endSession(sid)
			continue
		case resp.StatusCode == http.StatusUnauthorized && !nonced && resp.Header.Get("DPoP-Nonce") != "" &&
			bearerError(resp.Header) == "use_dpop_nonce":
			// RFC 9449 §9: once more, with the nonce send kept.
			resp.Body.Close()
			nonced = true
			s.agent.Recorder.Note("use_dpop_nonce: sending the request again with the server nonce")
			continue
		case resp.StatusCode == http.StatusUnauthorized && !refreshed && s.signedIn() && bearerError(resp.Header) == "invalid_token":
			resp.Body.Close()
			refreshed = true
			if err := s.Company.refresh(ctx, r.Resource); err != nil {
				// Spec 5.5: only invalid_grant signs the User out (the
				// grant is gone then); any other failure keeps it.
				var oe *OAuthError
				if !errors.As(err, &oe) || oe.Code != "invalid_grant" {
					return nil, fmt.Errorf("agent: refreshing after invalid_token: %w", err)
				}
				s.agent.Recorder.Note("refresh refused (invalid_grant): continuing signed out")
			}
			continue
		}
		return resp, nil
	}
}

// send signs and sends one attempt in the Session sid.
func (s *Session) send(ctx context.Context, sid string, r Request, body []byte) (*http.Response, error) {
	if !isHTTPS(r.URL) {
		return nil, fmt.Errorf("agent: %q is not an HTTPS URL (spec 3)", r.URL)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = nil, nil, 0
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	if r.ContentType != "" {
		req.Header.Set("Content-Type", r.ContentType)
	}
	var token, scheme string
	if s.signedIn() {
		t, err := s.Company.accessToken(ctx, r.Resource)
		if err != nil {
			return nil, err
		}
		token, scheme = t.Value, t.Type
	}
	jwt, err := s.sessionJWTFor(sid, r.Method, r.URL, token)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Poppy-Session", jwt)
	if token != "" {
		req.Header.Set("Authorization", scheme+" "+token)
		if isDPoP(scheme) {
			// RFC 9449 §7: a bound token goes with a proof of its key.
			if err := s.agent.addDPoP(req, token); err != nil {
				return nil, err
			}
		}
	}
	req.Header.Set("Poppy-Version", "1.0")
	s.agent.signBot(req)
	if !s.agent.opts.NoOperations {
		req.Header.Set("Poppy-Extensions", `"operations";v="3"`)
	}
	resp, err := s.agent.client.Do(req)
	if err == nil {
		s.agent.noteNonce(resp)
	}
	return resp, err
}

// signedIn reports whether this Session's requests carry an access token.
func (s *Session) signedIn() bool { return !s.SignedOut && s.Company.SignedIn() }

// peekError reads a JSON error code and puts the body back.
func peekError(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
