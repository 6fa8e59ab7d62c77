package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// hist is a histogram of n samples of d.
func hist(n int, d time.Duration) *loadgen.Histogram {
	h := loadgen.NewHistogram()
	for range n {
		h.Record(d)
	}
	return h
}

func meas(workload string, ops int64, elapsed, cpu time.Duration) Measurement {
	return Measurement{Workload: workload, Report: loadgen.Report{Workers: 4, Ops: ops, Elapsed: elapsed, Latency: hist(int(ops), 100*time.Millisecond)},
		CPU: CPU{Cgroup: cpu, HasCgroup: true}}
}

func TestSSHSection(t *testing.T) {
	tests := []struct {
		name     string
		sshCPU   time.Duration
		sshOps   int64
		want     string
		verdicts []string
	}{
		{"within target", 11 * time.Second, 10, "| clone | SSH | 10 | 0 | 600 | 100 ms | 100 ms | 1100 ms | 1.10× | 1.00× |", []string{"1.10× (target ≤ 1.20×) — met"}},
		{"over target", 13 * time.Second, 10, "| 1300 ms | 1.30× |", []string{"1.30× (target ≤ 1.20×) — **missed**"}},
		{"no ssh op", 13 * time.Second, 0, "| clone | SSH | 0 |", []string{"– (target ≤ 1.20×) — not measured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			http := meas("clone", 10, time.Minute, 10*time.Second)
			ssh := meas("clone", tt.sshOps, time.Minute, tt.sshCPU)
			md := SSHSection([]Measurement{http}, []Measurement{ssh}, 1.2).Markdown()
			for _, w := range append([]string{tt.want}, tt.verdicts...) {
				if !strings.Contains(md, w) {
					t.Errorf("lacks %q:\n%s", w, md)
				}
			}
		})
	}
}

func TestStormSection(t *testing.T) {
	st := Storm{
		Backend:  meas("clone", 40, time.Minute, 4*time.Second),
		Uncached: meas("clone", 20, time.Minute, 4*time.Second),
		Cached:   meas("clone", 300, time.Minute, 900*time.Millisecond),
		Static:   meas("static", 500, time.Minute, 100*time.Millisecond),
		Hits:     290, Coalesced: 10, Misses: 1,
		SlowOff:  SlowClone{Took: 13 * time.Second, Git: GitUsage{Processes: 2, Lifetime: 12 * time.Second, PeakRSS: 100 << 20, MaxHWM: 80 << 20}},
		SlowOn:   SlowClone{Took: 13 * time.Second, Git: GitUsage{Processes: 2, Lifetime: 3 * time.Second, PeakRSS: 100 << 20, MaxHWM: 80 << 20}},
		SlowRate: 1e6,
	}
	md := StormSection(st).Markdown()
	for _, w := range []string{
		"| Sluice, cache on | 4 | 300 | 0 | 18000 |",
		"| 15.00× | 0.60× |",
		"cache on ÷ uncached clones/hour: 15.00× (target ≥ 10.00×) — met",
		"cache on ÷ static-file floor: 60% (target ≥ 50%) — met",
		// 900 ms over 300 hits and coalesced followers.
		"server CPU per hit: 3.00 ms (target ≤ 5.00 ms) — met",
		"| off | 13000 ms | 2 | 12000 ms | 100.0 MiB | 80.0 MiB |",
		"git lived 0.25× as long",
		"1.0 MB/s",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("lacks %q:\n%s", w, md)
		}
	}
	st.Cached = meas("clone", 150, time.Minute, 900*time.Millisecond)
	st.Hits, st.Coalesced = 0, 0
	md = StormSection(st).Markdown()
	for _, w := range []string{"7.50× (target ≥ 10.00×) — **missed**", "30% (target ≥ 50%) — **missed**", "server CPU per hit: – (target ≤ 5.00 ms) — not measured"} {
		if !strings.Contains(md, w) {
			t.Errorf("lacks %q:\n%s", w, md)
		}
	}
}

