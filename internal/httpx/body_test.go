package httpx

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deadlineRecorder is a ResponseWriter that records the read deadlines
// http.ResponseController sets on it.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

// TestPaceBodiesMovesTheDeadline: the read deadline starts at the grace,
// is never earlier than grace + bytes read / rate, moves in steps rather
// than on every read, and is lifted at the end of the body; requests
// without a body are left alone.
func TestPaceBodiesMovesTheDeadline(t *testing.T) {
	t.Parallel()
	opts := BodyTimeouts{Grace: 8 * time.Second, MinRate: 1000}
	var start time.Time
	var read int
	var w *deadlineRecorder
	h := PaceBodies(opts)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 100)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				due := start.Add(opts.Grace + time.Duration(read)*time.Millisecond) // 1 ms a byte at 1000 B/s
				last := w.deadlines[len(w.deadlines)-1]
				require.False(t, last.Before(due), "deadline %s before %s", last, due)
				read += n
			}
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				return
			}
		}
	}))
	w = &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(make([]byte, 20_000)))
	start = time.Now()
	h.ServeHTTP(w, r)
	require.Equal(t, 20_000, read)
	require.WithinDuration(t, start.Add(opts.Grace), w.deadlines[0], time.Second)
	require.True(t, w.deadlines[len(w.deadlines)-1].IsZero(), "lifted at the end")
	// 200 reads of 100 bytes; a step of 1 s is 1,000 bytes: about
	// twenty moves, not 200.
	require.Less(t, len(w.deadlines), 30)

	w = &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	PaceBodies(opts)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).
		ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Empty(t, w.deadlines, "no body, no deadline")
}
