package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxRecorded bounds the body kept of each request and response.
const maxRecorded = 64 << 10

// Exchange is one recorded request and its response, secrets redacted.
type Exchange struct {
	Time            time.Time   `json:"time"`
	Note            string      `json:"note,omitempty"`
	Method          string      `json:"method,omitempty"`
	URL             string      `json:"url,omitempty"`
	RequestHeaders  http.Header `json:"request_headers,omitempty"`
	RequestBody     string      `json:"request_body,omitempty"`
	Status          int         `json:"status,omitempty"`
	ResponseHeaders http.Header `json:"response_headers,omitempty"`
	ResponseBody    string      `json:"response_body,omitempty"`
	Error           string      `json:"error,omitempty"`
}

// Recorder keeps a transcript of every request the agent sends and every
// response it gets, with secrets redacted, and of the steps it notes. It
// is safe for concurrent use.
type Recorder struct {
	// Echo, when set, gets each note as it is made (a command's output).
	Echo    io.Writer
	mu      sync.Mutex
	entries []*Exchange
}

// NewRecorder makes an empty transcript.
func NewRecorder() *Recorder { return &Recorder{} }

// Note adds a line saying what the agent does next.
func (r *Recorder) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &Exchange{Time: time.Now().UTC(), Note: fmt.Sprintf(format, args...)}
	r.entries = append(r.entries, e)
	if r.Echo != nil {
		fmt.Fprintf(r.Echo, "* %s\n", e.Note)
	}
}

// Exchanges returns a copy of the transcript so far.
func (r *Recorder) Exchanges() []Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Exchange, len(r.entries))
	for i, e := range r.entries {
		out[i] = *e
	}
	return out
}

// WriteText writes the transcript in a readable form.
func (r *Recorder) WriteText(w io.Writer) error {
	for _, e := range r.Exchanges() {
		var b strings.Builder
		if e.Note != "" {
			fmt.Fprintf(&b, "## %s %s\n\n", e.Time.Format(time.TimeOnly), e.Note)
			if _, err := io.WriteString(w, b.String()); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(&b, "%s %s %s\n", e.Time.Format(time.TimeOnly), e.Method, e.URL)
		writeHeaders(&b, "> ", e.RequestHeaders)
		if e.RequestBody != "" {
			fmt.Fprintf(&b, ">\n%s\n", indent("> ", e.RequestBody))
		}
		if e.Error != "" {
			fmt.Fprintf(&b, "! %s\n", e.Error)
		} else {
			fmt.Fprintf(&b, "< %d\n", e.Status)
			writeHeaders(&b, "< ", e.ResponseHeaders)
			if e.ResponseBody != "" {
				fmt.Fprintf(&b, "<\n%s\n", indent("< ", e.ResponseBody))
			}
		}
		b.WriteString("\n")
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes the readable transcript to path.
func (r *Recorder) WriteFile(path string) error {
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func writeHeaders(b *strings.Builder, prefix string, h http.Header) {
	for _, k := range sortedKeys(h) {
		for _, v := range h[k] {
			fmt.Fprintf(b, "%s%s: %s\n", prefix, k, v)
		}
	}
}

func indent(prefix, s string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// wrap records the requests sent through next.
func (r *Recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return recordingTransport{r: r, next: next}
}

type recordingTransport struct {
	r    *Recorder
	next http.RoundTripper
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e := &Exchange{
		Time:           time.Now().UTC(),
		Method:         req.Method,
		URL:            redactURL(req.URL),
		RequestHeaders: redactHeaders(req.Header),
	}
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxRecorded+1))
			body.Close()
			total := len(b)
			if req.ContentLength > int64(total) {
				total = int(req.ContentLength)
			}
			e.RequestBody = redactBody(req.Header.Get("Content-Type"), b[:min(len(b), maxRecorded)], total)
		}
	}
	t.r.mu.Lock()
	t.r.entries = append(t.r.entries, e)
	t.r.mu.Unlock()
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.r.mu.Lock()
		e.Error = err.Error()
		t.r.mu.Unlock()
		return nil, err
	}
	t.r.mu.Lock()
	e.Status = resp.StatusCode
	e.ResponseHeaders = redactHeaders(resp.Header)
	t.r.mu.Unlock()
	// The body is recorded as it is read, so streams (SSE) stay streams.
	resp.Body = &recordingBody{ReadCloser: resp.Body, r: t.r, e: e, ct: resp.Header.Get("Content-Type")}
	return resp, nil
}

