package httpsig

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
)

// The RFC 9421 Appendix B.2 test-request and its signatures. The keys
// (Appendix B.1) and the expected signature bases are in testdata.
const (
	contentDigest = "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"
)

func testRequest() Message {
	h := http.Header{}
	h.Set("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
	h.Set("Content-Type", "application/json")
	h.Set("Content-Digest", contentDigest)
	h.Set("Content-Length", "18")
	return Message{Method: "POST", Scheme: "https", Authority: "example.com", Path: "/foo", RawQuery: "param=Value&Pet=dog", Header: h}
}

func proxyRequest(t *testing.T) Message {
	h := http.Header{}
	h.Set("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", "18")
	h.Set("Client-Cert", read(t, "b3.client-cert"))
	return Message{Method: "POST", Scheme: "https", Authority: "service.internal.example", Path: "/foo", RawQuery: "param=Value&Pet=dog", Header: h}
}

func read(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func publicKey(t testing.TB, name string) crypto.PublicKey {
	t.Helper()
	blk, _ := pem.Decode([]byte(read(t, name)))
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type vector struct {
	name, base, key  string
	input, signature string
	msg              func(*testing.T) Message
}

var vectors = []vector{
	{"B.2.1", "b21.base", "test-key-rsa-pss.pem",
		`sig-b21=();created=1618884473;keyid="test-key-rsa-pss";nonce="b3k2pp5k7z-50gnwp.yemd"`,
		`sig-b21=:d2pmTvmbncD3xQm8E9ZV2828BjQWGgiwAaw5bAkgibUopemLJcWDy/lkbbHAve4cRAtx31Iq786U7it++wgGxbtRxf8Udx7zFZsckzXaJMkA7ChG52eSkFxykJeNqsrWH5S+oxNFlD4dzVuwe8DhTSja8xxbR/Z2cOGdCbzR72rgFWhzx2VjBqJzsPLMIQKhO4DGezXehhWwE56YCE+O6c0mKZsfxVrogUvA4HELjVKWmAvtl6UnCh8jYzuVG5WSb/QEVPnP5TmcAnLH1g+s++v6d4s8m0gCw1fV5/SITLq9mhho8K3+7EPYTU8IU1bLhdxO5Nyt8C8ssinQ98Xw9Q==:`,
		func(*testing.T) Message { return testRequest() }},
	{"B.2.2", "b22.base", "test-key-rsa-pss.pem",
		`sig-b22=("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"`,
		`sig-b22=:LjbtqUbfmvjj5C5kr1Ugj4PmLYvx9wVjZvD9GsTT4F7GrcQEdJzgI9qHxICagShLRiLMlAJjtq6N4CDfKtjvuJyE5qH7KT8UCMkSowOB4+ECxCmT8rtAmj/0PIXxi0A0nxKyB09RNrCQibbUjsLS/2YyFYXEu4TRJQzRw1rLEuEfY17SARYhpTlaqwZVtR8NV7+4UKkjqpcAoFqWFQh62s7Cl+H2fjBSpqfZUJcsIk4N6wiKYd4je2U/lankenQ99PZfB4jY3I5rSV2DSBVkSFsURIjYErOs0tFTQosMTAoxk//0RoKUqiYY8Bh0aaUEb0rQl3/XaVe4bXTugEjHSw==:`,
		func(*testing.T) Message { return testRequest() }},
	{"B.2.3", "b23.base", "test-key-rsa-pss.pem",
		`sig-b23=("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss"`,
		`sig-b23=:bbN8oArOxYoyylQQUU6QYwrTuaxLwjAC9fbY2F6SVWvh0yBiMIRGOnMYwZ/5MR6fb0Kh1rIRASVxFkeGt683+qRpRRU5p2voTp768ZrCUb38K0fUxN0O0iC59DzYx8DFll5GmydPxSmme9v6ULbMFkl+V5B1TP/yPViV7KsLNmvKiLJH1pFkh/aYA2HXXZzNBXmIkoQoLd7YfW91kE9o/CCoC1xMy7JA1ipwvKvfrs65ldmlu9bpG6A9BmzhuzF8Eim5f8ui9eH8LZH896+QIF61ka39VBrohr9iyMUJpvRX2Zbhl5ZJzSRxpJyoEZAFL2FUo5fTIztsDZKEgM4cUA==:`,
		func(*testing.T) Message { return testRequest() }},
	// B.2.5 is HMAC, which this package does not verify; its base is
	// still checked below.
	{"B.2.5", "b25.base", "",
		`sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"`,
		`sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:`,
		func(*testing.T) Message { return testRequest() }},
	{"B.2.6", "b26.base", "test-key-ed25519.pem",
		`sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`,
		`sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:`,
		func(*testing.T) Message { return testRequest() }},
	{"B.3", "b3.base", "test-key-ecc-p256.pem",
		`ttrp=("@path" "@query" "@method" "@authority" "client-cert");created=1618884473;keyid="test-key-ecc-p256"`,
		`ttrp=:xVMHVpawaAC/0SbHrKRs9i8I3eOs5RtTMGCWXm/9nvZzoHsIg6Mce9315T6xoklyy0yzhD9ah4JHRwMLOgmizw==:`,
		proxyRequest},
}

// TestRFCVectors builds each Appendix B request signature's base, compares
// it byte for byte with the RFC's, and verifies the RFC's signature.
func TestRFCVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			m := v.msg(t)
			m.Header.Set("Signature-Input", v.input)
			m.Header.Set("Signature", v.signature)
			sigs, err := Parse(m.Header)
			if err != nil || len(sigs) != 1 {
				t.Fatalf("Parse: %v, %d signatures", err, len(sigs))
			}
			base, err := Base(m, sigs[0].Input)
			if err != nil {
				t.Fatal(err)
			}
			if want := read(t, v.base); base != want {
				t.Fatalf("signature base differs:\ngot:\n%s\nwant:\n%s", base, want)
			}
			if v.key == "" {
				return
			}
			key := publicKey(t, v.key)
			if err := Verify(m, &sigs[0], key); err != nil {
				t.Fatalf("the RFC's signature does not verify: %v", err)
			}
			// One changed covered byte breaks it.
			sigs[0].Value[0] ^= 1
			if err := Verify(m, &sigs[0], key); err != ErrBadSignature {
				t.Fatalf("a changed signature verified: %v", err)
			}
		})
	}
}