func TestUtilStats(t *testing.T) {
	tests := []struct {
		samples      []float64
		mean, inBand float64
		ok           bool
	}{
		{nil, 0, 0, false},
		{[]float64{0.75, 0.65, 0.85, 0.95}, 0.80, 0.75, true},
		{[]float64{0.5, 1}, 0.75, 0, true},
	}
	for _, tt := range tests {
		mean, in, ok := utilStats(tt.samples)
		if ok != tt.ok || !near(mean, tt.mean) || !near(in, tt.inBand) {
			t.Errorf("utilStats(%v) = %v, %v, %v; want %v, %v, %v", tt.samples, mean, in, ok, tt.mean, tt.inBand, tt.ok)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestThrottleSection(t *testing.T) {
	run := func(mode string, ops int64, util []float64, restStorm time.Duration, errs, timeouts int64) ThrottleRun {
		m := meas("storm", ops, time.Minute, time.Minute)
		m.Report.Errors = errs
		m.Report.Offered, m.Report.CutOff = 3*ops, ops/2
		return ThrottleRun{Mode: mode, Storm: m, IdleREST: hist(10, 10*time.Millisecond), REST: hist(10, restStorm),
			IdleHit: hist(10, 50*time.Millisecond), Hit: hist(10, 100*time.Millisecond), Util: util, Metric: util, QueueTimeouts: timeouts}
	}
	off := run("off", 100, []float64{1, 1}, 500*time.Millisecond, 0, 0)
	on := run("on", 100, []float64{0.7, 0.8, 0.9}, 25*time.Millisecond, 2, 2)
	md := ThrottleSection(on, off).Markdown()
	for _, w := range []string{
		"| off | 300 | 100 | 50 | 0 (0) | 6000 | 600 ms |",
		"| on | 300 | 100 | 50 | 2 (2) | 6000 | 600 ms |",
		"REST GET p95 during the storm ÷ idle: 2.50× (target ≤ 3.00×) — met",
		"cache-hit clone p95 during the storm ÷ idle: 2.00× (target ≤ 3.00×) — met",
		"mean 80%, 67% of samples in band (target: mean in band) — met",
		"completed clones/hour: 1.00× (target ≥ 1.00×) — met",
		"errors other than queue timeouts: 0 (probe errors 0) — met",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("lacks %q:\n%s", w, md)
		}
	}
	on = run("on", 90, []float64{0.95, 0.95}, 50*time.Millisecond, 3, 1)
	md = ThrottleSection(on, off).Markdown()
	for _, w := range []string{
		"5.00× (target ≤ 3.00×) — **missed**",
		"mean 95%, 0% of samples in band (target: mean in band) — **missed**",
		"0.90× (target ≥ 1.00×) — **missed**",
		"errors other than queue timeouts: 2 (probe errors 0) — **missed**",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("lacks %q:\n%s", w, md)
		}
	}
}

func TestDistinctWants(t *testing.T) {
	heads := []string{"h1", "h2"}
	var tags []string
	for i := range 11 {
		tags = append(tags, string(rune('a'+i)))
	}
	n := len(tags) * ((len(tags) - 1) / 2)
	seen := map[string]bool{}
	for i := range int64(n) {
		w := distinctWants(heads, tags, i)
		if len(w) != len(heads)+len(tags)-2 || !slices.Contains(w, "h1") || !slices.Contains(w, "h2") {
			t.Fatalf("op %d wants %v", i, w)
		}
		key := strings.Join(w, ",")
		if seen[key] {
			t.Fatalf("op %d repeats an earlier request: %v", i, w)
		}
		seen[key] = true
	}
	// Too few tags to leave two out: everything is wanted.
	if w := distinctWants(heads, []string{"x", "y"}, 5); len(w) != 4 {
		t.Errorf("two tags: %v", w)
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time         { return c.t }
func (c *fakeClock) sleep(d time.Duration)  { c.t = c.t.Add(d) }
func (c *fakeClock) elapsed() time.Duration { return c.t.Sub(time.Unix(0, 0)) }

func TestRateReader(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	const size, rate = 1 << 20, 256 << 10
	r := &rateReader{r: io.NopCloser(strings.NewReader(strings.Repeat("x", size))), rate: rate, now: clock.now, sleep: clock.sleep}
	buf := make([]byte, 1<<20)
	var got, reads int
	for {
		n, err := r.Read(buf)
		got += n
		reads++
		if n > rate/16 {
			t.Fatalf("read of %d bytes, more than a sixteenth of a second's worth", n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// 1 MiB at 256 KiB/s is four seconds of the fake clock.
	if got != size || clock.elapsed() != 4*time.Second {
		t.Errorf("read %d bytes in %s", got, clock.elapsed())
	}
}

func TestMetricSum(t *testing.T) {
	text := `# HELP sluice_packcache_lookups_total Pack cache lookups.
# TYPE sluice_packcache_lookups_total counter
sluice_packcache_lookups_total{kind="packs",result="hit"} 42
sluice_packcache_lookups_total{kind="packs",result="miss"} 3
sluice_packcache_lookups_total{kind="refs",result="hit"} 100
sluice_throttle_cpu_utilization_ratio 0.74
sluice_throttle_cpu_utilization_ratio_other 9
`
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
		ok     bool
	}{
		{"sluice_packcache_lookups_total", map[string]string{"kind": "packs", "result": "hit"}, 42, true},
		{"sluice_packcache_lookups_total", map[string]string{"result": "hit"}, 142, true},
		{"sluice_packcache_lookups_total", nil, 145, true},
		{"sluice_packcache_lookups_total", map[string]string{"result": "coalesced"}, 0, false},
		{"sluice_throttle_cpu_utilization_ratio", nil, 0.74, true},
		{"missing", nil, 0, false},
	}
	for _, tt := range tests {
		got, ok := MetricSum(text, tt.name, tt.labels)
		if ok != tt.ok || !near(got, tt.want) {
			t.Errorf("MetricSum(%s, %v) = %v, %v; want %v, %v", tt.name, tt.labels, got, ok, tt.want, tt.ok)
		}
	}
}

func TestProcParsers(t *testing.T) {
	name, ppid, ok := parseStatComm([]byte("42 (git (x)) S 7 42 42 0 -1"))
	if name != "git (x)" || ppid != 7 || !ok {
		t.Errorf("parseStatComm = %q, %d, %v", name, ppid, ok)
	}
	if _, _, ok := parseStatComm([]byte("42 git S 7")); ok {
		t.Error("stat without parentheses parsed")
	}
	status := []byte("Name:\tgit\nVmHWM:\t   2048 kB\nVmRSS:\t    100 kB\n")
	if got := statusBytes(status, "VmHWM"); got != 2048<<10 {
		t.Errorf("VmHWM = %d", got)
	}
	if got := statusBytes(status, "VmSwap"); got != 0 {
		t.Errorf("VmSwap = %d", got)
	}
}

// TestWatchGit watches a git process of the test's own: it must be seen,
// with a resident set, for as long as it lives.
func TestWatchGit(t *testing.T) {
	cmd := exec.Command("git", "hash-object", "--stdin")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := WatchGit(os.Getpid(), 5*time.Millisecond)
	// Long enough for several samples even on a loaded machine: a
	// lifetime needs two.
	time.Sleep(400 * time.Millisecond)
	stdin.Close()
	cmd.Wait()
	u := stop()
	if u.Processes != 1 || u.Lifetime <= 0 || u.PeakRSS <= 0 || u.MaxHWM < u.PeakRSS {
		t.Errorf("usage %+v", u)
	}
	if u := WatchGit(os.Getpid(), 5*time.Millisecond)(); u.Processes != 0 || u.Lifetime != 0 {
		t.Errorf("no git running, usage %+v", u)
	}
}

func TestStaticFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "static", "f.bin")
	const size = 100_003
	if err := WriteStaticFile(path, size); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	c := NewHTTPClient(1)
	defer c.CloseIdleConnections()
	op := StaticOp(c, srv.URL+"/static/f.bin", size)
	n, err := op(context.Background(), 0)
	if err != nil || n != size {
		t.Errorf("static op: %d bytes, %v", n, err)
	}
	if _, err := StaticOp(c, srv.URL+"/static/missing", size)(context.Background(), 0); err == nil {
		t.Error("missing file fetched")
	}
	if _, err := StaticOp(c, srv.URL+"/static/f.bin", size+1)(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("file of the wrong size: err = %v", err)
	}
	// One flipped byte in the middle: the content check catches it.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[size/2] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := op(context.Background(), 0); err == nil || !strings.Contains(err.Error(), "crc32c") {
		t.Errorf("corrupted file: err = %v", err)
	}
}

func TestIsQueueRefusal(t *testing.T) {
	for msg, want := range map[string]bool{
		"remote: waited 300s for capacity; try again later": true,
		"remote: server busy: queue full":                   true,
		"remote: repository not found":                      false,
		"read side band: EOF":                               false,
	} {
		if IsQueueRefusal(msg) != want {
			t.Errorf("IsQueueRefusal(%q) = %v", msg, !want)
		}
	}
}

func TestMarkdownSectionsAndLoad(t *testing.T) {
	r := Results{Command: "make bench", Machine: Machine{LoadBefore: "1.00, 2.00, 3.00", LoadAfter: "4.00, 5.00, 6.00"},
		Sections: []Section{{Title: "Extra", Header: []string{"a", "b"}, Right: []bool{false, true}, Rows: [][]string{{"x", "1"}},
			Checks: []Check{{Text: "thing", Measured: true, Met: true}}}}}
	md := r.Markdown()
	for _, w := range []string{"Load average (1, 5, 15 min) before the run: 1.00, 2.00, 3.00; after: 4.00, 5.00, 6.00.",
		"### Extra", "| a | b |\n|---|---:|\n| x | 1 |", "- thing — met"} {
		if !strings.Contains(md, w) {
			t.Errorf("lacks %q:\n%s", w, md)
		}
	}
}

func TestThrottleCapacityRate(t *testing.T) {
	tests := []struct {
		cores    float64
		perClone time.Duration
		want     float64
	}{
		{1, 100 * time.Millisecond, 20}, // serves 10 a second
		{2, 250 * time.Millisecond, 16}, // serves 8
		{0.5, 50 * time.Millisecond, 20},
		{1, 0, 0}, // no measurement
	}
	for _, tt := range tests {
		c := ThrottleCapacity{Cores: tt.cores, PerClone: tt.perClone}
		if got := c.Rate(); !near(got, tt.want) {
			t.Errorf("cores %g, %v a clone: rate %g, want %g", tt.cores, tt.perClone, got, tt.want)
		}
	}
}
