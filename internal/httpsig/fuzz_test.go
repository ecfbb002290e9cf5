package httpsig

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseAndVerify feeds Signature-Input and Signature fields, with a
// query and a Dictionary field of the fuzzer's, to Parse, Base and Verify
// as a Web Bot Auth request brings them: every refusal is ErrMalformed
// (or ErrBadSignature from Verify), a base is as long as what it covers
// and no more, and a signature that verifies does not once changed. The seeds
// are the RFC 9421 Appendix B signatures; testdata/fuzz holds more, and
// every finding.
func FuzzParseAndVerify(f *testing.F) {
	for _, v := range vectors {
		f.Add(v.input, v.signature, "param=Value&Pet=dog", `a=1, b=("x" "y");p, c=:AAAA:`)
	}
	for _, seed := range [][2]string{
		{`s=("x-dict";key="b" "x-dict";key="a" "@query-param";name="Pet" "@query-param";name="param");created=1`, `s=:AAAA:`},
		{`s=("@query-param";name="a%20b" "@query-param";name="a b");created=1`, `s=:AAAA:`},
		{`s=("date" "date");created=1`, `s=:AAAA:`},
		{`s=("date";bs "date";sf "Date");created=1`, `s=:AAAA:`},
		{`s=("@method";x=1);created=1;alg=1`, `s=:AAAA:`},
		{`a=();created=1, b=();created=2`, `a=:AAAA:, b=:AAAA:`},
		{`a=1`, `a=:AAAA:`},
		{`a=();created=1`, `a="x"`},
		{`a=();created=1`, ``},
	} {
		f.Add(seed[0], seed[1], "a%20b=1&a+b=2&Pet=cat", `a=1, b=2`)
	}
	ed := publicKey(f, "test-key-ed25519.pem")
	f.Fuzz(func(t *testing.T, input, signature, query, dict string) {
		m := testRequest()
		m.RawQuery = query
		m.Header.Set("X-Dict", dict)
		m.Header.Set("Signature-Input", input)
		m.Header.Set("Signature", signature)
		sigs, err := Parse(m.Header)
		if err != nil {
			if sigs != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("signatures %v, error %v", sigs, err)
			}
			return
		}
		if len(sigs) > maxSignatures {
			t.Fatalf("%d signatures", len(sigs))
		}
		covered := len(query) + len(input)
		for name, lines := range m.Header {
			covered += len(name) + len(strings.Join(lines, ", "))
		}
		for _, s := range sigs {
			base, err := Base(m, s.Input)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("base of %s: %v", s.Label, err)
				}
				continue
			}
			// Each covered component is a line of its name and value,
			// and a query parameter is matched at most twice (as
			// written and escaped).
			if len(base) > 3*covered+256 {
				t.Fatalf("a base of %d bytes from %d bytes of request", len(base), covered)
			}
			switch err := Verify(m, &s, ed); {
			case err == nil:
				s.Value[0] ^= 1
				if err := Verify(m, &s, ed); !errors.Is(err, ErrBadSignature) {
					t.Fatalf("%s verified with a changed signature: %v", s.Label, err)
				}
			case !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadSignature):
				t.Fatalf("verify %s: %v", s.Label, err)
			}
		}
	})
}