// TestRFCEd25519Sign re-derives B.2.6 with Sign: Ed25519 is deterministic,
// so the signature must be the RFC's, byte for byte.
func TestRFCEd25519Sign(t *testing.T) {
	blk, _ := pem.Decode([]byte(read(t, "test-key-ed25519-private.pem")))
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	in, sig, err := Sign(testRequest(), "sig-b26",
		[]string{"date", "@method", "@path", "@authority", "content-type", "content-length"},
		[]Param{{"created", int64(1618884473)}, {"keyid", "test-key-ed25519"}}, k.(ed25519.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	if in != vectors[4].input || sig != vectors[4].signature {
		t.Fatalf("Sign gave\n%s\n%s", in, sig)
	}
}

// TestDerivedComponents covers the derived components the vectors leave
// out, with the RFC 9421 §2.2 examples' values.
func TestDerivedComponents(t *testing.T) {
	m := Message{Method: "GET", Scheme: "HTTPS", Authority: "WWW.Example.com:443", Path: "/path", RawQuery: "param=value", Header: http.Header{}}
	want := map[string]string{
		"@method":         "GET",
		"@authority":      "www.example.com",
		"@scheme":         "https",
		"@target-uri":     "https://www.example.com/path?param=value",
		"@request-target": "/path?param=value",
		"@path":           "/path",
		"@query":          "?param=value",
	}
	for name, v := range want {
		got, err := componentValues(m, name, httpsfv.NewParams())
		if err != nil || len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, %v; want %q", name, got, err, v)
		}
	}
	m.RawQuery, m.Path = "", ""
	for name, v := range map[string]string{"@query": "?", "@path": "/", "@request-target": "/"} {
		if got, _ := componentValues(m, name, httpsfv.NewParams()); len(got) != 1 || got[0] != v {
			t.Errorf("empty %s = %q; want %q", name, got, v)
		}
	}
}

func TestMalformed(t *testing.T) {
	for name, c := range map[string][2]string{
		"absent field":      {`s=("x-absent");created=1`, `s=:AAAA:`},
		"uppercase":         {`s=("Date");created=1`, `s=:AAAA:`},
		"duplicate":         {`s=("date" "date");created=1`, `s=:AAAA:`},
		"unknown derived":   {`s=("@status");created=1`, `s=:AAAA:`},
		"params on derived": {`s=("@method";x=1);created=1`, `s=:AAAA:`},
	} {
		m := testRequest()
		m.Header.Set("Signature-Input", c[0])
		m.Header.Set("Signature", c[1])
		sigs, err := Parse(m.Header)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := Base(m, sigs[0].Input); err == nil {
			t.Errorf("%s: built a base", name)
		}
	}
	for name, c := range map[string][2]string{
		"labels differ":  {`a=();created=1`, `b=:AAAA:`},
		"not bytes":      {`a=();created=1`, `a="x"`},
		"not inner list": {`a=1`, `a=:AAAA:`},
		"only input":     {`a=();created=1`, ``},
	} {
		h := http.Header{}
		h.Set("Signature-Input", c[0])
		if c[1] != "" {
			h.Set("Signature", c[1])
		}
		if _, err := Parse(h); err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("%s: Parse = %v", name, err)
		}
	}
}
