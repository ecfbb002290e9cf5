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
// against its bare operation in the same run (docs/benchmarks.md): the
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
	run := func(name string, f func(b *testing.B)) float64 {
		var ns float64
		b.Run(name, func(b *testing.B) {
			f(b)
			ns = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
		return ns
	}
	report := func(name string, base float64, f func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			f(b)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-bare")
		})
	}

	bareHMAC := run("hmac/bare", func(b *testing.B) {
		for b.Loop() {
			mac(secret)
		}
	})
	report("hmac/keys", bareHMAC, func(b *testing.B) {
		for b.Loop() {
			s, err := keys.Secret(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			mac(s)
		}
	})
	report("open", bareHMAC, func(b *testing.B) {
		for b.Loop() {
			if _, err := sealer.Open(ctx, id, sealing.CompanySecret, "1", sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
	report("seal", bareHMAC, func(b *testing.B) {
		for b.Loop() {
			if _, err := sealer.Seal(ctx, id, sealing.CompanySecret, "1", secret); err != nil {
				b.Fatal(err)
			}
		}
	})
	bareSign := run("es256/bare", func(b *testing.B) {
		for b.Loop() {
			h := sha256.Sum256(payload)
			if _, err := ecdsa.SignASN1(rand.Reader, ecKey, h[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	report("es256/keys", bareSign, func(b *testing.B) {
		for b.Loop() {
			if _, err := keys.Sign(ctx, id, "at+jwt", payload); err != nil {
				b.Fatal(err)
			}
		}
	})
}
