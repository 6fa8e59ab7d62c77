package e3

import (
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// The report is one self-contained file: inline CSS and SVG drawn here,
// no script, no font or image fetched, so it opens offline and can be
// attached to an issue. It is also well-formed XML (every element closed,
// only XML's predefined entities), which lets tests parse it with
// encoding/xml.

// ReportSections are the ids of the report's sections, in order; the
// smoke test checks each is present.
var ReportSections = []string{"summary", "throughput", "shares", "latency", "cpu", "memory", "tickets", "queue", "cache", "errors"}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

func esc(s string) string { return html.EscapeString(s) }

// RenderReport writes the HTML report of res.
func RenderReport(w io.Writer, res *Results) error {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>
<title>` + esc("e3: "+res.Experiment) + `</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
svg{background:#fff;border:1px solid #eee;margin:.5em 0}
.note{color:#555;font-size:.9em}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em}
</style></head><body>
`)
	fmt.Fprintf(&b, "<h1>%s</h1>\n", esc("sluice e3: "+res.Experiment))
	if res.Description != "" {
		fmt.Fprintf(&b, "<p>%s</p>\n", esc(res.Description))
	}
	summary(&b, res)
	sections := []func() error{
		func() error { return throughput(&b, res) },
		func() error { return shares(&b, res) },
		func() error { return latency(&b, res) },
		func() error {
			return series(&b, res, "cpu", "Node CPU", "cores", func(n NodeSample) float64 { return n.CPU }, true)
		},
		func() error {
			return series(&b, res, "memory", "Node memory", "MB", func(n NodeSample) float64 {
				if n.Memory < 0 {
					return -1
				}
				return float64(n.Memory) / 1e6
			}, false)
		},
		func() error {
			return series(&b, res, "tickets", "Hosting tickets in use (dashed: limit)", "tickets", func(n NodeSample) float64 { return n.TicketsInUse }, false)
		},
		func() error {
			return series(&b, res, "queue", "Operations queued for a ticket, and git processes running (dashed)", "count", func(n NodeSample) float64 { return n.TicketsQueued }, false)
		},
		func() error {
			return series(&b, res, "cache", "Pack cache hit rate (cacheable lookups; fetches with haves bypass the cache)", "hit rate", func(n NodeSample) float64 { return n.CacheHitRate }, false)
		},
	}
	for _, section := range sections {
		if err := section(); err != nil {
			return fmt.Errorf("render report: %w", err)
		}
	}
	errorTable(&b, res)
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func summary(b *strings.Builder, res *Results) {
	b.WriteString(`<h2 id="summary">Summary</h2>` + "\n")
	m := res.Machine
	fmt.Fprintf(b, "<p class=\"note\">%s → %s (%s). Machine: %d CPUs %s, kernel %s, %s, %s. Data set: %s × %g (seed %d). Client and nodes share the machine.</p>\n",
		esc(res.Started.Format(time.RFC3339)), esc(res.Finished.Format(time.RFC3339)), esc(res.Finished.Sub(res.Started).Round(time.Second).String()),
		m.CPUs, esc(m.CPUModel), esc(m.Kernel), esc(m.Go), esc(m.Git), esc(res.Dataset.Profile), res.Dataset.Scale, res.Dataset.Seed)
	b.WriteString("<table><tr><th class=\"l\">script</th><th>weight</th><th class=\"l\">protocol</th><th class=\"l\">client</th></tr>\n")
	for _, s := range res.Workload.Scripts {
		fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td>%.3f</td><td class=\"l\">%s</td><td class=\"l\">%s</td></tr>\n",
			esc(s.Script), s.Weight, esc(orDefault(s.Protocol, "v2")+" over "+orDefault(s.Transport, "http")), esc(orDefault(s.Client, "loadgen")))
	}
	b.WriteString("</table>\n")
	b.WriteString("<table><tr><th class=\"l\">thread</th><th class=\"l\">instance</th><th>stage</th><th>clients</th><th>git ops/h</th><th>all ops/h</th><th>errors</th><th>node CPU %</th><th>client CPU %</th><th class=\"l\">helpers (cores)</th><th>machine busy (cores)</th><th>other tenants (cores)</th></tr>\n")
	for _, t := range res.Threads {
		desc := instanceDesc(t.Instance)
		for _, s := range t.Stages {
			fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%d</td><td>%d</td><td>%.0f</td><td>%.0f</td><td>%d</td><td>%s</td><td>%.0f</td><td class=\"l\">%s</td><td>%.2f</td><td>%.2f</td></tr>\n",
				esc(t.Name), esc(desc), s.Index+1, s.Clients, s.GitPerHour, s.AllPerHour, s.Errors, esc(pcts(s.NodeCPUPct)), s.ClientCPUPct,
				esc(infraDesc(s.InfraCPU)), s.MachineCPU, s.OtherCPU)
		}
		if t.Error != "" {
			fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td class=\"l\" colspan=\"11\">stopped: %s</td></tr>\n", esc(t.Name), esc(t.Error))
		}
	}
	b.WriteString("</table>\n")
	for _, t := range res.Threads {
		if t.Profile != "" {
			fmt.Fprintf(b, "<p>CPU profile of %s, node 1, last stage:</p><pre>%s</pre>\n", esc(t.Name), esc(t.Profile))
		}
	}
}

// infraDesc lists the helpers' CPU: "haproxy 0.05, postgres 0.12".
func infraDesc(m map[string]float64) string {
	if len(m) == 0 {
		return "–"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, m[n])
	}
	return strings.Join(parts, ", ")
}

func instanceDesc(in Instance) string {
	if in.URL != "" {
		return in.URL
	}
	var parts []string
	parts = append(parts, fmt.Sprintf("%d node(s), %s", in.Nodes, orDefault(in.Database, "sqlite")))
	if in.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%g cpus each", in.CPUs))
	}
	keys := make([]string, 0, len(in.Properties))
	for k := range in.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+in.Properties[k])
	}
	return strings.Join(parts, ", ")
}

func pcts(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, " / ")
}

// point and line are what charts draw.
type point struct{ x, y float64 }

type line struct {
	name   string
	color  string
	dashed bool
	marks  bool
	pts    []point
}

// chart draws lines on linear axes with ticks, a legend and labels.
func chart(b *strings.Builder, title, xlabel, ylabel string, lines []line, yMaxHint float64) error {
	const W, H, L, R, T, B = 900, 300, 70, 190, 30, 40
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), yMaxHint
	for _, l := range lines {
		for _, p := range l.pts {
			xmin, xmax, ymax = math.Min(xmin, p.x), math.Max(xmax, p.x), math.Max(ymax, p.y)
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if xmin > 0 && xmin < (xmax-xmin)*0.5 {
		xmin = 0
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax * 1.05)
	px := func(x float64) float64 { return L + (x-xmin)/(xmax-xmin)*(W-L-R) }
	py := func(y float64) float64 { return H - B - y/ymax*(H-T-B) }
	doc := &svgDoc{W: W, H: H, Title: title}
	doc.Texts = append(doc.Texts, svgText{X: L, Y: 18, Size: 14, Bold: true, Text: title})
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		doc.Lines = append(doc.Lines, svgLine{X1: L, X2: W - R, Y1: py(y), Y2: py(y), Stroke: "#eee"})
		doc.Texts = append(doc.Texts, svgText{X: L - 5, Y: py(y) + 4, Size: 11, Anchor: "end", Text: short(y)})
	}
	for i := 0; i <= 6; i++ {
		x := xmin + (xmax-xmin)*float64(i)/6
		doc.Texts = append(doc.Texts, svgText{X: px(x), Y: H - B + 15, Size: 11, Anchor: "middle", Text: short(x)})
	}
	doc.Lines = append(doc.Lines, svgLine{X1: L, X2: W - R, Y1: H - B, Y2: H - B, Stroke: "#888"},
		svgLine{X1: L, X2: L, Y1: T, Y2: H - B, Stroke: "#888"})
	doc.Texts = append(doc.Texts, svgText{X: (L + W - R) / 2, Y: H - 5, Size: 12, Anchor: "middle", Text: xlabel},
		svgText{X: 14, Y: (T + H - B) / 2, Size: 12, Anchor: "middle", Rotate: true, Text: ylabel})
	for i, l := range lines {
		if len(l.pts) == 0 {
			continue
		}
		var d strings.Builder
		for j, p := range l.pts {
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, px(p.x), py(p.y))
		}
		doc.Paths = append(doc.Paths, svgPath{D: strings.TrimSpace(d.String()), Stroke: l.color, Dashed: l.dashed})
		if l.marks {
			for _, p := range l.pts {
				doc.Circles = append(doc.Circles, svgCircle{X: px(p.x), Y: py(p.y), Fill: l.color})
			}
		}
		ly := float64(T + 14*i)
		doc.Lines = append(doc.Lines, svgLine{X1: W - R + 10, X2: W - R + 30, Y1: ly, Y2: ly, Stroke: l.color, Width: 2, Dashed: l.dashed})
		doc.Texts = append(doc.Texts, svgText{X: W - R + 35, Y: ly + 4, Size: 11, Text: l.name})
	}
	return doc.render(b)
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func short(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 10 || a == 0:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func throughput(b *strings.Builder, res *Results) error {
	b.WriteString(`<h2 id="throughput">Throughput by clients</h2>` + "\n")
	b.WriteString("<p class=\"note\">Successful git operations per hour (clone, fetch, push, ls-remote; all operations when a workload has no git script) in each stage. Dashed: the least-squares fit of T(c) = Max·c/(Half+c).</p>\n")
	var lines []line
	for i, t := range res.Threads {
		col := palette[i%len(palette)]
		var pts []point
		maxC := 0.0
		for _, s := range t.Stages {
			y := s.GitPerHour
			if y == 0 {
				y = s.AllPerHour
			}
			pts = append(pts, point{float64(s.Clients), y})
			maxC = math.Max(maxC, float64(s.Clients))
		}
		lines = append(lines, line{name: t.Name, color: col, marks: true, pts: pts})
		if t.Fit != nil && len(pts) > 1 {
			var fp []point
			for k := 0; k <= 40; k++ {
				c := maxC * float64(k) / 40
				fp = append(fp, point{c, t.Fit.Eval(c)})
			}
			lines = append(lines, line{name: fmt.Sprintf("fit (max %s, R² %.2f)", short(t.Fit.Max), t.Fit.R2), color: col, dashed: true, pts: fp})
		}
	}
	return chart(b, "Throughput per stage", "clients", "ops/hour", lines, 0)
}

func shares(b *strings.Builder, res *Results) error {
	b.WriteString(`<h2 id="shares">Share of throughput by operation</h2>` + "\n")
	ops := allOps(res)
	color := map[string]string{}
	for i, o := range ops {
		color[o] = palette[i%len(palette)]
	}
	const W, rowH, L = 900, 22, 180
	rows := 0
	for _, t := range res.Threads {
		rows += len(t.Stages)
	}
	H := rowH*rows + 30 + 16*((len(ops)+3)/4)
	doc := &svgDoc{W: W, H: H, Title: "Share of throughput"}
	y := 10
	for _, t := range res.Threads {
		for _, s := range t.Stages {
			total := 0.0
			for _, o := range s.Ops {
				total += float64(o.Count)
			}
			doc.Texts = append(doc.Texts, svgText{X: L - 5, Y: float64(y + 14), Size: 11, Anchor: "end",
				Text: fmt.Sprintf("%s #%d (%d clients)", t.Name, s.Index+1, s.Clients)})
			x := float64(L)
			for _, o := range s.Ops {
				if total == 0 || o.Count == 0 {
					continue
				}
				w := float64(W-L-20) * float64(o.Count) / total
				doc.Rects = append(doc.Rects, svgRect{X: x, Y: float64(y), W: w, H: rowH - 4, Fill: color[o.Op],
					Title: fmt.Sprintf("%s: %d (%.1f%%)", o.Op, o.Count, 100*float64(o.Count)/total)})
				x += w
			}
			y += rowH
		}
	}
	y += 10
	for i, o := range ops {
		lx := float64(10 + (i%4)*220)
		ly := float64(y + (i/4)*16)
		doc.Rects = append(doc.Rects, svgRect{X: lx, Y: ly, W: 10, H: 10, Fill: color[o]})
		doc.Texts = append(doc.Texts, svgText{X: lx + 14, Y: ly + 9, Size: 11, Text: o})
	}
	if err := doc.render(b); err != nil {
		return err
	}
	b.WriteString("<table><tr><th class=\"l\">thread</th><th>stage</th><th class=\"l\">operation</th><th>count</th><th>share</th><th>per hour</th></tr>\n")
	for _, t := range res.Threads {
		for _, s := range t.Stages {
			total := int64(0)
			for _, o := range s.Ops {
				total += o.Count
			}
			for _, o := range s.Ops {
				share := 0.0
				if total > 0 {
					share = 100 * float64(o.Count) / float64(total)
				}
				fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td>%d</td><td class=\"l\">%s</td><td>%d</td><td>%.1f%%</td><td>%.0f</td></tr>\n",
					esc(t.Name), s.Index+1, esc(o.Op), o.Count, share, o.PerHour)
			}
		}
	}
	b.WriteString("</table>\n")
	return nil
}

func allOps(res *Results) []string {
	set := map[string]bool{}
	for _, t := range res.Threads {
		for _, s := range t.Stages {
			for _, o := range s.Ops {
				set[o.Op] = true
			}
		}
	}
	var ops []string
	for o := range set {
		ops = append(ops, o)
	}
	sort.Strings(ops)
	return ops
}

func latency(b *strings.Builder, res *Results) error {
	b.WriteString(`<h2 id="latency">Time per operation</h2>` + "\n")
	b.WriteString("<p class=\"note\">Successful operations only. Solid: mean; dashed: 95th percentile.</p>\n")
	ops := allOps(res)
	for _, t := range res.Threads {
		var lines []line
		for i, op := range ops {
			var mean, p95 []point
			for _, s := range t.Stages {
				for _, o := range s.Ops {
					if o.Op == op && o.Count > 0 {
						mean = append(mean, point{float64(s.Clients), o.Mean})
						p95 = append(p95, point{float64(s.Clients), o.P95})
					}
				}
			}
			col := palette[i%len(palette)]
			lines = append(lines, line{name: op + " mean", color: col, marks: true, pts: mean}, line{name: op + " p95", color: col, dashed: true, pts: p95})
		}
		if err := chart(b, "Latency: "+t.Name, "clients", "ms", lines, 0); err != nil {
			return err
		}
	}
	b.WriteString("<table><tr><th class=\"l\">thread</th><th>stage</th><th>clients</th><th class=\"l\">operation</th><th>count</th><th>mean ms</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>max ms</th></tr>\n")
	for _, t := range res.Threads {
		for _, s := range t.Stages {
			for _, o := range s.Ops {
				fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td>%d</td><td>%d</td><td class=\"l\">%s</td><td>%d</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td></tr>\n",
					esc(t.Name), s.Index+1, s.Clients, esc(o.Op), o.Count, o.Mean, o.P50, o.P95, o.P99, o.Max)
			}
		}
	}
	b.WriteString("</table>\n")
	return nil
}

// series draws one node meter over time, one line per thread and node;
// stage boundaries are where the client count changes.
func series(b *strings.Builder, res *Results, id, title, unit string, get func(NodeSample) float64, withClient bool) error {
	fmt.Fprintf(b, "<h2 id=\"%s\">%s</h2>\n", id, esc(title))
	var lines []line
	k := 0
	for _, t := range res.Threads {
		nodes := 0
		for _, s := range t.Samples {
			nodes = max(nodes, len(s.Nodes))
		}
		for n := range nodes {
			var pts, extra []point
			for _, s := range t.Samples {
				if n < len(s.Nodes) {
					if v := get(s.Nodes[n]); v >= 0 {
						pts = append(pts, point{s.T, v})
					}
					switch id {
					case "tickets":
						if v := s.Nodes[n].TicketsLimit; v >= 0 {
							extra = append(extra, point{s.T, v})
						}
					case "queue":
						if v := s.Nodes[n].GitProcesses; v >= 0 {
							extra = append(extra, point{s.T, v})
						}
					}
				}
			}
			col := palette[k%len(palette)]
			k++
			lines = append(lines, line{name: fmt.Sprintf("%s node %d", t.Name, n+1), color: col, pts: pts})
			if len(extra) > 0 {
				lines = append(lines, line{name: fmt.Sprintf("%s node %d (dashed)", t.Name, n+1), color: col, dashed: true, pts: extra})
			}
		}
		if withClient {
			var pts []point
			for _, s := range t.Samples {
				pts = append(pts, point{s.T, s.ClientCPU})
			}
			lines = append(lines, line{name: t.Name + " load client", color: "#999", dashed: true, pts: pts})
			var all []point
			for _, s := range t.Samples {
				if s.MachineCPU > 0 {
					all = append(all, point{s.T, s.MachineCPU})
				}
			}
			if len(all) > 0 {
				lines = append(lines, line{name: t.Name + " whole machine", color: "#333", dashed: true, pts: all})
			}
		}
	}
	empty := true
	for _, l := range lines {
		if len(l.pts) > 0 {
			empty = false
		}
	}
	if empty {
		b.WriteString("<p class=\"note\">No node exposed this meter during the run.</p>\n")
	}
	return chart(b, title, "seconds", unit, lines, 0)
}

func errorTable(b *strings.Builder, res *Results) {
	b.WriteString(`<h2 id="errors">Errors</h2>` + "\n")
	b.WriteString("<table><tr><th class=\"l\">thread</th><th>stage</th><th class=\"l\">operation</th><th>count</th><th class=\"l\">message</th></tr>\n")
	n := 0
	for _, t := range res.Threads {
		for _, s := range t.Stages {
			for _, o := range s.Ops {
				for _, e := range o.ErrorMessages {
					n++
					fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td>%d</td><td class=\"l\">%s</td><td>%d</td><td class=\"l\">%s</td></tr>\n",
						esc(t.Name), s.Index+1, esc(o.Op), e.Count, esc(e.Message))
				}
			}
		}
	}
	b.WriteString("</table>\n")
	if n == 0 {
		b.WriteString("<p>No errors.</p>\n")
	}
}
