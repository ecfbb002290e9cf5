package origin_test

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/poppyhost/poppyhost/internal/origin"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// FuzzTarget feeds request paths and queries, as the API proxy receives
// them, to Target once safehttp.ValidPath has let them through: the URL a
// request is forwarded to names the origin's host, and its path, as the
// origin reads and resolves it, stays under the origin's base path.
// testdata/fuzz holds more seeds and every finding.
func FuzzTarget(f *testing.F) {
	for _, seed := range [][2]string{
		{"/orders/o1", "x=1"},
		{"/orders/a%20b/c", ""},
		{"/a//b", "a=1&b=%2f"},
		{"/..", ""},
		{"/%2e%2e/admin", ""},
		{"/a/..;x/admin", ""},
		{"/a%2fb", ""},
		{"/a%5c..%5cadmin", ""},
		{"//evil.example/x", ""},
		{"/@evil.example", "#frag"},
		{"/%252e%252e/admin", ""},
		{"/caf%C3%A9", "q=%E2%80%AE"},
	} {
		f.Add(seed[0], seed[1])
	}
	base, _ := url.Parse("https://origin.example:8443/v1/")
	f.Fuzz(func(t *testing.T, escapedPath, rawQuery string) {
		if !safehttp.ValidPath(escapedPath) {
			return
		}
		target := origin.Target(base, escapedPath, rawQuery)
		sent, err := url.Parse(target.Scheme + "://" + target.Host + target.EscapedPath())
		if err != nil {
			t.Fatalf("%q gives %q, which does not parse: %v", escapedPath, target, err)
		}
		if sent.Scheme != "https" || sent.Host != base.Host || sent.User != nil {
			t.Fatalf("%q goes to %q", escapedPath, sent)
		}
		if resolved := path.Clean(sent.Path); resolved != "/v1" && !strings.HasPrefix(resolved, "/v1/") {
			t.Fatalf("%q reaches %q, outside /v1", escapedPath, resolved)
		}
	})
}
