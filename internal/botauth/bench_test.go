package botauth

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkWebBotAuth is the cost a Web Bot Auth signature adds to a
// request (docs/benchmarks.md): Recognize on an unsigned request, on a
// signed one (directory cached, a fresh nonce each time), and a bare
// ed25519 verification of a signature base of the same size as baseline.
func BenchmarkWebBotAuth(b *testing.B) {
	fx := newFixture(b)
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := Recognize(fx.v, nil, nil)(next)
	b.Run("unsigned", func(b *testing.B) {
		r := httptest.NewRequest("GET", "https://shop.example/t/acme/api/items", nil)
		w := httptest.NewRecorder()
		for b.Loop() {
			h.ServeHTTP(w, r)
		}
	})
	reqs := make([]*http.Request, 0, 1<<14)
	for i := range cap(reqs) {
		reqs = append(reqs, fx.request(b, signOpts{nonce: "n" + strconv.Itoa(i)}))
	}
	// Warm the directory cache.
	if _, err := fx.v.Verify(context.Background(), fx.request(b, signOpts{})); err != nil {
		b.Fatal(err)
	}
	b.Run("signed", func(b *testing.B) {
		w := httptest.NewRecorder()
		i := 0
		for b.Loop() {
			if i == len(reqs) {
				// Past every nonce: a new verifier, its directory
				// fetched from memory once.
				b.StopTimer()
				fx.v = NewVerifier(fx.f, fx.v.opts)
				h = Recognize(fx.v, nil, nil)(next)
				i = 0
				b.StartTimer()
			}
			h.ServeHTTP(w, reqs[i])
			i++
		}
	})
	b.Run("ed25519 baseline", func(b *testing.B) {
		msg := make([]byte, 256)
		sig := ed25519.Sign(fx.key, msg)
		pub := fx.key.Public().(ed25519.PublicKey)
		for b.Loop() {
			if !ed25519.Verify(pub, msg, sig) {
				b.Fatal("no")
			}
		}
	})
}
