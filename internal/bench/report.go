package bench

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Markers delimit the generated part of docs/benchmarks.md.
const (
	BeginMarker = "<!-- bench:results:begin -->"
	EndMarker   = "<!-- bench:results:end -->"
)

// Target is a goal from the issue: the candidate's value over the
// baseline's for a workload and metric must stay within Limit.
type Target struct {
	Workload string
	// Metric is "cpu/op" (lower is better, ratio ≤ Limit) or "ops/h"
	// (higher is better, ratio ≥ Limit).
	Metric string
	Limit  float64
}

// Results is everything a report shows.
type Results struct {
	Machine  Machine
	Command  string
	Repo     string // a one-line description of the repository
	Baseline string // server names
	Sluice   string
	// Measurements in workload order, baseline first.
	Measurements []Measurement
	Targets      []Target
	// Notes are printed under the table (settings, caveats).
	Notes []string
	// Sections follow the main table: SSH, clone storm, throttling.
	Sections []Section
}

func (r Results) find(server, workload string) (Measurement, bool) {
	for _, m := range r.Measurements {
		if m.Server == server && m.Workload == workload {
			return m, true
		}
	}
	return Measurement{}, false
}

// ratio is candidate over baseline for a metric; ok is false when either
// side has no successful operation.
func (r Results) ratio(workload, metric string) (float64, bool) {
	b, ok1 := r.find(r.Baseline, workload)
	s, ok2 := r.find(r.Sluice, workload)
	if !ok1 || !ok2 || b.Report.Ops == 0 || s.Report.Ops == 0 {
		return 0, false
	}
	switch metric {
	case "cpu/op":
		if b.CPUPerOp() == 0 {
			return 0, false
		}
		return float64(s.CPUPerOp()) / float64(b.CPUPerOp()), true
	case "ops/h":
		return s.Report.OpsPerHour() / b.Report.OpsPerHour(), true
	}
	return 0, false
}

// Markdown renders the results section.
func (r Results) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Measured %s on %d × %s (Linux %s), %s, nginx %s, %s.\n\n",
		m.Date.Format("2006-01-02 15:04 MST"), m.CPUs, orUnknown(m.CPUModel), orUnknown(m.Kernel), orUnknown(m.Git), orUnknown(m.Nginx), m.Go)
	if m.LoadBefore != "" || m.LoadAfter != "" {
		fmt.Fprintf(&b, "Load average (1, 5, 15 min) before the run: %s; after: %s. The machine is shared: other work running at the same time slows both servers alike, which the ratios absorb, but it widens the noise.\n\n",
			orUnknown(m.LoadBefore), orUnknown(m.LoadAfter))
	}
	fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	if r.Repo != "" {
		fmt.Fprintf(&b, "Repository: %s\n\n", r.Repo)
	}
	b.WriteString("| workload | server | workers | ops | errors | ops/hour | p50 | p95 | p99 | server CPU/op | CPU/op ratio | ops/hour ratio |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, ms := range r.Measurements {
		rep := ms.Report
		cpuRatio, opsRatio := "", ""
		if ms.Server == r.Sluice {
			if v, ok := r.ratio(ms.Workload, "cpu/op"); ok {
				cpuRatio = fmt.Sprintf("%.2f×", v)
			}
			if v, ok := r.ratio(ms.Workload, "ops/h"); ok {
				opsRatio = fmt.Sprintf("%.2f×", v)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.0f | %s | %s | %s | %s | %s | %s |\n",
			ms.Workload, ms.Server, rep.Workers, rep.Ops, rep.Errors, rep.OpsPerHour(),
			ms3(rep.Latency.Quantile(0.5)), ms3(rep.Latency.Quantile(0.95)), ms3(rep.Latency.Quantile(0.99)),
			ms3(ms.CPUPerOp()), cpuRatio, opsRatio)
	}
	if len(r.Targets) > 0 {
		b.WriteString("\nTargets (Sluice ÷ baseline):\n\n")
		for _, t := range r.Targets {
			v, ok := r.ratio(t.Workload, t.Metric)
			cmp, met := "≤", v <= t.Limit
			if t.Metric == "ops/h" {
				cmp, met = "≥", v >= t.Limit
			}
			verdict := "met"
			switch {
			case !ok:
				verdict = "not measured"
			case !met:
				verdict = "**missed**"
			}
			fmt.Fprintf(&b, "- %s %s: %.2f× (target %s %.1f×) — %s\n", t.Workload, t.Metric, v, cmp, t.Limit, verdict)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	for _, sec := range r.Sections {
		b.WriteString("\n" + sec.Markdown())
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// ms3 formats a duration in milliseconds with three significant digits.
func ms3(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f ms", ms)
	}
}

// ReplaceBetweenMarkers returns doc with the text between BeginMarker and
// EndMarker replaced by section.
func ReplaceBetweenMarkers(doc, section string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	if i < 0 || j < 0 || j < i {
		return "", errors.New("results markers not found")
	}
	return doc[:i+len(BeginMarker)] + "\n" + strings.TrimSpace(section) + "\n" + doc[j:], nil
}

// WriteResults replaces the results section of the markdown file at path.
func WriteResults(path string, r Results) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, err := ReplaceBetweenMarkers(string(b), r.Markdown())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
