package loadgen

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Report is what a run measured.
type Report struct {
	// Rate is the requested rate of all kinds, per second; Duration how
	// long requests were sent, Elapsed until the last answer.
	Rate     float64       `json:"rate"`
	Duration time.Duration `json:"duration_ns"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Replicas int           `json:"replicas"`
	Kinds    []KindReport  `json:"kinds"`
	Readers  ReaderReport  `json:"readers"`
	// Timeline is every kind together, second by second, from the end of
	// the warm-up: it tells a stall of a few seconds from a queue that
	// keeps growing.
	Timeline []SecondReport `json:"timeline"`
	Servers  []ProcReport   `json:"servers"`
	// Generator is this process, which shares the machine with the
	// servers.
	Generator ProcReport `json:"generator"`
	// Database is the PostgreSQL backends serving the run's database.
	Database DatabaseReport `json:"database"`
	// LoadBefore and LoadAfter are the machine's 1, 5 and 15-minute load
	// averages (/proc/loadavg) when the load started and ended.
	LoadBefore [3]float64 `json:"load_before"`
	LoadAfter  [3]float64 `json:"load_after"`
	// CPUs is the machine's, MachineBusy how many of them were busy on
	// average during the run (/proc/stat), whatever ran: the servers,
	// PostgreSQL, this generator and anything else.
	CPUs        int     `json:"cpus"`
	MachineBusy float64 `json:"machine_busy_cores"`
}

// KindReport is one kind's figures.
type KindReport struct {
	Kind Kind `json:"kind"`
	// Rate is the requested rate, Sent the rate at which requests went
	// out, Throughput the successes per second until the last answer.
	Rate       float64 `json:"rate"`
	Sent       float64 `json:"sent_rate"`
	Throughput float64 `json:"throughput"`
	Requests   uint64  `json:"requests"`
	Successes  uint64  `json:"successes"`
	// Errors counts failures by HTTP status, "transport" (no answer),
	// "tool_error" (an MCP error result) or "no_tokens" (a refresh
	// answer without new tokens).
	Errors    map[string]int `json:"errors,omitempty"`
	LastError string         `json:"last_error,omitempty"`
	P50       time.Duration  `json:"p50_ns"`
	P99       time.Duration  `json:"p99_ns"`
	P999      time.Duration  `json:"p999_ns"`
	Max       time.Duration  `json:"max_ns"`

	metrics vegeta.Metrics
}

func newKindReport(k Kind, rate float64) *KindReport { return &KindReport{Kind: k, Rate: rate} }

// close computes the figures once every result is in.
func (kr *KindReport) close() {
	kr.metrics.Close()
	m := &kr.metrics
	kr.Sent, kr.Throughput, kr.Requests = m.Rate, m.Throughput, m.Requests
	kr.Successes = uint64(float64(m.Requests)*m.Success + 0.5)
	kr.P50, kr.P99, kr.Max = m.Latencies.P50, m.Latencies.P99, m.Latencies.Max
	kr.P999 = m.Latencies.Quantile(0.999)
}

// SecondReport is the requests sent in one second of the run.
type SecondReport struct {
	Second   int           `json:"second"`
	Requests int           `json:"requests"`
	Failures int           `json:"failures"`
	Max      time.Duration `json:"max_ns"`
}

// timeline collects SecondReports from every kind's results.
type timeline struct {
	mu      sync.Mutex
	from    time.Time
	seconds []SecondReport
}

func (tl *timeline) add(r *vegeta.Result, failed bool) {
	i := int(r.Timestamp.Sub(tl.from) / time.Second)
	if i < 0 {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for len(tl.seconds) <= i {
		tl.seconds = append(tl.seconds, SecondReport{Second: len(tl.seconds)})
	}
	s := &tl.seconds[i]
	s.Requests++
	if failed {
		s.Failures++
	}
	s.Max = max(s.Max, r.Latency)
}

// ReaderReport is what the conversations' readers saw: long-polls
// answered, messages read, and the time from a message's acceptance to
// its reader.
type ReaderReport struct {
	Readers     int           `json:"readers"`
	Polls       int           `json:"polls"`
	Messages    int           `json:"messages"`
	Errors      int           `json:"errors"`
	LastError   string        `json:"last_error,omitempty"`
	DeliveryP50 time.Duration `json:"delivery_p50_ns"`
	DeliveryP99 time.Duration `json:"delivery_p99_ns"`
}

// ProcReport is one server process's CPU time and resident memory over
// the run, read from /proc.
type ProcReport struct {
	PID int `json:"pid"`
	// CPUSeconds is user plus system time used during the run, CPUCores
	// that divided by the run's length.
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUCores   float64 `json:"cpu_cores"`
	// RSS in MiB: at the start, the end, the lowest and the highest
	// sample. The start follows the setup, whose password hashing can
	// leave the heap large until the runtime returns it.
	RSSStart float64 `json:"rss_start_mib"`
	RSSEnd   float64 `json:"rss_end_mib"`
	RSSMin   float64 `json:"rss_min_mib"`
	RSSMax   float64 `json:"rss_max_mib"`
	// Samples are (seconds since the start, RSS MiB, CPU seconds so far).
	Samples [][3]float64 `json:"samples"`
}

// DatabaseReport is the CPU time of the PostgreSQL backends connected to
// the run's database (found by their process titles in /proc), not
// counting the server's shared processes (WAL writer, checkpointer) nor
// backends that ended between two samples.
type DatabaseReport struct {
	Name       string  `json:"name"`
	Backends   int     `json:"backends"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUCores   float64 `json:"cpu_cores"`
}

