package dpop_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/poppyhost/poppyhost/internal/dpop"
	"github.com/poppyhost/poppyhost/internal/dpop/dpoptest"
)

// BenchmarkVerifyProof is the cost of checking a resource request's DPoP
// proof (docs/benchmarks.md): without and with a server nonce, replays
// kept in memory so only the proof's own work is measured, against a bare
// P-256 verification as baseline.
func BenchmarkVerifyProof(b *testing.B) {
	ctx := context.Background()
	k := dpoptest.NewKey()
	clock := func() time.Time { return now }
	nonces := dpop.NewNonces(secrets, 0, clock)
	nonce, err := nonces.Current(ctx, 7)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, nonced bool) {
		v := dpop.New(&dpoptest.Replays{}, dpop.Options{Now: clock, Nonces: nonces})
		r := req(token)
		r.Nonce = nonced
		proofs := make([]string, 4096)
		for i := range proofs {
			if nonced {
				proofs[i] = k.WithNonce("GET", htu, token, nonce, now)
			} else {
				proofs[i] = k.Valid("GET", htu, token, now)
			}
		}
		i := 0
		for b.Loop() {
			if i == len(proofs) {
				b.StopTimer()
				v = dpop.New(&dpoptest.Replays{}, dpop.Options{Now: clock, Nonces: nonces})
				i = 0
				b.StartTimer()
			}
			if _, err := v.Verify(ctx, proofs[i], r); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("proof", func(b *testing.B) { run(b, false) })
	b.Run("proof+nonce", func(b *testing.B) { run(b, true) })
	b.Run("p256 baseline", func(b *testing.B) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		sum := sha256.Sum256(make([]byte, 300))
		sig, _ := ecdsa.SignASN1(rand.Reader, key, sum[:])
		for b.Loop() {
			if !ecdsa.VerifyASN1(&key.PublicKey, sum[:], sig) {
				b.Fatal("no")
			}
		}
	})
}
