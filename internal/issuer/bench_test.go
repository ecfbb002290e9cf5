package issuer_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/poppyhost/poppyhost/internal/clientauth"
	"github.com/poppyhost/poppyhost/internal/testkit/peers"
)

// benchSetup is setup for benchmarks: the same Company, with rate limits
// high enough that the token endpoint is never answered with 429, found
// in a Company cache as the platform does, and the database's round trips
// counted.
func benchSetup(b *testing.B) *stormline {
	b.Helper()
	return setupWith(b, options{Tracer: &tripRecorder{}, CachedCompanies: true}, map[string]any{
		"rate_limits": map[string]any{"per_address": 1_000_000, "per_agent": 1_000_000, "per_session": 1_000_000},
	})
}

// benchGrant runs Direct Sign-In in br and returns the grant's refresh
// token. br signs in on its first grant only, so further grants cost no
// password hashing.
func (s *stormline) benchGrant(b *testing.B, br *peers.Browser) string {
	b.Helper()
	verifier := oauth2.GenerateVerifier()
	page := br.Get(s.conf.AuthCodeURL("bench", oauth2.S256ChallengeOption(verifier)))
	require.Equal(b, http.StatusOK, page.Status, page.Body)
	if strings.Contains(page.Body, `name="password"`) {
		page = br.Submit(page, "login", map[string][]string{"username": {testUser}, "password": {testPassword}})
		require.Equal(b, http.StatusOK, page.Status, page.Body)
	}
	page = br.Submit(page, "approve", map[string][]string{"scope": s.conf.Scopes})
	require.Equal(b, http.StatusSeeOther, page.Status, page.Body)
	back, err := url.Parse(page.Location())
	require.NoError(b, err)
	rt, err := s.benchToken(b, url.Values{
		"grant_type": {"authorization_code"}, "code": {back.Query().Get("code")},
		"redirect_uri": {s.conf.RedirectURL}, "code_verifier": {verifier},
	})
	require.NoError(b, err)
	return rt
}

// benchToken posts form to the token endpoint with a new client assertion,
// as a Personal Agent does, and returns the refresh token it answers with.
func (s *stormline) benchToken(b *testing.B, form url.Values) (string, error) {
	form.Set("client_id", s.agent.ClientID)
	form.Set("client_assertion_type", clientauth.AssertionType)
	form.Set("client_assertion", s.agent.ClientAssertion(b, s.issuer))
	resp, err := s.env.Client.PostForm(s.conf.Endpoint.TokenURL, form)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		Error        string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK || tok.AccessToken == "" || tok.RefreshToken == "" {
		return "", fmt.Errorf("token endpoint: status %d, error %q", resp.StatusCode, tok.Error)
	}
	return tok.RefreshToken, nil
}