// Failures is the number of failed requests of every kind, plus the
// readers' failed polls.
func (r *Report) Failures() int {
	n := r.Readers.Errors
	for _, k := range r.Kinds {
		n += int(k.Requests - k.Successes)
	}
	return n
}

// WriteText writes the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	fmt.Fprintf(w, "rate %.1f/s for %s on %d replica(s); %d CPUs, %.2f busy on average; load average %.2f %.2f %.2f before, %.2f %.2f %.2f after\n\n",
		r.Rate, r.Duration, r.Replicas, r.CPUs, r.MachineBusy, r.LoadBefore[0], r.LoadBefore[1], r.LoadBefore[2],
		r.LoadAfter[0], r.LoadAfter[1], r.LoadAfter[2])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\trate/s\tsent/s\tok/s\trequests\tok\terrors\tp50 ms\tp99 ms\tp99.9 ms\tmax ms\t")
	for _, k := range r.Kinds {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", k.Kind, k.Rate, k.Sent, k.Throughput,
			k.Requests, k.Successes, errorsText(k.Errors), ms(k.P50), ms(k.P99), ms(k.P999), ms(k.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, k := range r.Kinds {
		if k.LastError != "" {
			fmt.Fprintf(w, "%s: last error: %s\n", k.Kind, k.LastError)
		}
	}
	rd := r.Readers
	var worst []string
	for _, s := range r.Timeline {
		if s.Max > 100*time.Millisecond {
			worst = append(worst, fmt.Sprintf("%d s: %s ms", s.Second, ms(s.Max)))
		}
	}
	if len(worst) > 0 {
		fmt.Fprintf(w, "seconds with a request over 100 ms (%d of %d): %s\n", len(worst), len(r.Timeline),
			strings.Join(worst[:min(len(worst), 20)], ", "))
	}
	fmt.Fprintf(w, "\nreaders: %d long-polling, %d polls answered, %d messages read, %d errors; delivery p50 %s ms, p99 %s ms\n",
		rd.Readers, rd.Polls, rd.Messages, rd.Errors, ms(rd.DeliveryP50), ms(rd.DeliveryP99))
	if rd.LastError != "" {
		fmt.Fprintf(w, "readers: last error: %s\n", rd.LastError)
	}
	for _, s := range r.Servers {
		writeProc(w, "server pid "+strconv.Itoa(s.PID), s)
	}
	writeProc(w, "load generator", r.Generator)
	fmt.Fprintf(w, "PostgreSQL backends of %s: %d seen, %.1f CPU seconds (%.2f cores)\n",
		r.Database.Name, r.Database.Backends, r.Database.CPUSeconds, r.Database.CPUCores)
	return nil
}

func writeProc(w io.Writer, name string, s ProcReport) {
	fmt.Fprintf(w, "%s: %.1f CPU seconds (%.2f cores); RSS MiB %.1f at start, %.1f at end, %.1f min, %.1f max\n",
		name, s.CPUSeconds, s.CPUCores, s.RSSStart, s.RSSEnd, s.RSSMin, s.RSSMax)
}

func errorsText(errs map[string]int) string {
	if len(errs) == 0 {
		return "0"
	}
	var keys []string
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, errs[k]))
	}
	return strings.Join(parts, ",")
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procSample reads a process's CPU seconds (user + system) and RSS in
// MiB.
func procSample(pid int) (cpu, rss float64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("loadgen: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("loadgen: bad /proc/%d/stat", pid)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, 0, err
			}
			rss = kb / 1024
		}
	}
	return (utime + stime) / clockTicks, rss, nil
}

