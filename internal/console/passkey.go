package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// newWebAuthn is the relying party: the platform's host, whatever the
// Company, since the console is served there.
func newWebAuthn(urls tenant.URLs) (*webauthn.WebAuthn, error) {
	origin := urls.Public.Scheme + "://" + urls.Public.Host
	return webauthn.New(&webauthn.Config{
		RPID:          urls.Public.Hostname(),
		RPDisplayName: "poppyhost console",
		RPOrigins:     []string{origin},
	})
}

// maxPasskeyBody bounds a WebAuthn response.
const maxPasskeyBody = 64 << 10

// Ceremony kinds: the key of a ceremony is bound to its kind and to the
// cookie of the browser that began it.
const (
	ceremonyRegister = "register"
	ceremonySignIn   = "signin"
	ceremonySecond   = "second factor"
	ceremonyTOTP     = "totp"
)

// ceremonyKey is the key of a ceremony of kind begun with cookie secret.
func ceremonyKey(kind, secret string) []byte { return tokenHash(kind + "\x00" + secret) }

// passkeyError answers a passkey request that failed with a message for
// people, as JSON for the console's script.
func passkeyError(w http.ResponseWriter, status int, message string) {
	httpx.WriteJSON(w, status, map[string]string{"error": message})
}

// passkeyDone tells the console's script where to go next.
func passkeyDone(w http.ResponseWriter, next string) {
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"next": next})
}

// registerBegin starts adding a passkey for the signed-in member.
func (c *Console) registerBegin(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	u, err := c.staff.passkeyUser(r.Context(), m.CompanyID, m.ID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	exclude := make([]protocol.CredentialDescriptor, len(u.creds))
	for i, cr := range u.creds {
		exclude[i] = cr.Descriptor()
	}
	creation, data, err := c.webauthn.BeginRegistration(u,
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, UserVerification: protocol.VerificationRequired}),
		webauthn.WithExclusions(exclude))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.staff.saveCeremony(r.Context(), m.CompanyID, ceremonyKey(ceremonyRegister, cookieSecret(r)),
		ceremony{WebAuthn: data, StaffID: m.ID}, c.now()); err != nil {
		c.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, creation)
}

// finishing returns the request member's passkeys and the ceremony of
// kind their cookie began, with the body bounded for the browser's
// answer; or it answers (again: what to tell them) and returns nil.
func (c *Console) finishing(w http.ResponseWriter, r *http.Request, kind, again string) (*passkeyUser, *webauthn.SessionData) {
	m := memberFrom(r.Context())
	cer, err := c.staff.takeCeremony(r.Context(), m.CompanyID, ceremonyKey(kind, cookieSecret(r)), c.now())
	if err != nil || cer.WebAuthn == nil || cer.StaffID != m.ID {
		passkeyError(w, http.StatusBadRequest, again)
		return nil, nil
	}
	u, err := c.staff.passkeyUser(r.Context(), m.CompanyID, m.ID)
	if err != nil {
		c.fail(w, r, err)
		return nil, nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxPasskeyBody)
	return u, cer.WebAuthn
}

// registerFinish stores the passkey the browser created.
func (c *Console) registerFinish(w http.ResponseWriter, r *http.Request) {
	u, data := c.finishing(w, r, ceremonyRegister, "Start adding the passkey again.")
	if u == nil {
		return
	}
	m := u.Member
	cred, err := c.webauthn.FinishRegistration(u, *data, r)
	if err != nil {
		passkeyError(w, http.StatusBadRequest, "The passkey was not accepted.")
		return
	}
	name := "Passkey added " + c.now().UTC().Format(time.DateOnly)
	if err := c.staff.addPasskey(r.Context(), m, cred, name); err != nil {
		c.fail(w, r, err)
		return
	}
	passkeyDone(w, c.base(m.CompanySlug)+"/account?done=passkey")
}

// signInBegin starts a sign-in with a passkey, any of the Company's staff
// (a discoverable credential names its member).
func (c *Console) signInBegin(w http.ResponseWriter, r *http.Request) {
	co := tenant.FromContext(r.Context())
	assertion, data, err := c.webauthn.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.staff.saveCeremony(r.Context(), co.ID, ceremonyKey(ceremonySignIn, cookieSecret(r)),
		ceremony{WebAuthn: data}, c.now()); err != nil {
		c.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, assertion)
}

// signInFinish signs in the member whose passkey answered: a passkey with
// user verification is a sign-in of its own, no password needed.
func (c *Console) signInFinish(w http.ResponseWriter, r *http.Request) {
	co := tenant.FromContext(r.Context())
	cer, err := c.staff.takeCeremony(r.Context(), co.ID, ceremonyKey(ceremonySignIn, cookieSecret(r)), c.now())
	if err != nil || cer.WebAuthn == nil {
		passkeyError(w, http.StatusBadRequest, "Start signing in again.")
		return
	}
	var found *passkeyUser
	r.Body = http.MaxBytesReader(w, r.Body, maxPasskeyBody)
	_, cred, err := c.webauthn.FinishPasskeyLogin(func(_, handle []byte) (webauthn.User, error) {
		// Only this Company's staff: another Company's passkey is unknown.
		u, err := c.staff.passkeyUserByHandle(r.Context(), co.ID, handle)
		found = u
		return u, err
	}, *cer.WebAuthn, r)
	if err != nil || found == nil || cred.Authenticator.CloneWarning {
		passkeyError(w, http.StatusUnauthorized, "This passkey does not sign in here.")
		return
	}
	if err := c.staff.usedPasskey(r.Context(), found.Member, cred, c.now()); err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.startSession(w, r, found.Member, false); err != nil {
		c.fail(w, r, err)
		return
	}
	passkeyDone(w, c.base(co.Slug)+"/")
}

// secondBegin starts the passkey check of a member who signed in with a
// password.
func (c *Console) secondBegin(w http.ResponseWriter, r *http.Request) {
	m := memberFrom(r.Context())
	u, err := c.staff.passkeyUser(r.Context(), m.CompanyID, m.ID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if len(u.creds) == 0 {
		passkeyError(w, http.StatusBadRequest, "You have no passkey.")
		return
	}
	assertion, data, err := c.webauthn.BeginLogin(u, webauthn.WithUserVerification(protocol.VerificationPreferred))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.staff.saveCeremony(r.Context(), m.CompanyID, ceremonyKey(ceremonySecond, cookieSecret(r)),
		ceremony{WebAuthn: data, StaffID: m.ID}, c.now()); err != nil {
		c.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, assertion)
}

// secondFinish completes the sign-in of a member whose passkey answered.
func (c *Console) secondFinish(w http.ResponseWriter, r *http.Request) {
	u, data := c.finishing(w, r, ceremonySecond, "Start again.")
	if u == nil {
		return
	}
	m := u.Member
	cred, err := c.webauthn.FinishLogin(u, *data, r)
	if err != nil || cred.Authenticator.CloneWarning {
		passkeyError(w, http.StatusUnauthorized, "The passkey was not accepted.")
		return
	}
	if err := c.staff.usedPasskey(r.Context(), m, cred, c.now()); err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.completeSignIn(w, r, m); err != nil {
		if errors.Is(err, ErrNotFound) {
			passkeyError(w, http.StatusBadRequest, "Sign in again.")
			return
		}
		c.fail(w, r, err)
		return
	}
	passkeyDone(w, c.base(m.CompanySlug)+"/")
}
