package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/agent"
)

// common holds the flags every command takes, and the account flags of
// the commands that sign in.
type common struct {
	company, ca, caKey, cert, key, agentHost, chromium, transcript string
	allowPrivate                                                   bool
	user, password, passwordFile                                   string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.company, "company", "https://stormline.localhost:8443", "the Company's domain or https URL")
	fs.StringVar(&c.ca, "ca", "", "PEM file of certificates to trust (the dev CA)")
	fs.StringVar(&c.caKey, "ca-key", "", "the dev CA's key, to make the agent's own certificate")
	fs.StringVar(&c.cert, "cert", "", "the agent's certificate (PEM), instead of --ca-key")
	fs.StringVar(&c.key, "key", "", "the agent's certificate key (PEM)")
	fs.StringVar(&c.agentHost, "agent-host", "agent.localhost", "the host name in the agent's client_id")
	fs.StringVar(&c.chromium, "chromium", "", "Chromium binary (default: $POPPYHOST_CHROMIUM, then PATH)")
	fs.StringVar(&c.transcript, "transcript", "poppy-agent-transcript.txt", "where to write the transcript")
	fs.BoolVar(&c.allowPrivate, "allow-private", false, "allow loopback and private addresses (on by itself when --company is localhost or under .localhost)")
}

// registerAccount adds the flags of the demo account the User signs in
// with.
func (c *common) registerAccount(fs *flag.FlagSet) {
	fs.StringVar(&c.user, "user", "ada", "the account's username")
	fs.StringVar(&c.password, "password", "", "the account's password")
	fs.StringVar(&c.passwordFile, "password-file", ".data/demo-password", "file holding the password, when --password is empty")
}

// account is the User's part of a sign-in with the account flags.
func (c *common) account() (agent.UserStep, error) {
	password := c.password
	if password == "" {
		b, err := os.ReadFile(c.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--password or --password-file: %w", err)
		}
		password = strings.TrimSpace(string(b))
	}
	return agent.PasswordUser(c.user, password), nil
}

// private reports whether the agent may connect to private addresses:
// with --allow-private, or for a Company at localhost or under
// .localhost, which are loopback by definition (RFC 6761).
func (c *common) private() bool {
	domain, err := c.domain()
	if err != nil {
		return c.allowPrivate
	}
	host := domain
	if h, _, err := net.SplitHostPort(domain); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	return c.allowPrivate || host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// domain is the host[:port] of --company.
func (c *common) domain() (string, error) {
	s := c.company
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("--company %q: want a host or an https URL", c.company)
	}
	return u.Host, nil
}

// newAgent builds the agent from the flags.
func (c *common) newAgent(out io.Writer) (*agent.Agent, error) {
	var caPEM []byte
	var err error
	if c.ca != "" {
		if caPEM, err = os.ReadFile(c.ca); err != nil {
			return nil, err
		}
	}
	cert, err := c.certificate(caPEM)
	if err != nil {
		return nil, err
	}
	// A local demo on another port than 443 publishes some URLs without
	// it (the website's): send the Company's *.localhost host to that port.
	hosts := map[string]string{}
	if domain, err := c.domain(); err == nil {
		if host, port, err := net.SplitHostPort(domain); err == nil && strings.HasSuffix(host, ".localhost") {
			hosts[host] = net.JoinHostPort("127.0.0.1", port)
		}
	}
	rec := agent.NewRecorder()
	rec.Echo = out
	return agent.New(agent.Options{
		Name:         "poppy-agent",
		Host:         c.agentHost,
		TLS:          &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12},
		CAPEM:        caPEM,
		HostMap:      hosts,
		AllowPrivate: c.private(),
		Chromium:     c.chromium,
		Recorder:     rec,
	})
}

// certificate loads --cert/--key or issues one for --agent-host with the
// CA of --ca and --ca-key.
func (c *common) certificate(caPEM []byte) (*tls.Certificate, error) {
	if c.cert != "" {
		cert, err := tls.LoadX509KeyPair(c.cert, c.key)
		return &cert, err
	}
	if c.caKey == "" || caPEM == nil {
		return nil, errors.New("the agent serves its client metadata over HTTPS: give --cert and --key, or --ca and --ca-key")
	}
	keyPEM, err := os.ReadFile(c.caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := tls.X509KeyPair(caPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--ca and --ca-key: %w", err)
	}
	parent, err := x509.ParseCertificate(caCert.Certificate[0])
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: c.agentHost},
		DNSNames:     []string{c.agentHost},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &leafKey.PublicKey, caCert.PrivateKey)
	if err != nil {
		return nil, err
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(leafPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, err
	}
	// Serve the chain, so a browser that trusts the CA by its key (the
	// agent's Chromium) finds it.
	cert.Certificate = append(cert.Certificate, caCert.Certificate[0])
	return &cert, nil
}

// open makes the agent and discovers the Company at --company, within
// timeout when it is not 0. done ends the timeout, writes the transcript
// and closes the agent; it is nil with an error.
func (c *common) open(ctx context.Context, out io.Writer, timeout time.Duration) (context.Context, *agent.Agent,
	*agent.Company, func(), error) {
	domain, err := c.domain()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	a, err := c.newAgent(out)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cancel := func() {}
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	done := func() {
		cancel()
		writeTranscript(a.Recorder, c.transcript, out)
		a.Close()
	}
	co, err := a.Discover(ctx, domain)
	if err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	return ctx, a, co, done, nil
}
