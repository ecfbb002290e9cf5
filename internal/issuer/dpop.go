package issuer

import (
	"errors"
	"net/http"
	"net/url"
	"slices"

	"github.com/ory/fosite"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// errInvalidDPoPProof is RFC 9449 §5's refusal of a token request's proof.
var errInvalidDPoPProof = &fosite.RFC6749Error{ErrorField: "invalid_dpop_proof", CodeField: http.StatusBadRequest,
	DescriptionField: "The DPoP proof is missing or not valid (RFC 9449)."}

// errUseDPoPNonce is RFC 9449 §8's answer to a proof without the server
// nonce the Company requires; the DPoP-Nonce header carries one.
var errUseDPoPNonce = &fosite.RFC6749Error{ErrorField: "use_dpop_nonce", CodeField: http.StatusBadRequest,
	DescriptionField: "The DPoP proof must carry the server nonce from the DPoP-Nonce header (RFC 9449 §8)."}

// checkProof verifies a token request's DPoP proof, with the server nonce
// when the Company requires one, before the grant is looked at: fosite
// uses up a code's PKCE record while it checks the request, so a proof
// refused after that would leave the client a code it cannot retry with
// the nonce (RFC 9449 §8). It returns nil when the request has no proof
// or the Company does not bind tokens (bindDPoP then decides).
func (s *Server) checkProof(w http.ResponseWriter, r *http.Request, c *tenant.Company) (*dpop.Proof, error) {
	if _, sent := r.Header[http.CanonicalHeaderKey(dpop.Header)]; !sent || !c.Settings.Auth.BindsTokens() {
		return nil, nil
	}
	p, nonce, err := s.verifyProof(r, c)
	if nonce != "" {
		w.Header().Set(dpop.NonceHeader, nonce)
	}
	return p, err
}

// verifyProof checks the request's proof for the token endpoint, as an
// OAuth error when it is refused. nonce, when set, is the server nonce for
// the answer's DPoP-Nonce header: the one a refusal asks for, or a newer
// one than the accepted proof's.
func (s *Server) verifyProof(r *http.Request, c *tenant.Company) (p *dpop.Proof, nonce string, err error) {
	proof, err := dpop.FromRequest(r)
	if err == nil {
		tokenURL := &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath}
		p, err = s.proofs.Verify(r.Context(), proof, dpop.Request{CompanyID: c.ID, Method: r.Method, URL: tokenURL,
			Nonce: c.Settings.Auth.DPoPNonce})
	}
	if perr := (*dpop.Error)(nil); errors.As(err, &perr) {
		if perr.Nonce != "" {
			return nil, perr.Nonce, errUseDPoPNonce.WithHint(perr.Description + ".")
		}
		return nil, "", errInvalidDPoPProof.WithHint(perr.Description + ".")
	}
	if err != nil {
		return nil, "", fosite.ErrServerError.WithWrap(err)
	}
	return p, p.NextNonce, nil
}

// bindDPoP decides whether a token request's access token is bound (spec
// 4.5; RFC 9449 §5, §6), given the proof checkProof verified. A Company
// that binds tokens binds those of every request with a proof, except
// tokens for an MCP server that takes Bearer tokens only (spec 7); one
// that requires DPoP refuses requests without a proof. A grant bound once
// stays bound: every refresh proves the same key, even after the Company
// stopped binding new tokens. sess.JKT and sess.Bind carry the outcome to
// the access token.
func (s *Server) bindDPoP(r *http.Request, c *tenant.Company, sess *Session, p *dpop.Proof) error {
	bearerOnly := c.Settings.MCP.BearerTokens && slices.Equal(sess.Audience, []string{s.urls.MCPResource(c)})
	if _, sent := r.Header[http.CanonicalHeaderKey(dpop.Header)]; !sent {
		switch {
		case sess.JKT != "":
			return errInvalidDPoPProof.WithHint("This grant's access tokens are DPoP-bound: send a DPoP proof made with the same key.")
		case c.Settings.Auth.DPoP == tenant.DPoPRequired && !bearerOnly:
			return errInvalidDPoPProof.WithHint("This Company binds access tokens with DPoP: send a DPoP proof (its metadata lists dpop_signing_alg_values_supported).")
		}
		return nil
	}
	if p == nil {
		if sess.JKT == "" {
			// A Company that does not bind tokens ignores proofs, and
			// answers token_type Bearer (RFC 9449 §5).
			return nil
		}
		var err error
		if p, _, err = s.verifyProof(r, c); err != nil {
			return err
		}
	}
	if sess.JKT != "" && p.JKT != sess.JKT {
		return errInvalidDPoPProof.WithHint("The DPoP proof's key is not the key this grant's tokens are bound to.")
	}
	sess.JKT = p.JKT
	sess.Bind = !bearerOnly
	return nil
}
