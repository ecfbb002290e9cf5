package conversations_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/conversations"
)

// TestStreamWaitsOutsideTheChain: an open stream waits in ParkStreams, on
// a stack without the Session check, the routers or the handler under it
// (they have returned), and still gets its events.
func TestStreamWaitsOutsideTheChain(t *testing.T) {
	a := newAgentSide(t)
	id := a.start(t, paMsg("m1", "hello"), paReq{})
	s := a.stream(t, id, paReq{Query: "cursor=evt_2"})
	defer s.cancel()

	var waiting []byte
	for deadline := time.Now().Add(10 * time.Second); waiting == nil; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no stream waiting")
		buf := make([]byte, 1<<20)
		for g := range bytes.SplitSeq(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
			if bytes.Contains(g, []byte(benchPkg+"(*eventStream).wait(")) {
				waiting = g
			}
		}
	}
	require.Contains(t, string(waiting), "ParkStreams")
	for _, gone := range []string{"(*Manager).Require", "chi/v5.(*Mux).routeHTTP", benchPkg + "(*reader).stream("} {
		require.NotContains(t, string(waiting), gone, "the stream waits under %s", gone)
	}

	a.companyEvents(t, id, "", "", companyMessage("r1", "Hi!"))
	require.Equal(t, "evt_3", s.next(t).event(t)["id"])
}

// TestParkedHandlerPanics: a handler under ParkStreams runs on a goroutine
// of its own, and its panic is the request's goroutine's, where the
// server's recovery sees it.
func TestParkedHandlerPanics(t *testing.T) {
	h := conversations.ParkStreams(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	r := httptest.NewRequest(http.MethodGet, "/poppy/conversations/cnv_1/events", nil)
	r.Header.Set("Accept", "text/event-stream")
	p := func() (p any) {
		defer func() { p = recover() }()
		h.ServeHTTP(httptest.NewRecorder(), r)
		return nil
	}()
	require.NotNil(t, p)
	require.Contains(t, fmt.Sprint(p), "boom")

	abort := conversations.ParkStreams(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	p = func() (p any) {
		defer func() { p = recover() }()
		abort.ServeHTTP(httptest.NewRecorder(), r)
		return nil
	}()
	require.Equal(t, http.ErrAbortHandler, p, "an aborted request stays aborted")
}
