package discovery_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/poppyhost/poppyhost/internal/discovery"
)

// BenchmarkPoppyJSON fetches poppy.json over real HTTPS (HTTP/2, one
// connection) from the discovery handler on a real database: Host routing,
// the Company lookup, building and encoding (without the platform's
// request logging and metrics). It reports requests per second
// across 4×GOMAXPROCS concurrent clients. Allocations count the client and
// the server, which share the process.
func BenchmarkPoppyJSON(b *testing.B) {
	env := setup(b)
	env.CreateCompany(b, cases[1].adminBody(b)) // full
	u := env.URL("example.com", poppyPath)
	requireDocument(b, get(b, env, u), "warm-up")

	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := env.Client.Get(u)
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("status %d, %v", resp.StatusCode, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkBuildPoppyJSON measures the pure builder, and the builder with
// the JSON encoding the handler adds.
func BenchmarkBuildPoppyJSON(b *testing.B) {
	for _, tc := range []companyCase{cases[0], cases[1]} {
		c := tc.company(b)
		domain := c.Settings.Organization.Domain
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var doc discovery.PoppyJSON
			for b.Loop() {
				doc = discovery.BuildPoppyJSON(c, domain, goldenURLs)
			}
			if doc.Organization.Domain != domain {
				b.Fatal(doc.Organization.Domain)
			}
		})
		b.Run(tc.name+"+marshal", func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				raw, err := json.Marshal(discovery.BuildPoppyJSON(c, domain, goldenURLs))
				if err != nil {
					b.Fatal(err)
				}
				n = len(raw)
			}
			b.ReportMetric(float64(n), "bytes/doc")
		})
	}
}
