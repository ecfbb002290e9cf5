package issuer

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/storage"

	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Device Sign-In parameters (RFC 8628, RFC 10027 §2).
const (
	// deviceLifetime is how long a User has to approve: long enough to
	// sign in on a phone, short enough to limit phishing (RFC 10027
	// §6.1.8 suggests minutes).
	deviceLifetime = 10 * time.Minute
	// deviceInterval is the polling interval; slow_down adds 5 seconds
	// (RFC 8628 §3.5).
	deviceInterval = 5
	// userCodeAlphabet has no vowels, so no words, and no look-alike
	// characters (RFC 8628 §6.1). 8 characters: 20^8 ≈ 2^34.6 codes.
	userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"
	userCodeLen      = 8
)

// Errors of the device grant that fosite v0.49.0 does not define
// (RFC 8628 §3.5).
var (
	errAuthorizationPending = &fosite.RFC6749Error{ErrorField: "authorization_pending", CodeField: http.StatusBadRequest,
		DescriptionField: "The User has not approved or declined the request yet; poll again after the interval."}
	errSlowDown = &fosite.RFC6749Error{ErrorField: "slow_down", CodeField: http.StatusBadRequest,
		DescriptionField: "Polling too fast: the interval is now 5 seconds longer."}
	errExpiredToken = &fosite.RFC6749Error{ErrorField: "expired_token", CodeField: http.StatusBadRequest,
		DescriptionField: "The device code has expired; start Device Sign-In again."}
	// errAccessDenied is fosite's access_denied with the token endpoint's
	// status, 400 (RFC 6749 §5.2), not the 403 fosite gives it.
	errAccessDenied = &fosite.RFC6749Error{ErrorField: "access_denied", CodeField: http.StatusBadRequest,
		DescriptionField: "The User declined the request."}
)

// newUserCode returns a random user code, without the dash it is shown
// with.
func newUserCode() string {
	b := make([]byte, userCodeLen)
	for i := range b {
		b[i] = userCodeAlphabet[randIndex(len(userCodeAlphabet))]
	}
	return string(b)
}

func randIndex(n int) int {
	// Rejection sampling keeps the distribution uniform.
	var b [1]byte
	limit := 256 - 256%n
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err)
		}
		if int(b[0]) < limit {
			return int(b[0]) % n
		}
	}
}

// NormalUserCode is a user code as typed, uppercased without separators;
// "" when it cannot be one of ours.
func NormalUserCode(s string) string {
	s = strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(s))
	if len(s) != userCodeLen {
		return ""
	}
	for _, r := range s {
		if !strings.ContainsRune(userCodeAlphabet, r) {
			return ""
		}
	}
	return s
}

// DisplayUserCode formats a user code for people: WDJB-MJHT.
func DisplayUserCode(code string) string {
	return code[:4] + "-" + code[4:]
}

// deviceGrant is the token endpoint handler of the device_code grant
// (RFC 8628 §3.4-3.5), written on fosite's handler interfaces.
type deviceGrant struct {
	store  *Store
	codes  oauth2.RefreshTokenStrategy
	access oauth2.AccessTokenStrategy
	now    func() time.Time
}

// CanSkipClientAuth implements fosite.TokenEndpointHandler: every poll
// carries the client assertion (spec 4.3).
func (d *deviceGrant) CanSkipClientAuth(context.Context, fosite.AccessRequester) bool { return false }

// CanHandleTokenEndpointRequest implements fosite.TokenEndpointHandler.
func (d *deviceGrant) CanHandleTokenEndpointRequest(_ context.Context, r fosite.AccessRequester) bool {
	return r.GetGrantTypes().ExactOne(tenant.GrantDeviceCode)
}

// HandleTokenEndpointRequest implements fosite.TokenEndpointHandler: it
// records the poll and answers pending, slow_down, expiry and denial, or
// loads the approved grant into the request. Tokens are issued, and the
// device code used up, in PopulateTokenEndpointResponse.
func (d *deviceGrant) HandleTokenEndpointRequest(ctx context.Context, r fosite.AccessRequester) error {
	code := r.GetRequestForm().Get("device_code")
	if code == "" {
		return fosite.ErrInvalidRequest.WithHint("device_code is required.")
	}
	now := d.now()
	// Only the client the code was issued to finds it: another client's
	// polls must not count towards its interval (RFC 8628 §3.4).
	p, err := d.store.pollDevice(ctx, code, r.GetClient().GetID(), now)
	if errors.Is(err, errNoDevice) {
		return fosite.ErrInvalidGrant.WithHint("The device code is not valid, or was issued to another client.")
	}
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	switch {
	case !now.Before(p.Expires):
		return errExpiredToken
	case p.Status == "used":
		return fosite.ErrInvalidGrant.WithHint("The device code was already used.")
	case p.Status == "denied":
		return errAccessDenied
	case p.TooFast:
		return errSlowDown
	case p.Status == "pending":
		return errAuthorizationPending
	}
	sess, ok := r.GetSession().(*Session)
	if !ok || p.AccountID == nil {
		return fosite.ErrServerError.WithHint("The approved request has no account.")
	}
	sess.AccountID = *p.AccountID
	sess.Resource = p.Resource
	sess.SetExpiresAt(fosite.AccessToken, now.Add(AccessTokenLifetime(tenant.FromContext(ctx))).Round(time.Second))
	sess.SetExpiresAt(fosite.RefreshToken, now.Add(RefreshTokenLifetime(tenant.FromContext(ctx))).Round(time.Second))
	r.SetRequestedScopes(p.Scopes)
	for _, s := range p.Granted {
		r.GrantScope(s)
	}
	return nil
}

// PopulateTokenEndpointResponse implements fosite.TokenEndpointHandler:
// the device code is used up and the tokens stored in one transaction, so
// it yields tokens once and nothing is lost if storing fails.
func (d *deviceGrant) PopulateTokenEndpointResponse(ctx context.Context, r fosite.AccessRequester, resp fosite.AccessResponder) (err error) {
	if !d.CanHandleTokenEndpointRequest(ctx, r) {
		return fosite.ErrUnknownRequest
	}
	access, accessSig, err := d.access.GenerateAccessToken(ctx, r)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	refresh, refreshSig, err := d.codes.GenerateRefreshToken(ctx, r)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	ctx, err = storage.MaybeBeginTx(ctx, d.store)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	defer func() {
		if err != nil {
			_ = storage.MaybeRollbackTx(ctx, d.store)
		}
	}()
	used, err := d.store.useDevice(ctx, r.GetRequestForm().Get("device_code"))
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	if !used {
		return fosite.ErrInvalidGrant.WithHint("The device code was already used.")
	}
	stored := r.Sanitize(nil)
	if err = d.store.CreateAccessTokenSession(ctx, accessSig, stored); err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	if err = d.store.CreateRefreshTokenSession(ctx, refreshSig, accessSig, stored); err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	if err = storage.MaybeCommitTx(ctx, d.store); err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	resp.SetAccessToken(access)
	resp.SetTokenType("bearer")
	resp.SetExpiresIn(time.Until(r.GetSession().GetExpiresAt(fosite.AccessToken)).Round(time.Second))
	resp.SetScopes(r.GetGrantedScopes())
	resp.SetExtra("refresh_token", refresh)
	return nil
}