// sampler reads the servers' /proc figures every interval.
type sampler struct {
	pids    []int
	db      string             // the database whose backends to follow
	backend map[int][2]float64 // backend PID -> CPU seconds first and last seen
	busy    [2]float64         // the machine's busy and total CPU seconds at the start
	began   time.Time
	start   []float64 // CPU seconds at the start
	done    chan struct{}
	wg      sync.WaitGroup
	reports []ProcReport
}

func startSampler(pids []int, db string, every time.Duration) *sampler {
	s := &sampler{pids: pids, db: db, backend: map[int][2]float64{}, began: time.Now(), done: make(chan struct{}), busy: machineCPU()}
	s.reports = make([]ProcReport, len(pids))
	s.start = make([]float64, len(pids))
	for i, pid := range pids {
		s.reports[i].PID = pid
		cpu, rss, _ := procSample(pid)
		s.start[i] = cpu
		s.reports[i].RSSStart, s.reports[i].RSSMin, s.reports[i].RSSMax = rss, rss, rss
		s.reports[i].Samples = append(s.reports[i].Samples, [3]float64{0, rss, 0})
	}
	s.sampleBackends(true)
	s.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.sample()
			}
		}
	})
	return s
}

func (s *sampler) sample() {
	s.sampleBackends(false)
	at := time.Since(s.began).Seconds()
	for i, pid := range s.pids {
		cpu, rss, err := procSample(pid)
		if err != nil {
			continue
		}
		r := &s.reports[i]
		r.CPUSeconds, r.RSSEnd = cpu-s.start[i], rss
		r.RSSMin, r.RSSMax = min(r.RSSMin, rss), max(r.RSSMax, rss)
		r.Samples = append(r.Samples, [3]float64{at, rss, r.CPUSeconds})
	}
}

// stop takes a last sample and returns the figures.
func (s *sampler) stop() ([]ProcReport, DatabaseReport) {
	close(s.done)
	s.wg.Wait()
	s.sample()
	elapsed := time.Since(s.began).Seconds()
	for i := range s.reports {
		s.reports[i].CPUCores = s.reports[i].CPUSeconds / elapsed
	}
	return s.reports, s.database(elapsed)
}

// sampleBackends reads the CPU time of every PostgreSQL backend of the
// database: at the start as the baseline, later from 0 for a backend
// that started during the run.
func (s *sampler) sampleBackends(first bool) {
	if s.db == "" {
		return
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		title, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(title, []byte("postgres: ")) ||
			!bytes.Contains(title, []byte(" "+s.db+" ")) {
			continue
		}
		cpu, _, err := procSample(pid)
		if err != nil {
			continue
		}
		seen, ok := s.backend[pid]
		switch {
		case !ok && first:
			seen = [2]float64{cpu, cpu}
		case !ok:
			seen = [2]float64{0, cpu}
		default:
			seen[1] = cpu
		}
		s.backend[pid] = seen
	}
}

// database sums the backends' CPU time.
func (s *sampler) database(elapsed float64) DatabaseReport {
	d := DatabaseReport{Name: s.db, Backends: len(s.backend)}
	for _, seen := range s.backend {
		d.CPUSeconds += seen[1] - seen[0]
	}
	d.CPUCores = d.CPUSeconds / elapsed
	return d
}

// machineBusy is how many CPUs were busy on average since the start.
func (s *sampler) machineBusy() float64 {
	now := machineCPU()
	if now[1] <= s.busy[1] {
		return 0
	}
	return (now[0] - s.busy[0]) / (now[1] - s.busy[1]) * float64(runtime.NumCPU())
}

// machineCPU reads the busy and total CPU seconds of every CPU together
// from /proc/stat: busy is all but idle and iowait.
func machineCPU() [2]float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return [2]float64{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy, total float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest times are already in user and nice
			break
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return [2]float64{busy / clockTicks, total / clockTicks}
}

// loadAverage reads /proc/loadavg; zeros when it cannot.
func loadAverage() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}
