package httpsig

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/dunglas/httpsfv"
)

// Message is the part of a request a signature can cover.
type Message struct {
	Method string
	// Scheme and Authority are the request's public scheme and host
	// (with a port only when it is not the scheme's default).
	Scheme, Authority string
	// Path is the escaped path; RawQuery the query without "?".
	Path, RawQuery string
	Header         http.Header
}

// FromRequest returns the Message of a request the platform received at
// its public https origin.
func FromRequest(r *http.Request) Message {
	return Message{
		Method: r.Method, Scheme: "https", Authority: r.Host,
		Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header,
	}
}

// ErrMalformed wraps every error about a signature that cannot be read
// or whose base cannot be built.
var ErrMalformed = errors.New("malformed HTTP message signature")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// Base returns the signature base of m for the covered components and
// signature parameters in params (RFC 9421 §2.5): one line per covered
// component, then the "@signature-params" line, joined by LF with no
// trailing newline.
func Base(m Message, params httpsfv.InnerList) (string, error) {
	var b strings.Builder
	seen := map[string]bool{}
	for _, it := range params.Items {
		name, ok := it.Value.(string)
		if !ok {
			return "", malformed("a covered component is not a string")
		}
		id, err := httpsfv.Marshal(httpsfv.List{it})
		if err != nil {
			return "", malformed("a covered component cannot be serialized")
		}
		if seen[id] {
			return "", malformed("component %s is covered twice", id)
		}
		seen[id] = true
		if name != strings.ToLower(name) {
			return "", malformed("component names must be lowercase")
		}
		values, err := componentValues(m, name, it.Params)
		if err != nil {
			return "", err
		}
		for _, v := range values {
			b.WriteString(id)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	sp, err := httpsfv.Marshal(httpsfv.List{params})
	if err != nil {
		return "", malformed("the signature parameters cannot be serialized")
	}
	b.WriteString(`"@signature-params": `)
	b.WriteString(sp)
	return b.String(), nil
}

// componentValues derives one covered component's value: a single value,
// or one per occurrence for @query-param.
func componentValues(m Message, name string, p *httpsfv.Params) ([]string, error) {
	if !strings.HasPrefix(name, "@") {
		return fieldValue(m.Header, name, p)
	}
	if name != "@query-param" && len(p.Names()) > 0 {
		return nil, malformed("component %s takes no parameters", name)
	}
	query := "?" + m.RawQuery
	switch name {
	case "@method":
		return []string{m.Method}, nil
	case "@authority":
		return []string{authority(m.Scheme, m.Authority)}, nil
	case "@scheme":
		return []string{strings.ToLower(m.Scheme)}, nil
	case "@target-uri":
		return []string{strings.ToLower(m.Scheme) + "://" + authority(m.Scheme, m.Authority) + path(m.Path) + query}, nil
	case "@request-target":
		if m.RawQuery == "" {
			return []string{path(m.Path)}, nil
		}
		return []string{path(m.Path) + query}, nil
	case "@path":
		return []string{path(m.Path)}, nil
	case "@query":
		return []string{query}, nil
	case "@query-param":
		return queryParam(m.RawQuery, p)
	}
	return nil, malformed("component %s is not supported", name)
}

// authority lowercases host and drops the scheme's default port (§2.2.3).
func authority(scheme, host string) string {
	host = strings.ToLower(host)
	switch {
	case strings.EqualFold(scheme, "https"):
		host = strings.TrimSuffix(host, ":443")
	case strings.EqualFold(scheme, "http"):
		host = strings.TrimSuffix(host, ":80")
	}
	return host
}

// path is the absolute path, "/" when empty (§2.2.6).
func path(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// queryParam is §2.2.8: the query is parsed as
// application/x-www-form-urlencoded and every value of the named
// parameter is re-encoded, one line each, in order.
func queryParam(rawQuery string, p *httpsfv.Params) ([]string, error) {
	if len(p.Names()) != 1 {
		return nil, malformed("@query-param takes exactly the name parameter")
	}
	v, _ := p.Get("name")
	want, ok := v.(string)
	if !ok {
		return nil, malformed("@query-param needs a name parameter that is a string")
	}
	var out []string
	for _, pair := range strings.Split(rawQuery, "&") {
		if pair == "" {
			continue
		}
		k, val, _ := strings.Cut(pair, "=")
		k, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(val)
		if err1 != nil || err2 != nil {
			return nil, malformed("the query cannot be decoded")
		}
		if url.PathEscape(k) == want || k == want {
			out = append(out, url.PathEscape(val))
		}
	}
	if len(out) == 0 {
		return nil, malformed("query parameter %q is covered but absent", want)
	}
	return out, nil
}

// fieldValue is §2.1: the field's lines, each trimmed, joined by ", ";
// with key, the named member of the field parsed as a Dictionary (§2.1.2).
func fieldValue(h http.Header, name string, p *httpsfv.Params) ([]string, error) {
	lines, ok := h[http.CanonicalHeaderKey(name)]
	if !ok {
		return nil, malformed("covered field %s is absent", name)
	}
	names := p.Names()
	if len(names) == 0 {
		trimmed := make([]string, len(lines))
		for i, l := range lines {
			trimmed[i] = strings.TrimSpace(l)
		}
		return []string{strings.Join(trimmed, ", ")}, nil
	}
	k, _ := p.Get("key")
	key, isString := k.(string)
	if len(names) != 1 || !isString {
		return nil, malformed("field %s: only the key parameter is supported", name)
	}
	d, err := httpsfv.UnmarshalDictionary(lines)
	if err != nil {
		return nil, malformed("field %s is not a Dictionary", name)
	}
	member, ok := d.Get(key)
	if !ok {
		return nil, malformed("field %s has no member %q", name, key)
	}
	var s string
	switch mv := member.(type) {
	case httpsfv.Item:
		s, err = httpsfv.Marshal(mv)
	case httpsfv.InnerList:
		s, err = httpsfv.Marshal(httpsfv.List{mv})
	}
	if err != nil || s == "" {
		return nil, malformed("field %s member %q cannot be serialized", name, key)
	}
	return []string{s}, nil
}
