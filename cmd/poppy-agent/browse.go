package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/poppyhost/poppyhost/agent"
)

// browse joins the agent's browser to a Session (spec 6), signed in first
// with --signin, and opens a page of the Company's website with it.
func browse(ctx context.Context, args []string, out io.Writer) error {
	var c common
	var path, scopes string
	var signIn bool
	fs := flag.NewFlagSet("browse", flag.ContinueOnError)
	c.register(fs)
	fs.StringVar(&path, "path", "/", "the page to open after joining")
	fs.BoolVar(&signIn, "signin", false, "sign in (Direct Sign-In) before joining")
	c.registerAccount(fs)
	fs.StringVar(&scopes, "scopes", "orders:read", "scopes to sign in with")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, a, co, done, err := c.open(ctx, out, 3*time.Minute)
	if err != nil {
		return err
	}
	defer done()
	if signIn {
		user, err := c.account()
		if err != nil {
			return err
		}
		if err := a.SignInDirect(ctx, co, strings.Fields(scopes), user); err != nil {
			return err
		}
	}
	s := co.NewSession()
	page, err := s.JoinBrowser(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "joined: %d %s\n", page.Status, page.URL)
	page, err = s.Browse(ctx, co.Origin+path)
	if err != nil {
		return err
	}
	b, err := a.Browser()
	if err != nil {
		return err
	}
	text, err := agent.Run(ctx, b, chromedp.Text("body"))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d %s\n%s\n", page.Status, page.URL, strings.TrimSpace(text))
	return nil
}
