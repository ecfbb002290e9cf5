package signing_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/signing"
)

const benchPayload = `{"iss":"https://poppyhost.example/t/alpha","sub":"alice","aud":"https://api.alpha.example","scope":"orders:read","exp":1900000000,"iat":1899999700,"jti":"2b7f0e0c9a"}`

// BenchmarkSign is Sign with the Company's key cached: one ES256 signature.
func BenchmarkSign(b *testing.B) {
	bb := setup(b)
	alpha := bb.company(b, "alpha")
	bb.sign(b, bb.keys, alpha, typ, benchPayload)
	loads := signing.Loads(bb.keys)

	b.ReportAllocs()
	for b.Loop() {
		if _, err := bb.keys.Sign(bb.ctx, alpha, typ, []byte(benchPayload)); err != nil {
			b.Fatal(err)
		}
	}
	require.Equal(b, loads, signing.Loads(bb.keys), "the keys were read again")
}

// BenchmarkVerify is Verify on a warm cache: header checks and one ES256
// verification, no query.
func BenchmarkVerify(b *testing.B) {
	bb := setup(b)
	alpha := bb.company(b, "alpha")
	tok := bb.sign(b, bb.keys, alpha, typ, benchPayload)
	_, err := bb.keys.Verify(bb.ctx, alpha, typ, tok)
	require.NoError(b, err)
	loads := signing.Loads(bb.keys)

	b.ReportAllocs()
	for b.Loop() {
		if _, err := bb.keys.Verify(bb.ctx, alpha, typ, tok); err != nil {
			b.Fatal(err)
		}
	}
	require.Equal(b, loads, signing.Loads(bb.keys), "the keys were read again")
}
