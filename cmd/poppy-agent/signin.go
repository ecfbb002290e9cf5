package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/agent"
)

// signin signs in with Direct or Device Sign-In (the User's part played
// in headless Chromium with the given account), refreshes, calls nothing,
// and signs out again.
func signin(ctx context.Context, args []string, out io.Writer) error {
	var c common
	var scopes string
	var device, keep bool
	fs := flag.NewFlagSet("signin", flag.ContinueOnError)
	c.register(fs)
	c.registerAccount(fs)
	fs.StringVar(&scopes, "scopes", "orders:read", "scopes to ask for")
	fs.BoolVar(&device, "device", false, "use Device Sign-In instead of Direct Sign-In")
	fs.BoolVar(&keep, "keep", false, "stay signed in (skip the sign-out)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	user, err := c.account()
	if err != nil {
		return err
	}
	ctx, a, co, done, err := c.open(ctx, out, 3*time.Minute)
	if err != nil {
		return err
	}
	defer done()
	if device {
		err = a.SignInDevice(ctx, co, strings.Fields(scopes), func(ctx context.Context, dc agent.DeviceCode) error {
			fmt.Fprintf(out, "Sign in to %s (%s) at %s with the code %s\n", dc.Company, dc.Domain, dc.VerificationURI, dc.UserCode)
			return a.DeviceInBrowser(user)(ctx, dc)
		})
	} else {
		err = a.SignInDirect(ctx, co, strings.Fields(scopes), user)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "signed in with %s\n", strings.Join(co.Grant().Scopes, " "))
	if err := co.Refresh(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "refreshed")
	if keep {
		return nil
	}
	if err := co.SignOut(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "signed out")
	return nil
}
