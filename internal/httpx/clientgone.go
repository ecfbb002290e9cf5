package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
)

// StatusClientClosedRequest labels a request whose client went away before
// it was answered: a cancelled HTTP/2 stream or a closed connection. It is
// not a status the client sees (nobody is left to see it); it is the one
// common proxies log for the same event, so that metrics and access logs
// keep hang-ups apart from server failures.
const StatusClientClosedRequest = 499

// ClientGone reports whether r's client has gone away: net/http cancels a
// request's context when its connection closes or its HTTP/2 stream is
// reset, and only then while the handler runs. On HTTP/1 it also cancels
// it when a body read times out, which is BodyTimedOut, not a hang-up.
// The context checked is the one net/http gave Instrument, so a handler's
// own cancellation of a context it derived (an origin's timeout) is not
// taken for the client's.
func ClientGone(r *http.Request) bool {
	ctx := r.Context()
	if rq := requestOf(ctx); rq != nil {
		ctx = rq.server
	}
	return errors.Is(ctx.Err(), context.Canceled) && !BodyTimedOut(r)
}

// hangupHandler logs what a request's handlers report as errors at debug
// level once the client has gone: a query or an origin call cut short by
// the hang-up is the client's doing, not a server failure to page anyone
// about.
type hangupHandler struct {
	slog.Handler
	req context.Context
}

func (h hangupHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError && errors.Is(h.req.Err(), context.Canceled) {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		rec = rec.Clone()
		rec.Level = slog.LevelDebug
		rec.AddAttrs(slog.Bool("client_gone", true))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h hangupHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return hangupHandler{h.Handler.WithAttrs(attrs), h.req}
}

func (h hangupHandler) WithGroup(name string) slog.Handler {
	return hangupHandler{h.Handler.WithGroup(name), h.req}
}
