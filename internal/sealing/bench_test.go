package sealing_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/signing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// BenchmarkSecrets measures what sealing adds to the hot paths, each
// against its bare operation in the same loop (docs/benchmarks.md): the
// HMAC of a code with the Company secret from signing.Keys against an HMAC
// with a key in a variable; an ES256 token from signing.Keys against a
// bare ECDSA signature; and the sealing and opening of a 32-byte secret,
// which happen only when a cache loads, against the bare HMAC. Each
// reports x-bare, its time over its baseline's.
func BenchmarkSecrets(b *testing.B) {
	ctx := context.Background()
	pool := testdb.NewPool(b)
	ring, err := sealing.ParseKeyring(sealing.NewKEK("bench"))
	if err != nil {
		b.Fatal(err)
	}
	sealer := sealing.New(pool, ring, nil)
	keys := signing.NewKeys(pool, sealer, signing.Options{CacheTTL: time.Hour})
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO companies (slug, settings) VALUES ('bench', '{}') RETURNING id`).Scan(&id); err != nil {
		b.Fatal(err)
	}
	code := make([]byte, 32)
	_, _ = rand.Read(code)
	secret, err := keys.Secret(ctx, id) // loads and caches
	if err != nil {
		b.Fatal(err)
	}
	if _, err := keys.Sign(ctx, id, "at+jwt", []byte(`{}`)); err != nil {
		b.Fatal(err)
	}
	sealed, err := sealer.Seal(ctx, id, sealing.CompanySecret, "1", secret)
	if err != nil {
		b.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"iss":"https://poppyhost.example/t/bench","sub":"usr_1","aud":"https://shop.example","exp":1800000000,"scope":"orders:read"}`)

	mac := func(key []byte) {
		m := hmac.New(sha256.New, key)
		m.Write(code)
		m.Sum(nil)
	}
	must := func(_ any, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	// pair times bare and subject alternately, one call each per
	// iteration, so that a loaded machine slows both alike, and reports
	// each one's time and subject's over bare's.
	pair := func(name string, bare, subject func()) {
		b.Run(name, func(b *testing.B) {
			var tb, ts time.Duration
			for b.Loop() {
				t0 := time.Now()
				bare()
				t1 := time.Now()
				subject()
				ts += time.Since(t1)
				tb += t1.Sub(t0)
			}
			b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bare-ns/op")
			b.ReportMetric(float64(ts.Nanoseconds())/float64(b.N), "subject-ns/op")
			b.ReportMetric(float64(ts)/float64(tb), "x-bare")
		})
	}
	sign := func() {
		h := sha256.Sum256(payload)
		must(ecdsa.SignASN1(rand.Reader, ecKey, h[:]))
	}

	pair("hmac/keys", func() { mac(secret) }, func() {
		s, err := keys.Secret(ctx, id)
		must(nil, err)
		mac(s)
	})
	pair("open", func() { mac(secret) }, func() { must(sealer.Open(ctx, id, sealing.CompanySecret, "1", sealed)) })
	pair("seal", func() { mac(secret) }, func() { must(sealer.Seal(ctx, id, sealing.CompanySecret, "1", secret)) })
	pair("es256/keys", sign, func() { must(keys.Sign(ctx, id, "at+jwt", payload)) })
}
