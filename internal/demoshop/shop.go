package demoshop

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poppyhost/poppyhost/internal/verified"
)

// Options configure a Shop.
type Options struct {
	// BaseURL is where the shop is served, https://host[:port] without a
	// trailing slash; the audiences of its parts derive from it.
	BaseURL string
	// SiteURL is the Company's website as people reach it, the platform's
	// proxy of web.origin, e.g. https://stormline.example [BaseURL]. Links
	// the shop gives out (a decline's alternative) point there.
	SiteURL string
	// Issuer is the Company's identifier, the iss of Poppy-Verified.
	Issuer string
	// IssuerURL is the Company's issuer, whose /oauth/authorize and
	// /oauth/token the orders API's description names [Issuer: the
	// identifier of a Company with an issuer is its issuer URL].
	IssuerURL string
	// JWKSURL is the Company's key set [IssuerURL + "/oauth/jwks.json"].
	JWKSURL string
	// Client fetches JWKSURL [a client with a 10-second timeout].
	Client *http.Client
	// Logger receives refusals and failures [discarded].
	Logger *slog.Logger
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Shop is the demo Company's origin. Close it to stop its key set cache.
type Shop struct {
	o      Options
	keys   *KeySet
	mux    *http.ServeMux
	cancel context.CancelFunc

	mu      sync.Mutex
	orders  map[string][]*Order // by account ID
	answers map[string]answer   // by account ID + " " + Idempotency-Key
	stalls  int
	last    *verified.Facts // of the last API call, for the control handler
}

// answer is what an approved action did, kept for repeats of its key.
type answer struct {
	actionKey string
	result    any
}

// maxBody bounds every request body.
const maxBody = 64 << 10

// New returns the shop, with no orders until Seed.
func New(o Options) (*Shop, error) {
	o.BaseURL = strings.TrimSuffix(o.BaseURL, "/")
	if !strings.HasPrefix(o.BaseURL, "https://") || o.Issuer == "" {
		return nil, errors.New("demoshop: BaseURL must be an https URL and Issuer is required")
	}
	o.SiteURL = strings.TrimSuffix(cmp.Or(o.SiteURL, o.BaseURL), "/")
	o.IssuerURL = strings.TrimSuffix(cmp.Or(o.IssuerURL, o.Issuer), "/")
	if o.JWKSURL == "" {
		o.JWKSURL = o.IssuerURL + "/oauth/jwks.json"
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	keys, err := NewKeySet(ctx, o.JWKSURL, o.Client, o.Now)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Shop{o: o, keys: keys, cancel: cancel, mux: http.NewServeMux(),
		orders: map[string][]*Order{}, answers: map[string]answer{}}
	s.mountAPI()
	s.mountTools()
	s.mountWebsite()
	return s, nil
}

// Close stops the key set's refreshes.
func (s *Shop) Close() { s.cancel() }

// ServeHTTP serves the API, the tools, the website and /openapi.json.
func (s *Shop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	s.mux.ServeHTTP(w, r)
}

// APIOrigin is the origin to register the orders API with, and the aud
// of its calls.
func (s *Shop) APIOrigin() string { return s.o.BaseURL + "/api" }

// OpenAPIURL is where the orders API's description is served.
func (s *Shop) OpenAPIURL() string { return s.o.BaseURL + "/openapi.json" }

// ToolURL is the URL to register the tool name with, and the aud of its
// calls.
func (s *Shop) ToolURL(name string) string { return s.o.BaseURL + "/tools/" + name }

// WebOrigin is the Company's web.origin, and the aud of the website's
// requests.
func (s *Shop) WebOrigin() string { return s.o.BaseURL }

// Seed gives the account the demo orders (ord_7Hk2 with the Stormline
// Jacket, and another), unless it has orders already. account is the
// account's ID as Poppy-Verified states it: decimal.
func (s *Shop) Seed(account string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.orders[account]; !ok {
		s.orders[account] = seedOrders(s.o.Now())
	}
}

// StallNextExchange makes the next approved exchange, on any interface,
// time out after it is performed: its answer is recorded for the
// Idempotency-Key but held until the caller gives up or limit passes. A
// test hook for retries after an origin timeout.
func (s *Shop) StallNextExchange() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalls++
}

// stallLimit bounds how long a stalled answer is held.
const stallLimit = 3 * time.Minute

// hold waits until the caller gives up or stallLimit passes.
func hold(ctx context.Context) {
	t := time.NewTimer(stallLimit)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Orders returns a copy of the account's orders.
func (s *Shop) Orders(account string) []*Order {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*Order{}
	for _, o := range s.orders[account] {
		out = append(out, o.clone())
	}
	return out
}

// order returns the account's order id; s.mu is held.
func (s *Shop) order(account, id string) *Order {
	for _, o := range s.orders[account] {
		if o.ID == id {
			return o
		}
	}
	return nil
}

// claims verifies the request for aud; on failure it answers as refused
// does and returns nil.
func (s *Shop) claims(w http.ResponseWriter, r *http.Request, aud string) *verified.Claims {
	c, err := s.verify(r, aud)
	if err == nil {
		return c
	}
	s.refused(w, r, err)
	return nil
}

// refused answers a request whose Poppy-Verified failed: 401 when it is
// missing or not valid, and 503 with Retry-After when it may be valid but
// cannot be checked yet (a key the shop may fetch only after a moment, or a
// key set that cannot be fetched), so that the platform retries an
// approved request instead of storing the refusal as its answer.
func (s *Shop) refused(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errMissing) || errors.Is(err, verified.ErrInvalid) {
		s.o.Logger.Warn("demo shop: refused a request", slog.String("path", r.URL.Path), slog.Any("err", err))
		writeJSON(w, "application/json", http.StatusUnauthorized,
			problemBody("unverified", "Poppy-Verified is missing or not valid for this origin"))
		return
	}
	if pending := (*keyPendingError)(nil); errors.As(err, &pending) {
		s.o.Logger.Warn("demo shop: a request signed with a key not yet fetched", slog.String("path", r.URL.Path))
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(pending.retryAfter.Seconds()))))
		writeJSON(w, "application/json", http.StatusServiceUnavailable,
			problemBody("unavailable", "Poppy-Verified names a signing key the shop can fetch again in a moment"))
		return
	}
	s.o.Logger.Error("demo shop: the Company's key set", slog.Any("err", err))
	w.Header().Set("Retry-After", "5")
	writeJSON(w, "application/json", http.StatusServiceUnavailable,
		problemBody("unavailable", "the Company's key set could not be fetched"))
}

func problemBody(code, desc string) map[string]string {
	return map[string]string{"error": code, "error_description": desc}
}

func writeJSON(w http.ResponseWriter, contentType string, status int, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}
