package e3

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// LoadResults reads a results.json, or the one in a run's directory.
func LoadResults(path string) (*Results, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "results.json")
	}
	return ReadResults(path)
}

// comparison is one row: a metric of run A and run B.
type comparison struct {
	thread string
	stage  int
	metric string
	a, b   float64
}

func (c comparison) ratio() string {
	if c.a == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", c.b/c.a)
}

// compareRows pairs threads by position (names may differ between runs)
// and stages by index.
func compareRows(a, b *Results) []comparison {
	var rows []comparison
	for i := 0; i < min(len(a.Threads), len(b.Threads)); i++ {
		ta, tb := a.Threads[i], b.Threads[i]
		name := ta.Name
		if tb.Name != ta.Name {
			name += " / " + tb.Name
		}
		for j := 0; j < min(len(ta.Stages), len(tb.Stages)); j++ {
			sa, sb := ta.Stages[j], tb.Stages[j]
			add := func(metric string, x, y float64) {
				rows = append(rows, comparison{thread: name, stage: j + 1, metric: metric, a: x, b: y})
			}
			add("clients", float64(sa.Clients), float64(sb.Clients))
			add("git ops/hour", sa.GitPerHour, sb.GitPerHour)
			add("all ops/hour", sa.AllPerHour, sb.AllPerHour)
			add("errors", float64(sa.Errors), float64(sb.Errors))
			add("node CPU (cores, sum)", sum(sa.NodeCPU), sum(sb.NodeCPU))
			add("client CPU (cores)", sa.ClientCPU, sb.ClientCPU)
			// A difference between runs may be the machine's other tenants.
			add("other tenants' CPU (cores)", sa.OtherCPU, sb.OtherCPU)
			ob := map[string]OpResult{}
			for _, o := range sb.Ops {
				ob[o.Op] = o
			}
			for _, o := range sa.Ops {
				if p, ok := ob[o.Op]; ok {
					add(o.Op+" per hour", o.PerHour, p.PerHour)
					add(o.Op+" mean ms", o.Mean, p.Mean)
					add(o.Op+" p95 ms", o.P95, p.P95)
				}
			}
		}
	}
	return rows
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// CompareText writes the comparison of two runs as a text table.
func CompareText(w io.Writer, a, b *Results) {
	fmt.Fprintf(w, "A: %s (%s)\nB: %s (%s)\n\n", a.Experiment, a.Started.Format("2006-01-02 15:04"), b.Experiment, b.Started.Format("2006-01-02 15:04"))
	fmt.Fprintf(w, "%-24s %5s %-28s %14s %14s %8s\n", "thread", "stage", "metric", "A", "B", "B/A")
	for _, r := range compareRows(a, b) {
		fmt.Fprintf(w, "%-24s %5d %-28s %14s %14s %8s\n", trunc(r.thread, 24), r.stage, trunc(r.metric, 28), num(r.a), num(r.b), r.ratio())
	}
}

// CompareHTML writes the comparison as a self-contained page.
func CompareHTML(w io.Writer, a, b *Results) error {
	var s strings.Builder
	s.WriteString(`<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/><title>e3 compare</title>
<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.l,th.l{text-align:left}.up{color:#2a2}.down{color:#c22}</style>
</head><body>
`)
	fmt.Fprintf(&s, "<h1>e3 compare</h1><p>A: %s (%s)<br/>B: %s (%s)</p>\n", esc(a.Experiment), esc(a.Started.Format("2006-01-02 15:04")), esc(b.Experiment), esc(b.Started.Format("2006-01-02 15:04")))
	s.WriteString("<table><tr><th class=\"l\">thread</th><th>stage</th><th class=\"l\">metric</th><th>A</th><th>B</th><th>B/A</th></tr>\n")
	for _, r := range compareRows(a, b) {
		fmt.Fprintf(&s, "<tr><td class=\"l\">%s</td><td>%d</td><td class=\"l\">%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			esc(r.thread), r.stage, esc(r.metric), num(r.a), num(r.b), esc(r.ratio()))
	}
	s.WriteString("</table></body></html>\n")
	_, err := io.WriteString(w, s.String())
	return err
}

func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e12 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
