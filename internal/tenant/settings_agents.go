package tenant

import "slices"

// The Personal Agents a Company accepts, and how long and how much they
// may use it.

// Agent acceptance policies.
const (
	AcceptAll      = "all"
	AcceptListed   = "listed"
	AcceptUnlisted = "unlisted"
)

// AgentPolicy decides which Personal Agents a Company accepts, by exact
// client_id: a shared origin does not make two clients one (spec 5.3).
type AgentPolicy struct {
	// Accept is all, listed (only ClientIDs) or unlisted (all but
	// ClientIDs).
	Accept    string   `json:"accept"`
	ClientIDs []string `json:"client_ids"`
	// SignInRefused refuses accepted Personal Agents sign-in, by client_id:
	// the sign-in types refused (authorization_code, the device_code
	// grant), or every one when the list is empty. They get
	// unauthorized_client and continue signed out (spec 4.1); refresh
	// tokens issued earlier keep working.
	SignInRefused map[string][]string `json:"sign_in_refused"`
	// RequireSignature refuses Session requests without a valid Web Bot
	// Auth signature (spec 5.3). Off, a missing or bad signature only goes
	// unrecognised: it never makes a Session invalid.
	RequireSignature bool `json:"require_signature"`
}

// SignInAllowed reports whether the policy lets clientID use the sign-in
// grant type grant.
func (p AgentPolicy) SignInAllowed(clientID, grant string) bool {
	refused, ok := p.SignInRefused[clientID]
	if !ok {
		return true
	}
	return len(refused) > 0 && !slices.Contains(refused, grant)
}

// Accepts reports whether the policy accepts clientID.
func (p AgentPolicy) Accepts(clientID string) bool {
	listed := false
	for _, id := range p.ClientIDs {
		if id == clientID {
			listed = true
			break
		}
	}
	switch p.Accept {
	case AcceptListed:
		return listed
	case AcceptUnlisted:
		return !listed
	default:
		return true
	}
}

// SessionSettings configures Sessions (spec 5.5: the Company decides how
// long a Session lasts).
type SessionSettings struct {
	// IdleTimeoutSeconds ends a Session unused for this long.
	IdleTimeoutSeconds int `json:"idle_timeout_seconds"`
}

// ConsoleSettings configure the Company console (docs/console.md).
type ConsoleSettings struct {
	// RequireSecondFactor makes every staff member who signs in with a
	// password also prove a passkey or a TOTP code.
	RequireSecondFactor bool `json:"require_second_factor"`
}

// RateLimits are requests per minute (spec 5.6). Before a Session header
// is verified, requests count against their client address; after, against
// the Personal Agent and the Session.
type RateLimits struct {
	PerAgent   int `json:"per_agent"`
	PerSession int `json:"per_session"`
	PerAddress int `json:"per_address"`
}
