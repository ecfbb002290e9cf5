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

// bindDPoP checks a token request's DPoP proof and decides whether its
// access token is bound (spec 4.5; RFC 9449 §5, §6). A Company that binds
// tokens binds those of every request with a proof, except tokens for an
// MCP server that takes Bearer tokens only (spec 7); one that requires
// DPoP refuses requests without a proof. A grant bound once stays bound:
// every refresh proves the same key. sess.JKT and sess.Bind carry the
// outcome to the access token.
func (s *Server) bindDPoP(r *http.Request, c *tenant.Company, sess *Session) error {
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
	if !c.Settings.Auth.BindsTokens() && sess.JKT == "" {
		// A Company that does not bind tokens ignores proofs, and answers
		// token_type Bearer (RFC 9449 §5).
		return nil
	}
	proof, err := dpop.FromRequest(r)
	var p *dpop.Proof
	if err == nil {
		tokenURL := &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath}
		p, err = s.proofs.Verify(r.Context(), proof, dpop.Request{CompanyID: c.ID, Method: r.Method, URL: tokenURL})
	}
	if perr := (*dpop.Error)(nil); errors.As(err, &perr) {
		return errInvalidDPoPProof.WithHint(perr.Description + ".")
	}
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	if sess.JKT != "" && p.JKT != sess.JKT {
		return errInvalidDPoPProof.WithHint("The DPoP proof's key is not the key this grant's tokens are bound to.")
	}
	sess.JKT = p.JKT
	sess.Bind = !bearerOnly
	return nil
}
