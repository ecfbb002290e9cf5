// Command doctor checks a Company's Poppy deployment from the outside, as
// a Personal Agent sees it, given only its domain (package doctor): one
// line a check, pass or fail, with the spec's section and a fix hint;
// --json for CI; exit status 1 when a check fails.
//
//	go run ./cmd/doctor --company stormline.localhost:8443 --ca .data/dev-ca.pem
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/doctor"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doctor:", err)
		os.Exit(1)
	}
}

// run checks the Company the flags name and fails when any check fails.
func run(ctx context.Context, args []string, out io.Writer) error {
	var company, ca string
	var allowPrivate, asJSON bool
	var timeout time.Duration
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&company, "company", "https://stormline.localhost:8443", "the Company's domain or https URL")
	fs.StringVar(&ca, "ca", "", "PEM file of certificates to trust besides the system's (the dev CA)")
	fs.BoolVar(&allowPrivate, "allow-private", false, "allow loopback and private addresses (on by itself when --company is localhost or under .localhost)")
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON")
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "time allowed to each check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	domain, err := domainOf(company)
	if err != nil {
		return err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return err
		}
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--ca %s: no certificate", ca)
		}
	}
	client := safehttp.New(safehttp.Options{AllowPrivate: allowPrivate || safehttp.IsLocalhost(domain), RootCAs: roots,
		Resolver: safehttp.LocalhostResolver{}, Timeout: timeout, UserAgent: "poppyhost-doctor"})
	rep := doctor.Run(ctx, domain, doctor.Options{Client: client, Timeout: timeout})
	if asJSON {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return errors.New("failed checks: " + strings.Join(rep.Failed(), ", "))
	}
	return nil
}

// domainOf is the host[:port] of --company, a host or an https URL.
func domainOf(company string) (string, error) {
	s := company
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("--company %q: want a host or an https URL", company)
	}
	return u.Host, nil
}
