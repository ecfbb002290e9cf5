package devca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	caCommonName = "poppyhost dev CA"
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// Backdating absorbs clock skew between the issuing process and clients
	// (containers and VMs are often a few seconds or minutes apart).
	backdate = time.Hour
	// renewBefore makes a long-running server replace a cached leaf well
	// before clients would start rejecting it.
	renewBefore = 24 * time.Hour
	// maxCached bounds memory use: each distinct SNI name costs one key and
	// certificate, and the names are chosen by clients.
	maxCached = 10000

	certFile = "dev-ca.pem"
	keyFile  = "dev-ca-key.pem"
	lockFile = ".dev-ca.lock"
)

// CA issues TLS server certificates for any host name asked for by SNI.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu    sync.Mutex
	cache map[string]*tls.Certificate
}

// New creates an in-memory CA (ECDSA P-256 key, self-signed, valid 10 years,
// CommonName "poppyhost dev CA").
func New() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Only leaves are ever signed, so forbid intermediates outright.
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA certificate: %w", err)
	}
	return fromDER(der, key)
}

// Load reads dir/dev-ca.pem and dir/dev-ca-key.pem, creating both (and dir,
// with mode 0700; the key file gets mode 0600) when either is missing.
//
// Processes calling Load on the same dir at the same time agree on one CA: a
// lock file (dir/.dev-ca.lock, flock) serialises creation, and the files are
// written to temporary names and renamed into place so that a crash never
// leaves a half-written file behind.
func Load(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create dev CA dir: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	certPath := filepath.Join(dir, certFile)
	keyPath := filepath.Join(dir, keyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := parse(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load dev CA from %s: %w", dir, err)
		}
		return ca, nil
	case certErr != nil && !errors.Is(certErr, os.ErrNotExist):
		return nil, fmt.Errorf("read dev CA certificate: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("read dev CA key: %w", keyErr)
	}

	// One or both files are missing. A lone file is useless (a certificate
	// without its key cannot sign; a key without its certificate is not
	// trusted by anyone), so start over with a fresh pair.
	ca, err := New()
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("encode dev CA key: %w", err)
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	// Key first: if we crash in between, the certificate is missing and the
	// next Load regenerates both instead of trusting a stale pair.
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write dev CA key: %w", err)
	}
	if err := writeAtomic(certPath, ca.certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write dev CA certificate: %w", err)
	}
	return ca, nil
}

// CertPEM returns the CA certificate in PEM form (what clients must trust).
func (ca *CA) CertPEM() []byte {
	return bytes.Clone(ca.certPEM)
}

// Pool returns an x509.CertPool holding only the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	// A fresh pool each time, so callers may add to it without affecting
	// each other.
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// ServerTLSConfig returns a tls.Config whose GetCertificate issues (and
// caches) a leaf certificate for the ClientHello's ServerName. Without SNI
// (the client dialled an IP address) it serves a leaf for "localhost",
// 127.0.0.1 and ::1. Server names that are not valid DNS names are refused.
//
// Leave Certificates empty: crypto/tls serves Certificates[0] instead of
// calling GetCertificate when the client sends no SNI.
func (ca *CA) ServerTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: ca.getCertificate,
	}
}

// Issue returns a leaf certificate for the given DNS names and IP literals.
// The first name becomes the subject CommonName. Names are not cached.
func (ca *CA) Issue(names ...string) (*tls.Certificate, error) {
	if len(names) == 0 {
		return nil, errors.New("issue certificate: no names given")
	}
	var dnsNames []string
	var ips []net.IP
	for _, name := range names {
		if ip := net.ParseIP(name); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if !validDNSName(strings.TrimPrefix(name, "*.")) {
			return nil, fmt.Errorf("issue certificate: %q is neither a DNS name nor an IP address", name)
		}
		dnsNames = append(dnsNames, name)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(leafValidity)
	// A leaf outliving its issuer would fail verification anyway; clamping
	// keeps the renewal logic in getCertificate honest.
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf certificate for %v: %w", names, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse leaf certificate: %w", err)
	}
	return &tls.Certificate{
		// Sending the CA along lets clients that only pinned the CA
		// certificate still see the whole chain in diagnostics.
		Certificate: [][]byte{der, ca.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// getCertificate implements tls.Config.GetCertificate.
func (ca *CA) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	names := []string{name}
	if name == "" {
		names = []string{"localhost", "127.0.0.1", "::1"}
	} else if !validDNSName(name) {
		return nil, fmt.Errorf("dev CA: refusing certificate for invalid server name %q", hello.ServerName)
	}

	ca.mu.Lock()
	cert, ok := ca.cache[name]
	ca.mu.Unlock()
	if ok && time.Until(cert.Leaf.NotAfter) > renewBefore {
		return cert, nil
	}

	// Issue without holding the lock so one slow signature does not stall
	// every other handshake; two racing handshakes for the same new name
	// merely issue twice and the last one wins the cache slot.
	cert, err := ca.Issue(names...)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.cache == nil || len(ca.cache) >= maxCached {
		ca.cache = make(map[string]*tls.Certificate)
	}
	ca.cache[name] = cert
	return cert, nil
}

// validDNSName reports whether name is a plausible host name: dot-separated
// labels of letters, digits, hyphens and underscores, no label empty, longer
// than 63 bytes or starting or ending with a hyphen, 253 bytes at most.
// Underscores are allowed because some real-world host names use them.
func validDNSName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return false
			}
		}
	}
	return true
}

// parse rebuilds a CA from its PEM-encoded certificate and PKCS#8 key,
// checking that the two belong together.
func parse(certPEM, keyPEM []byte) (*CA, error) {
	certBlock, _ := pem.Decode(certPEM)
	if certBlock == nil || certBlock.Type != "CERTIFICATE" {
		return nil, errors.New("certificate file holds no PEM CERTIFICATE block")
	}
	keyBlock, _ := pem.Decode(keyPEM)
	if keyBlock == nil {
		return nil, errors.New("key file holds no PEM block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is a %T, want an ECDSA key", parsed)
	}
	return fromDER(certBlock.Bytes, key)
}

// fromDER assembles a CA from a DER certificate and its private key.
func fromDER(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("certificate is not a CA certificate")
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("private key does not match CA certificate")
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		cache:   make(map[string]*tls.Certificate),
	}, nil
}

// randomSerial returns a random positive 128-bit serial number, as RFC 5280
// recommends unpredictable serials.
func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

// lockDir takes an exclusive flock on dir's lock file so that only one
// process at a time inspects or creates the CA files.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open dev CA lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock dev CA dir: %w", err)
	}
	// Closing the file releases the lock.
	return func() { _ = f.Close() }, nil
}

// writeAtomic writes data to a temporary file next to path and renames it
// into place, so readers see either the old file or the complete new one.
func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("chmod temp file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write temp file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync temp file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close temp file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename temp file: %w", err)
	}
	return nil
}
