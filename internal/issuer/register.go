package issuer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// Registration rates, a minute on this replica.
const (
	registerPerAddress = 5
	registerPerCompany = 60
)

// register is the Dynamic Client Registration endpoint (RFC 7591) for MCP
// clients without a client metadata document, where the Company allows
// it (mcp.dynamic_registration): it registers public clients only, for
// the MCP server only, limited by address and per Company, and the
// registration expires unless a token is issued to it within a day.
// Elsewhere the endpoint does not exist (404).
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	if !c.Settings.MCP.DynamicRegistration {
		httpx.NotFound(w, r)
		return
	}
	// Counted before anything is read from the database.
	id := strconv.FormatInt(c.ID, 10)
	if s.limiter.Exceeded(w, "register address "+id+" "+loginAddr(r), registerPerAddress) ||
		s.limiter.Exceeded(w, "register company "+id, registerPerCompany) {
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRateLimited, "too many registrations; wait for Retry-After seconds"))
		return
	}
	if err := s.acceptPublic(ctx); err != nil {
		if errors.Is(err, fosite.ErrServerError) {
			httpx.WriteError(w, r, err)
			return
		}
		httpx.NotFound(w, r)
		return
	}
	if !httpx.IsJSON(r.Header.Get("Content-Type")) {
		registrationError(w, &agentid.RegistrationError{Code: "invalid_client_metadata", Description: "the body must be application/json (RFC 7591 §3.1)"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, agentid.MaxRegistrationBytes))
	if err != nil {
		if slowForm(w, r, err) {
			return
		}
		registrationError(w, &agentid.RegistrationError{Code: "invalid_client_metadata", Description: "the body must be at most 8 KiB"})
		return
	}
	client, err := agentid.ParseRegistration(body)
	if err != nil {
		re := (*agentid.RegistrationError)(nil)
		if !errors.As(err, &re) {
			re = &agentid.RegistrationError{Code: "invalid_client_metadata", Description: err.Error()}
		}
		registrationError(w, re)
		return
	}
	reg, err := s.store.createRegistration(ctx, c.ID, client, s.now())
	if errors.Is(err, errTooManyRegistrations) {
		w.Header().Set("Retry-After", "3600")
		httpx.WriteError(w, r, httpx.Errorf(httpx.CodeRateLimited, "this Company holds as many client registrations as it takes; try again later"))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := map[string]any{
		"client_id":                  reg.ClientID,
		"client_id_issued_at":        s.now().Unix(),
		"redirect_uris":              reg.RedirectURIs,
		"grant_types":                []string{tenant.GrantAuthorizationCode, tenant.GrantRefreshToken},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	}
	for k, v := range map[string]string{"client_name": reg.Name, "client_uri": reg.ClientURI, "logo_uri": reg.LogoURI} {
		if v != "" {
			out[k] = v
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusCreated, out)
}

// registrationError answers a refused registration (RFC 7591 §3.2.2).
func registrationError(w http.ResponseWriter, e *agentid.RegistrationError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": e.Code, "error_description": e.Description})
}

// registeredClient returns the registered client id where the Company
// takes self-registered clients; errors are *fosite.RFC6749Error.
func (s *Server) registeredClient(ctx context.Context, id string) (*agentid.Client, error) {
	c := tenant.FromContext(ctx)
	if !c.Settings.MCP.DynamicRegistration {
		return nil, fosite.ErrInvalidClient.WithHint("This Company takes no self-registered clients.")
	}
	if !validRegisteredID(id) {
		// Not one createRegistration made: nothing to look up.
		return nil, fosite.ErrInvalidClient.WithHint("This client registration is unknown or has expired; register again.")
	}
	if err := s.acceptPublic(ctx); err != nil {
		return nil, err
	}
	reg, err := s.store.registration(ctx, c.ID, id, s.now())
	if err != nil {
		return nil, fosite.ErrServerError.WithWrap(err)
	}
	if reg == nil {
		return nil, fosite.ErrInvalidClient.WithHint("This client registration is unknown or has expired; register again.")
	}
	return reg, nil
}

// isRegistered reports whether id names a registered client, not a
// client metadata document.
func isRegistered(id string) bool { return strings.HasPrefix(id, registeredPrefix) }

// validRegisteredID reports whether id has the form createRegistration
// gives: the prefix and 32 base64url characters.
func validRegisteredID(id string) bool {
	rest, ok := strings.CutPrefix(id, registeredPrefix)
	if !ok || len(rest) != registeredIDLen {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

// keepUsed keeps a registered client's registration for as long as a
// refresh token issued now could last; the token endpoint calls it once it
// issued tokens, not when the client merely authenticates.
func (s *Server) keepUsed(ctx context.Context, id string) error {
	c := tenant.FromContext(ctx)
	return s.store.keepRegistration(ctx, c.ID, id, s.now().Add(RefreshTokenLifetime(c)+time.Hour))
}
