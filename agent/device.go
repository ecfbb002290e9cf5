package agent

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// DeviceCode is what the agent shows the User in Device Sign-In (spec
// 4.3), with the Company's name and domain. device_code stays inside.
type DeviceCode struct {
	Company                 string
	Domain                  string
	UserCode                string
	VerificationURI         string
	VerificationURIComplete string
	ExpiresIn               int
}

// DeviceUser is where the User sees the code and link and signs in on
// their own device; it returns once it has shown them (or done the step).
type DeviceUser func(ctx context.Context, dc DeviceCode) error

// SignInDevice signs the User in with Device Sign-In (RFC 8628, spec
// 4.3): a code for scopes, the link's host checked against the issuer and
// its protected resources, shown through show, then polling every
// interval (longer after slow_down) until the User decides.
func (a *Agent) SignInDevice(ctx context.Context, c *Company, scopes []string, show DeviceUser) error {
	const grant = "urn:ietf:params:oauth:grant-type:device_code"
	if !c.offers(grant) || c.AS.DeviceAuthorizationEndpoint == "" {
		return ErrNoSignIn
	}
	a.Recorder.Note("Device Sign-In at %s for %s (spec 4.3)", c.Issuer, strings.Join(scopes, " "))
	var da struct {
		DeviceCode              string `json:"device_code"`
		UserCode                string `json:"user_code"`
		VerificationURI         string `json:"verification_uri"`
		VerificationURIComplete string `json:"verification_uri_complete"`
		ExpiresIn               int    `json:"expires_in"`
		Interval                int    `json:"interval"`
	}
	if err := c.postForm(ctx, c.AS.DeviceAuthorizationEndpoint, url.Values{"scope": {strings.Join(scopes, " ")}}, &da); err != nil {
		return err
	}
	for _, link := range []string{da.VerificationURI, da.VerificationURIComplete} {
		if link != "" && !c.linkAllowed(link) {
			return fmt.Errorf("agent: the sign-in link %q is not on the issuer's hosts (spec 4.3)", link)
		}
	}
	if err := show(ctx, DeviceCode{
		Company: c.Name(), Domain: c.Domain, UserCode: da.UserCode,
		VerificationURI: da.VerificationURI, VerificationURIComplete: da.VerificationURIComplete,
		ExpiresIn: da.ExpiresIn,
	}); err != nil {
		return err
	}
	interval := time.Duration(max(da.Interval, 5)) * time.Second
	deadline := a.opts.Now().Add(time.Duration(max(da.ExpiresIn, 60)) * time.Second)
	for a.opts.Now().Before(deadline) {
		err := c.token(ctx, url.Values{"grant_type": {grant}, "device_code": {da.DeviceCode}}, scopes)
		var oe *OAuthError
		switch {
		case err == nil:
			return nil
		case !errors.As(err, &oe):
			return err
		case oe.Code == "authorization_pending":
		case oe.Code == "slow_down":
			interval += 5 * time.Second
		case oe.Code == "access_denied":
			return ErrSignInDeclined
		default:
			return err
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
	return errors.New("agent: the device code expired")
}

// linkAllowed checks a sign-in link's host: the issuer's, one of its
// protected resources', or a subdomain of either (spec 4.3).
func (c *Company) linkAllowed(link string) bool {
	u, err := url.Parse(link)
	if err != nil || u.Scheme != "https" {
		return false
	}
	host := strings.ToLower(u.Hostname())
	allowed := append([]string{c.Issuer}, c.AS.ProtectedResources...)
	for _, a := range allowed {
		au, err := url.Parse(a)
		if err != nil {
			continue
		}
		h := strings.ToLower(au.Hostname())
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

// DeviceInBrowser returns a DeviceUser that plays the User in the agent's
// own browser: it opens the link, presses Continue, and approves with
// user. Tests use it; a real User would use their own device.
func (a *Agent) DeviceInBrowser(user UserStep) DeviceUser {
	return func(ctx context.Context, dc DeviceCode) error {
		b, err := a.Browser()
		if err != nil {
			return err
		}
		link := dc.VerificationURIComplete
		if link == "" {
			link = dc.VerificationURI
		}
		if _, err := b.Load(ctx, chromedp.Navigate(link)); err != nil {
			return err
		}
		if dc.VerificationURIComplete == "" {
			if err := b.Do(ctx, chromedp.SendKeys(`input[name="user_code"]`, dc.UserCode)); err != nil {
				return err
			}
		}
		if _, err := b.Load(ctx, clickJS(`input[name="user_code"]`)); err != nil {
			return err
		}
		return user(ctx, b)
	}
}