// recordingBody copies what the agent reads of a response into its entry.
type recordingBody struct {
	io.ReadCloser
	r     *Recorder
	e     *Exchange
	ct    string
	buf   bytes.Buffer
	total int // bytes read, recorded or not
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.total += n
	switch {
	case n > 0 && b.buf.Len() < maxRecorded:
		b.buf.Write(p[:min(n, maxRecorded-b.buf.Len())])
		b.flush()
	case n > 0 && err == io.EOF:
		b.flush()
	}
	return n, err
}

// Close records the final size of a body cut at maxRecorded.
func (b *recordingBody) Close() error {
	if b.total > b.buf.Len() {
		b.flush()
	}
	return b.ReadCloser.Close()
}

func (b *recordingBody) flush() {
	s := redactBody(b.ct, b.buf.Bytes(), b.total)
	b.r.mu.Lock()
	b.e.ResponseBody = s
	b.r.mu.Unlock()
}

// secretHeaders are replaced by "[redacted]" in the transcript.
var secretHeaders = map[string]bool{
	"Authorization": true, "Poppy-Session": true, "Poppy-Verified": true,
	"Cookie": true, "Set-Cookie": true, "Dpop": true, "Proxy-Authorization": true,
}

// secretFields are JSON members and form fields whose values are redacted.
var secretFields = map[string]bool{
	"access_token": true, "refresh_token": true, "id_token": true, "token": true,
	"code": true, "code_verifier": true, "device_code": true, "client_assertion": true,
	"password": true, "assertion": true, "client_secret": true, "subject_token": true,
	"user_code": true,
}

// secretInURL matches secret query parameters inside URLs in bodies.
var secretInURL = regexp.MustCompile(`((?:user_code|code|token|access_token)=)[^&"\s]+`)

func redactHeaders(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		if secretHeaders[http.CanonicalHeaderKey(k)] {
			out[k] = []string{"[redacted]"}
			continue
		}
		out[k] = append([]string(nil), vs...)
	}
	if loc := out.Get("Location"); loc != "" {
		if u, err := url.Parse(loc); err == nil {
			out.Set("Location", redactURL(u))
		}
	}
	return out
}

func redactURL(u *url.URL) string {
	if u.RawQuery == "" {
		return u.String()
	}
	c := *u
	q := c.Query()
	for k := range q {
		if secretFields[k] {
			q.Set(k, "[redacted]")
		}
	}
	c.RawQuery = q.Encode()
	return c.String()
}

// jwtLike matches compact JWS/JWTs anywhere in a body.
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+`)

// redactBody redacts secrets from a JSON, form, event stream or text
// body; b holds the first bytes of a body of total bytes. JSON that is
// cut or does not parse is not recorded at all: a pattern can't be
// trusted to find every secret in it.
func redactBody(contentType string, b []byte, total int) string {
	if len(b) == 0 {
		return ""
	}
	switch {
	case strings.HasPrefix(contentType, "text/event-stream"):
		return redactEventStream(b)
	case strings.HasPrefix(contentType, "application/x-www-form-urlencoded"):
		if q, err := url.ParseQuery(string(b)); err == nil {
			for k := range q {
				if secretFields[k] {
					q.Set(k, "[redacted]")
				}
			}
			return q.Encode()
		}
	case strings.Contains(contentType, "json"):
		var v any
		if total > len(b) || json.Unmarshal(b, &v) != nil {
			return notRecorded(total)
		}
		out, _ := json.MarshalIndent(redactJSON(v), "", "  ")
		return string(out)
	}
	return secretInURL.ReplaceAllString(jwtLike.ReplaceAllString(string(b), "[redacted jwt]"), "${1}[redacted]")
}

// redactEventStream redacts each data: line of an event stream as JSON,
// and drops the lines that are not JSON (or not complete yet).
func redactEventStream(b []byte) string {
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		var v any
		if json.Unmarshal([]byte(data), &v) != nil {
			lines[i] = "data: " + notRecorded(len(data))
			continue
		}
		out, _ := json.Marshal(redactJSON(v))
		lines[i] = "data: " + string(out)
	}
	return strings.Join(lines, "\n")
}

// notRecorded stands in for a body that can't be redacted safely.
func notRecorded(n int) string { return fmt.Sprintf("[body not recorded: %d bytes]", n) }

func redactJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if secretFields[k] {
				v[k] = "[redacted]"
			} else {
				v[k] = redactJSON(x)
			}
		}
	case []any:
		for i, x := range v {
			v[i] = redactJSON(x)
		}
	case string:
		return secretInURL.ReplaceAllString(jwtLike.ReplaceAllString(v, "[redacted jwt]"), "${1}[redacted]")
	}
	return v
}

func sortedKeys(h http.Header) []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// redactURLString is redactURL for a URL held as a string.
func redactURLString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[unparsable URL]"
	}
	return redactURL(u)
}
