package clientauth_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// BenchmarkVerifyPostgres is BenchmarkVerify's ES256 case with the
// issuer's replay store, PGReplays: the same checks and signature
// verification, then one INSERT into the UNLOGGED client_assertion_jtis
// instead of a map. The difference between the two is the database's part.
// Each call needs a new jti, so assertions are signed in batches with the
// timer stopped.
func BenchmarkVerifyPostgres(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	v := clientauth.NewVerifier(bb.resolver, clientauth.Options{
		Now: func() time.Time { return testNow }, Replays: clientauth.NewPGReplays(testdb.NewPool(b)),
	})
	// Warm the resolver cache and a pool connection.
	_, err := v.Verify(ctx, testIssuer, form(bb.assertion(b, spec{})))
	require.NoError(b, err)
	hits := bb.agent.Hits("/agent.json") + bb.agent.Hits("/jwks.json")

	var batch []url.Values
	b.ReportAllocs()
	for b.Loop() {
		if len(batch) == 0 {
			b.StopTimer()
			batch = make([]url.Values, 256)
			for i := range batch {
				batch[i] = form(bb.assertion(b, spec{}))
			}
			b.StartTimer()
		}
		if _, err := v.Verify(ctx, testIssuer, batch[0]); err != nil {
			b.Fatal(err)
		}
		batch = batch[1:]
	}
	require.Equal(b, hits, bb.agent.Hits("/agent.json")+bb.agent.Hits("/jwks.json"), "the resolver fetched again")
}
