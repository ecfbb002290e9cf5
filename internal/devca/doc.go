// Package devca is a small certificate authority for development and tests.
//
// It lets a local server speak real TLS (and HTTP/2) for whatever host name a
// client asks for through SNI, so that tenant sub-domains such as
// "acme.poppyhost.test" work without per-host certificate setup: clients only
// need to trust the one CA certificate returned by CertPEM or Pool.
//
// It must never be used to serve public traffic.
package devca