// refresh uses rt once and returns the rotated refresh token.
func (s *stormline) refresh(b *testing.B, rt string) (string, error) {
	return s.benchToken(b, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// dbCounters are the test database's committed transactions and written
// rows, and the CPU time of its server processes.
type dbCounters struct {
	xacts, inserted, updated int64
	cpu                      time.Duration
}

// counters reads pg_stat_database after waiting for the pool's connections
// to report (an idle backend flushes its statistics within a second,
// PostgreSQL 15), and the CPU time of the database's backends from /proc
// (zero where there is none). The pool keeps its connections open, so the
// same backends are counted before and after.
func (s *stormline) counters(b *testing.B) dbCounters {
	b.Helper()
	time.Sleep(1500 * time.Millisecond)
	ctx := context.Background()
	var c dbCounters
	var pids []int32
	require.NoError(b, s.env.Pool.QueryRow(ctx, `
		SELECT xact_commit + xact_rollback, tup_inserted, tup_updated,
			(SELECT array_agg(pid) FROM pg_stat_activity WHERE datname = current_database())
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.xacts, &c.inserted, &c.updated, &pids))
	for _, pid := range pids {
		c.cpu += processCPU(int(pid))
	}
	return c
}

// processCPU is the user and system time of a process, from
// /proc/{pid}/stat in clock ticks of 10 ms; zero when it cannot be read.
func processCPU(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which ends with the last ')':
	// state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// cpuTime is the CPU time this process (client and server) has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRefreshGrant refreshes one grant over and over, one request at
// a time, end to end: the client signs a client assertion (ES256) and
// posts grant_type=refresh_token over HTTPS (HTTP/2, one connection); the
// server finds the Company in its cache, verifies the assertion (warm
// resolver cache), records its jti as it reads the refresh token, signs a
// new access token, and rotates the refresh token as it stores both new
// tokens; the client decodes the answer and uses the rotated refresh token
// next. Besides ns/op it reports per refresh the CPU time of this process
// (client and server share it) and of the database's PostgreSQL backends,
// the transactions and rows written from pg_stat_database, the round
// trips to the database, and its baseline (signBaseline).
func BenchmarkRefreshGrant(b *testing.B) {
	s := benchSetup(b)
	rt := s.benchGrant(b, s.env.Browser(b))
	rt, err := s.refresh(b, rt) // warm-up: keys, connections
	require.NoError(b, err)
	before := s.counters(b)
	cpu := cpuTime()
	trips := s.trips.Count()

	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if rt, err = s.refresh(b, rt); err != nil {
			b.Fatal(err)
		}
		n++
	}
	cpu = cpuTime() - cpu
	trips = s.trips.Count() - trips
	elapsed := b.Elapsed()
	after := s.counters(b)

	b.ReportMetric(float64(n)/elapsed.Seconds(), "refreshes/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "go-cpu-µs/op")
	if after.cpu > 0 {
		b.ReportMetric(float64((after.cpu-before.cpu).Microseconds())/float64(n), "pg-cpu-µs/op")
	}
	signBaseline(b, 1, elapsed/time.Duration(n), (cpu+after.cpu-before.cpu)/time.Duration(n))
	b.ReportMetric(float64(after.xacts-before.xacts)/float64(n), "xacts/op")
	b.ReportMetric(float64(trips)/float64(n), "round-trips/op")
	b.ReportMetric(float64(after.inserted-before.inserted)/float64(n), "inserts/op")
	b.ReportMetric(float64(after.updated-before.updated)/float64(n), "updates/op")
}

// BenchmarkRefreshGrantParallel is BenchmarkRefreshGrant with
// 4×GOMAXPROCS clients at once, each refreshing its own grant, over the
// same HTTP/2 connection: the token endpoint's throughput.
func BenchmarkRefreshGrantParallel(b *testing.B) {
	s := benchSetup(b)
	s.refreshParallel(b, s.parallelGrants(b))
}

// BenchmarkRefreshGrantRounds is BenchmarkRefreshGrantParallel five times
// back to back on one database that is never analyzed (the test server
// runs without autovacuum): every round's tokens stay, so a plan that
// read a Company's tokens instead of one would slow each round down
// (issue 24). x-round1 is a round's ns/op over the first round's.
func BenchmarkRefreshGrantRounds(b *testing.B) {
	s := benchSetup(b)
	grants := s.parallelGrants(b)
	var first float64
	for i := 1; i <= 5; i++ {
		var rate float64
		b.Run(fmt.Sprintf("round=%d", i), func(b *testing.B) {
			rate = s.refreshParallel(b, grants)
			if first > 0 {
				b.ReportMetric(first/rate, "x-round1")
			}
		})
		if i == 1 {
			first = rate
		}
	}
}

// parallelGrants signs in one grant per client of refreshParallel.
func (s *stormline) parallelGrants(b *testing.B) []string {
	br := s.env.Browser(b)
	grants := make([]string, benchPerProc*runtime.GOMAXPROCS(0))
	for i := range grants {
		grants[i] = s.benchGrant(b, br)
	}
	return grants
}

// benchPerProc is how many refreshing clients per GOMAXPROCS.
const benchPerProc = 4

// refreshParallel refreshes the grants (their refresh tokens), one client
// each, over the same HTTP/2 connection, keeps each grant's rotated token
// in grants, and returns the refreshes per second. Per refresh it reports
// the CPU time of this process (go-cpu-µs/op) and of the database's
// PostgreSQL backends (pg-cpu-µs/op), the transactions, the round trips
// to the database, and its baseline (signBaseline).
func (s *stormline) refreshParallel(b *testing.B, grants []string) float64 {
	before := s.counters(b)
	cpu := cpuTime()
	trips := s.trips.Count()
	var next atomic.Int64
	b.SetParallelism(benchPerProc)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) - 1)
		if i >= len(grants) {
			b.Error("more clients than grants")
			return
		}
		for pb.Next() {
			rt, err := s.refresh(b, grants[i])
			if err != nil {
				b.Error(err)
				return
			}
			grants[i] = rt
		}
	})
	b.StopTimer()
	cpu = cpuTime() - cpu
	trips = s.trips.Count() - trips
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "refreshes/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "go-cpu-µs/op")
	after := s.counters(b)
	if after.cpu > 0 {
		b.ReportMetric(float64((after.cpu-before.cpu).Microseconds())/float64(b.N), "pg-cpu-µs/op")
	}
	signBaseline(b, len(grants), b.Elapsed()/time.Duration(b.N), (cpu+after.cpu-before.cpu)/time.Duration(b.N))
	b.ReportMetric(float64(after.xacts-before.xacts)/float64(b.N), "xacts/op")
	b.ReportMetric(float64(trips)/float64(b.N), "round-trips/op")
	return rate
}

// signBaseline measures the refresh benchmarks' baseline just after their
// loop, with the timer stopped, and reports the ratios to it: bare ES256
// signatures of a SHA-256 digest, from as many goroutines as the
// benchmark had clients. x-sign is the wall time per refresh over the
// wall time per signature, x-sign-cpu a refresh's CPU time (this process
// and the database's backends) over a signature's.
func signBaseline(b *testing.B, clients int, perRefresh, refreshCPU time.Duration) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(b, err)
	digest := sha256.Sum256([]byte("baseline"))
	const n = 4000
	start, cpu := time.Now(), cpuTime()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range n / clients {
				if _, err := ecdsa.SignASN1(rand.Reader, key, digest[:]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	signs := time.Duration(n / clients * clients)
	wall, signCPU := time.Since(start)/signs, (cpuTime()-cpu)/signs
	b.ReportMetric(float64(perRefresh)/float64(wall), "x-sign")
	b.ReportMetric(float64(refreshCPU)/float64(signCPU), "x-sign-cpu")
}
