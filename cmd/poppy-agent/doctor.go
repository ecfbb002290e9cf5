package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/doctor"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// doctorCmd checks a Company's deployment from the outside (package
// doctor) and fails when any check fails.
func doctorCmd(ctx context.Context, args []string, out io.Writer) error {
	var c common
	var asJSON bool
	var timeout time.Duration
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.StringVar(&c.company, "company", "https://stormline.localhost:8443", "the Company's domain or https URL")
	fs.StringVar(&c.ca, "ca", "", "PEM file of certificates to trust besides the system's (the dev CA)")
	fs.BoolVar(&c.allowPrivate, "allow-private", false, "allow loopback and private addresses (on by itself when --company is localhost or under .localhost)")
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON")
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "time allowed to each check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	domain, err := c.domain()
	if err != nil {
		return err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err != nil {
			return err
		}
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--ca %s: no certificate", c.ca)
		}
	}
	client := safehttp.New(safehttp.Options{AllowPrivate: c.private(), RootCAs: roots,
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
