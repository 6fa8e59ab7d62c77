package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// Section is one self-contained part of the report below the main table:
// a question from an issue, answered by measurements taken in the same run
// against a reference from the same run, with its targets checked.
type Section struct {
	Title string
	// Intro says what was measured and against what.
	Intro string
	// Header and Rows form the table; Right marks right-aligned columns.
	Header []string
	Right  []bool
	Rows   [][]string
	// Extra tables (header + rows), rendered after the first.
	Extra []Table
	// Checks are the targets with their verdicts.
	Checks []Check
	Notes  []string
}

// Table is a secondary table in a section.
type Table struct {
	Caption string
	Header  []string
	Right   []bool
	Rows    [][]string
}

// Check is one target: Text describes value and target, Measured is false
// when the value could not be computed, Met whether the target holds.
type Check struct {
	Text     string
	Measured bool
	Met      bool
}

func (c Check) verdict() string {
	switch {
	case !c.Measured:
		return "not measured"
	case c.Met:
		return "met"
	default:
		return "**missed**"
	}
}

// Markdown renders the section.
func (s Section) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", s.Title)
	if s.Intro != "" {
		b.WriteString(s.Intro + "\n\n")
	}
	writeTable(&b, s.Header, s.Right, s.Rows)
	for _, t := range s.Extra {
		b.WriteString("\n")
		if t.Caption != "" {
			b.WriteString(t.Caption + "\n\n")
		}
		writeTable(&b, t.Header, t.Right, t.Rows)
	}
	if len(s.Checks) > 0 {
		b.WriteString("\nTargets:\n\n")
		for _, c := range s.Checks {
			fmt.Fprintf(&b, "- %s — %s\n", c.Text, c.verdict())
		}
	}
	if len(s.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func writeTable(b *strings.Builder, header []string, right []bool, rows [][]string) {
	if len(header) == 0 {
		return
	}
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for i := range header {
		if i < len(right) && right[i] {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
}

// ratioOf is a/b, ok false when b is zero (a ratio to nothing is not a
// result, and must not print as Inf or pass a target).
func ratioOf(a, b float64) (float64, bool) {
	if b == 0 {
		return 0, false
	}
	return a / b, true
}

func fmtRatio(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// atMost and atLeast build checks against a limit.
func atMost(what string, v float64, ok bool, limit float64, unit string) Check {
	return Check{Text: fmt.Sprintf("%s: %s (target ≤ %s)", what, fmtValue(v, ok, unit), fmtValue(limit, true, unit)), Measured: ok, Met: ok && v <= limit}
}

func atLeast(what string, v float64, ok bool, limit float64, unit string) Check {
	return Check{Text: fmt.Sprintf("%s: %s (target ≥ %s)", what, fmtValue(v, ok, unit), fmtValue(limit, true, unit)), Measured: ok, Met: ok && v >= limit}
}

func fmtValue(v float64, ok bool, unit string) string {
	if !ok {
		return "–"
	}
	switch unit {
	case "×":
		return fmt.Sprintf("%.2f×", v)
	case "%":
		return fmt.Sprintf("%.0f%%", v*100)
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.2f%s", v, unit)
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SSHSection compares git over SSH with git over HTTP on the same Sluice
// node (issue 3): the HTTP measurements are the reference. Pairs are
// matched by position: http[i] and ssh[i] ran the same workload.
func SSHSection(http, ssh []Measurement, limit float64) Section {
	s := Section{
		Title:  "Git over SSH vs over HTTP (issue 3)",
		Intro:  "The same Sluice node, the same workloads and concurrency, one transport after the other; ratios are SSH ÷ HTTP.",
		Header: []string{"workload", "transport", "ops", "errors", "ops/hour", "p50", "p95", "server CPU/op", "CPU/op ratio", "ops/hour ratio"},
		Right:  []bool{false, false, true, true, true, true, true, true, true, true},
	}
	for i := range min(len(http), len(ssh)) {
		h, x := http[i], ssh[i]
		cpu, cok := ratioOf(float64(x.CPUPerOp()), float64(h.CPUPerOp()))
		ops, ook := ratioOf(x.Report.OpsPerHour(), h.Report.OpsPerHour())
		if x.Report.Ops == 0 || h.Report.Ops == 0 {
			cok, ook = false, false
		}
		s.Rows = append(s.Rows, measurementRow(h, "HTTP", "", ""), measurementRow(x, "SSH", fmtRatio(cpu, cok), fmtRatio(ops, ook)))
		s.Checks = append(s.Checks, atMost(h.Workload+": SSH server CPU per operation ÷ HTTP's", cpu, cok, limit, "×"))
	}
	return s
}

func measurementRow(m Measurement, label, cpuRatio, opsRatio string) []string {
	r := m.Report
	return []string{m.Workload, label, fmt.Sprint(r.Ops), fmt.Sprint(r.Errors), fmt.Sprintf("%.0f", r.OpsPerHour()),
		ms3(r.Latency.Quantile(0.5)), ms3(r.Latency.Quantile(0.95)), ms3(m.CPUPerOp()), cpuRatio, opsRatio}
}

// Storm is the CI clone storm of issue 4: the same clone by every worker.
type Storm struct {
	// Backend is git http-backend, Uncached Sluice with the cache off,
	// Cached Sluice with it on, Static nginx serving a file of the
	// clone's size.
	Backend, Uncached, Cached, Static Measurement
	// Hits, Coalesced and Misses are the pack cache lookups during the
	// cached run; coalesced followers stream a running miss's file.
	Hits, Coalesced, Misses float64
	// SlowOff and SlowOn are one slow-reader clone with the cache off and
	// on (a miss).
	SlowOff, SlowOn SlowClone
	// SlowRate is the reader's speed in bytes per second.
	SlowRate int64
}

// SlowClone is one clone by a throttled reader and what git did meanwhile.
type SlowClone struct {
	Took time.Duration
	Err  error
	Git  GitUsage
}

// StormSection renders the clone storm.
func StormSection(st Storm) Section {
	s := Section{
		Title: "CI clone storm (issue 4)",
		Intro: "Every worker clones the same repository over and over. Ratios are to Sluice with the cache off (“uncached”) and to nginx serving a static file of the clone's size, fetched by the same client with the same concurrency (“floor”).",
		Header: []string{"server", "workers", "ops", "errors", "ops/hour", "MB/s", "p50", "p95", "server CPU/op",
			"÷ uncached", "÷ floor"},
		Right: []bool{false, true, true, true, true, true, true, true, true, true, true},
	}
	uncached := st.Uncached.Report.OpsPerHour()
	floor := st.Static.Report.OpsPerHour()
	for _, row := range []struct {
		label string
		m     Measurement
	}{
		{"git http-backend (nginx, fcgiwrap)", st.Backend},
		{"Sluice, cache off", st.Uncached},
		{"Sluice, cache on", st.Cached},
		{"nginx, static file (floor)", st.Static},
	} {
		r := row.m.Report
		if r.Latency == nil {
			continue
		}
		mbs := 0.0
		if r.Elapsed > 0 {
			mbs = float64(r.Bytes) / 1e6 / r.Elapsed.Seconds()
		}
		vu, oku := ratioOf(r.OpsPerHour(), uncached)
		vf, okf := ratioOf(r.OpsPerHour(), floor)
		s.Rows = append(s.Rows, []string{row.label, fmt.Sprint(r.Workers), fmt.Sprint(r.Ops), fmt.Sprint(r.Errors),
			fmt.Sprintf("%.0f", r.OpsPerHour()), fmt.Sprintf("%.0f", mbs),
			ms3(r.Latency.Quantile(0.5)), ms3(r.Latency.Quantile(0.95)), ms3(row.m.CPUPerOp()),
			fmtRatio(vu, oku), fmtRatio(vf, okf)})
	}
	vu, oku := ratioOf(st.Cached.Report.OpsPerHour(), uncached)
	vf, okf := ratioOf(st.Cached.Report.OpsPerHour(), floor)
	// CPU per hit: the run's server CPU over its hits, so the few misses
	// (there should be none with a warm cache) are charged to the hits.
	perHit, okh := ratioOf(msOf(st.Cached.CPU.Best()), st.Hits+st.Coalesced)
	s.Checks = []Check{
		atLeast("cache on ÷ uncached clones/hour", vu, oku, 10, "×"),
		atLeast("cache on ÷ static-file floor", vf, okf, 0.5, "%"),
		atMost("server CPU per hit", perHit, okh, 5, "ms"),
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Pack cache lookups during the cached run (`sluice_packcache_lookups_total{kind=\"packs\"}`): %.0f hits, %.0f coalesced, %.0f misses. CPU per hit is the run's whole server CPU (ref advertisements, authentication and the Go runtime included) divided by the hits and coalesced followers.", st.Hits, st.Coalesced, st.Misses),
		"All four rows are checked alike and more cheaply than the clone workload of the main table: framing, side-band errors, pack header and object count as always, but instead of a SHA-1 of every pack, the first pack per request is checksummed and every later one must match its length, object count, trailer and CRC-32C (the static file: its length and CRC-32C). SHA-1 of 12.3 MB cost the client more CPU than a cache hit costs the server, so with it the storm measured the client; see Method. The cache-off rows are storm runs of their own, checked this way.")
	rate := fmt.Sprintf("%.1f MB/s", float64(st.SlowRate)/1e6)
	slow := Table{
		Caption: "One clone by a client reading at " + rate + " (a cache miss when the cache is on): how long git runs and how much memory it holds.",
		Header:  []string{"cache", "clone took", "git processes", "git alive", "peak RSS of git (sum)", "largest VmHWM"},
		Right:   []bool{false, true, true, true, true, true},
	}
	for _, row := range []struct {
		label string
		c     SlowClone
	}{{"off", st.SlowOff}, {"on", st.SlowOn}} {
		took := ms3(row.c.Took)
		if row.c.Err != nil {
			took = "failed: " + strings.ReplaceAll(row.c.Err.Error(), "|", "/")
		}
		slow.Rows = append(slow.Rows, []string{row.label, took, fmt.Sprint(row.c.Git.Processes), ms3(row.c.Git.Lifetime),
			mib(row.c.Git.PeakRSS), mib(row.c.Git.MaxHWM)})
	}
	s.Extra = append(s.Extra, slow)
	if l, ok := ratioOf(float64(st.SlowOn.Git.Lifetime), float64(st.SlowOff.Git.Lifetime)); ok {
		s.Notes = append(s.Notes, fmt.Sprintf("With the cache on, git lived %.2f× as long as with it off for the same slow client.", l))
	}
	return s
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// ThrottleRun is one storm of uncached clones with throttling on or off,
// and what a separate probe saw before and during it.
type ThrottleRun struct {
	Mode string
	// Storm is the uncached clone storm.
	Storm Measurement
	// IdleREST, IdleHit are the probe latencies with the node idle;
	// REST, Hit during the storm.
	IdleREST, IdleHit, REST, Hit *loadgen.Histogram
	// ProbeErrors counts failed probes during the storm.
	ProbeErrors int64
	// Util holds CPU utilisation samples (0..1 of the node's cores) during
	// the storm, from the node's cgroup; Metric the controller's own
	// sluice_throttle_cpu_utilization_ratio samples.
	Util, Metric []float64
	// QueueTimeouts counts storm errors that are the documented refusals
	// (queue wait or queue full); the rest of Storm.Report.Errors are
	// other errors.
	QueueTimeouts int64
	// Throttled is the share of CFS periods during the storm in which the
	// node's quota ran out (all its processes waited for the next
	// period); valid when HasThrottled.
	Throttled    float64
	HasThrottled bool
}

// ThrottleCapacity is what one uncached clone alone costs a throttling
// node: the storm is sized from it.
type ThrottleCapacity struct {
	// Cores is the node's CPU cap; Busy the cores one clone at a time
	// keeps busy (CPU over wall time); PerClone its CPU per clone.
	Cores, Busy float64
	PerClone    time.Duration
	Clones      int64
}

// Served is how many clones a second the node's CPU serves at full
// speed: its cores over the CPU one clone costs; 0 without a measurement.
func (c ThrottleCapacity) Served() float64 {
	if c.PerClone <= 0 {
		return 0
	}
	return c.Cores / c.PerClone.Seconds()
}

// Rate is the storm that offers twice what the CPU can serve (issue 5):
// arrivals a second, twice Served.
func (c ThrottleCapacity) Rate() float64 { return 2 * c.Served() }

// ThrottleTarget is the CPU utilisation adaptive throttling holds, and
// ThrottleBand how far from it a sample may be and count as held
// (percentage points).
const (
	ThrottleTarget = 0.75
	ThrottleBand   = 0.10
)

// utilStats is the mean of samples and the share within the band around
// the target; ok is false without samples.
func utilStats(samples []float64) (mean, inBand float64, ok bool) {
	if len(samples) == 0 {
		return 0, 0, false
	}
	var sum float64
	var in int
	for _, u := range samples {
		sum += u
		if u >= ThrottleTarget-ThrottleBand-1e-9 && u <= ThrottleTarget+ThrottleBand+1e-9 {
			in++
		}
	}
	return sum / float64(len(samples)), float64(in) / float64(len(samples)), true
}

// ThrottleSection compares throttling on (adaptive) with off.
func ThrottleSection(on, off ThrottleRun) Section {
	s := Section{
		Title: "Throttling under a saturating clone storm (issue 5)",
		Intro: "A storm of uncached clones, first with throttling off, then on, each on a fresh node; a separate probe client measures a REST GET and a cache-hit clone, idle first, then during the storm.",
		Header: []string{"throttling", "offered", "clones", "cut off at the end", "errors (queue timeouts)", "clones/hour", "CPU per clone", "clone p95", "REST p95 idle → storm", "hit clone p95 idle → storm",
			"CPU mean", "CPU samples in band", "controller's CPU mean", "CFS periods throttled"},
		Right: []bool{false, true, true, true, true, true, true, true, true, true, true, true, true, true},
	}
	for _, r := range []ThrottleRun{off, on} {
		rep := r.Storm.Report
		if rep.Latency == nil {
			continue
		}
		mean, band, ok := utilStats(r.Util)
		// The fixed strategy runs no controller; its gauge stays at zero.
		mmean, _, mok := utilStats(r.Metric)
		if !slices.ContainsFunc(r.Metric, func(v float64) bool { return v > 0 }) {
			mok = false
		}
		s.Rows = append(s.Rows, []string{r.Mode, fmt.Sprint(rep.Offered), fmt.Sprint(rep.Ops), fmt.Sprint(rep.CutOff), fmt.Sprintf("%d (%d)", rep.Errors, r.QueueTimeouts),
			fmt.Sprintf("%.0f", rep.OpsPerHour()), ms3(r.Storm.CPUPerOp()), ms3(rep.Latency.Quantile(0.95)),
			probeCell(r.IdleREST, r.REST), probeCell(r.IdleHit, r.Hit),
			fmtValue(mean, ok, "%"), fmtValue(band, ok, "%"), fmtValue(mmean, mok, "%"), fmtValue(r.Throttled, r.HasThrottled, "%")})
	}
	p95Ratio := func(idle, storm *loadgen.Histogram) (float64, bool) {
		if idle == nil || storm == nil || idle.Count() == 0 || storm.Count() == 0 {
			return 0, false
		}
		return ratioOf(float64(storm.Quantile(0.95)), float64(idle.Quantile(0.95)))
	}
	rest, rok := p95Ratio(on.IdleREST, on.REST)
	hit, hok := p95Ratio(on.IdleHit, on.Hit)
	mean, band, uok := utilStats(on.Util)
	tput, tok := ratioOf(on.Storm.Report.OpsPerHour(), off.Storm.Report.OpsPerHour())
	other := on.Storm.Report.Errors - on.QueueTimeouts
	s.Checks = []Check{
		atMost("throttling on: REST GET p95 during the storm ÷ idle", rest, rok, 3, "×"),
		atMost("throttling on: cache-hit clone p95 during the storm ÷ idle", hit, hok, 3, "×"),
		{Text: fmt.Sprintf("throttling on: CPU held at %.0f%% ± %.0f points: mean %s, %s of samples in band (target: mean in band)",
			ThrottleTarget*100, ThrottleBand*100, fmtValue(mean, uok, "%"), fmtValue(band, uok, "%")),
			Measured: uok, Met: uok && mean >= ThrottleTarget-ThrottleBand && mean <= ThrottleTarget+ThrottleBand},
		atLeast("throttling on ÷ off, completed clones/hour", tput, tok, 1, "×"),
		{Text: fmt.Sprintf("throttling on: errors other than queue timeouts: %d (probe errors %d)", other, on.ProbeErrors),
			Measured: on.Storm.Report.Latency != nil, Met: other == 0 && on.ProbeErrors == 0},
	}
	return s
}

func probeCell(idle, storm *loadgen.Histogram) string {
	if idle == nil || storm == nil {
		return "–"
	}
	v, ok := ratioOf(float64(storm.Quantile(0.95)), float64(idle.Quantile(0.95)))
	return fmt.Sprintf("%s → %s (%s)", ms3(idle.Quantile(0.95)), ms3(storm.Quantile(0.95)), fmtRatio(v, ok))
}
