package peers

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Trickle is a request body that arrives piece by piece, as from a slow
// or hostile client: Data (or else Total bytes of 'x') in pieces of Size,
// one every Every, and then, with Stall, nothing more and no end until
// the test ends.
type Trickle struct {
	Data  []byte
	Total int
	Size  int
	Every time.Duration
	Stall bool
}

// Reader returns the body. Use it with an explicit ContentLength to
// declare more than it sends.
func (tr Trickle) Reader(t testing.TB) io.Reader {
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		_ = pr.CloseWithError(errors.New("test over"))
	})
	go func() {
		data := tr.Data
		if data == nil {
			data = bytes.Repeat([]byte("x"), tr.Total)
		}
		for len(data) > 0 {
			piece := data[:min(tr.Size, len(data))]
			data = data[len(piece):]
			if _, err := pw.Write(piece); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(tr.Every):
			}
		}
		if tr.Stall {
			<-stop
			return
		}
		_ = pw.Close()
	}()
	return pr
}

// SendWithin is Send that fails the test when no whole answer has come
// within d, even if the client is stuck writing a body the server no
// longer reads.
func SendWithin(t testing.TB, client *http.Client, req *http.Request, d time.Duration) *Response {
	t.Helper()
	type result struct {
		resp *Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		done <- result{&Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		return r.resp
	case <-time.After(d):
		t.Fatalf("%s %s: no answer within %s", req.Method, req.URL, d)
		return nil
	}
}
