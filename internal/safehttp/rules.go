package safehttp

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// CheckHost applies the dial-time address rule to a URL's host
// (url.URL.Hostname: an IPv6 literal without brackets) before any request,
// so that a Company registering an origin, tool or webhook hears at once
// that every call to it would be refused. It refuses, unless allowPrivate
// (Options.AllowPrivate), localhost names and every IP literal the
// dialler refuses (blockedAddr). A host name that needs DNS passes: it is
// checked when dialled, on every address it then resolves to, since what
// it resolves to now proves nothing about later. The error wraps
// ErrBlockedAddress.
func CheckHost(host string, allowPrivate bool) error {
	if allowPrivate {
		return nil
	}
	// A trailing dot names the same host; refuse "127.0.0.1." too.
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if IsLocalhost(name) {
		// Resolvers answer these with loopback (RFC 6761 §6.3).
		return fmt.Errorf("%w: %s", ErrBlockedAddress, host)
	}
	ip, err := netip.ParseAddr(name)
	if err != nil {
		return nil
	}
	if blockedAddr(ip) {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, host)
	}
	return nil
}

// HostRule says what CheckHost refuses, for error messages.
const HostRule = "localhost or an address that is not public (loopback, private, link-local, " +
	"shared (CGNAT), documentation, benchmarking, multicast, reserved or the like)"

// PathRule says what ValidPath refuses, for error messages.
const PathRule = "an escaped path starting with / (not //), without . or .. segments " +
	"(also percent-encoded or with ;parameters), backslashes, encoded slashes, ? or # " +
	"(encoded once or twice, or not), or control characters"

// ValidPath reports whether escaped, a request path as sent on the wire,
// means the same path to every server that may read it, so that
// appending it to an origin's base path cannot reach outside that base
// path, and comparing it with a rule's path cannot be fooled by another
// spelling. It is the one path rule for every path poppyhost checks:
// gateway calls, proposals' perform paths, website scope rules and
// client_ids. It refuses:
//   - a path not starting with /, or starting with //, which URL
//     resolution reads as a host;
//   - a . or .. segment, also percent-encoded (%2e) or with ;parameters
//     ("..;x"), which some servers drop before resolving dot segments;
//   - a backslash, encoded or not, which some servers read as a slash;
//   - an encoded slash (%2f), ? (%3f) or # (%23), which a server that
//     decodes before it routes reads as a separator, a query or a
//     fragment; and a literal ? or #, which end a path;
//   - control characters, encoded or not, such as NUL (%00), which ends
//     a path for C-string code, and CR or LF;
//   - a bad percent-encoding;
//   - any of these once the path is decoded a second time ("%252e%252e",
//     "%252f", "%2500"), as an origin that decodes again, or sits
//     behind a proxy that decoded, reads it.
//
// Empty segments ("/a//b") are allowed: they are no dot segment, and
// servers that merge them stay under the base path.
func ValidPath(escaped string) bool {
	if !strings.HasPrefix(escaped, "/") || strings.HasPrefix(escaped, "//") {
		return false
	}
	for _, seg := range strings.Split(escaped[1:], "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil || !plainSegment(dec) {
			return false
		}
		// Decoded twice, as a server behind another that decoded may
		// read it, the way lenient decoders do: each valid escape
		// decoded, any other % kept.
		if strings.Contains(dec, "%") && !plainSegment(unescapeLenient(dec)) {
			return false
		}
	}
	return true
}

// unescapeLenient decodes every valid %XX escape of s and keeps any
// other % as it is.
func unescapeLenient(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := hex.DecodeString(s[i+1 : i+3]); err == nil {
				b.WriteByte(v[0])
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// plainSegment reports whether dec, one decoded path segment, is no dot
// segment (with or without ;parameters) and holds no separator, query,
// fragment or control character.
func plainSegment(dec string) bool {
	name, _, _ := strings.Cut(dec, ";")
	return name != "." && name != ".." && !strings.ContainsAny(dec, `/\?#`) &&
		strings.IndexFunc(dec, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0
}
