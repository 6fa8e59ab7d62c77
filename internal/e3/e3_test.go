package e3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseExperiment(t *testing.T) {
	const workload = `{"scripts":[{"script":"clone","weight":0.4},{"script":"fetch","weight":0.35},{"script":"push","weight":0.25}]}`
	tests := []struct {
		name    string
		json    string
		wantErr string // substring; "" means valid
	}{
		{"valid local", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"large","scale":0.005},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":4,"duration":"10s"}]}`, ""},
		{"valid remote needs no dataset", `{"name":"x","workload":` + workload + `,
			"threads":[{"name":"a","instance":{"url":"http://h:7990","username":"u","password":"p"}}],"stages":[{"clients":4,"duration":"10s"}]}`, ""},
		{"weights must sum to 1", `{"name":"x","workload":{"scripts":[{"script":"clone","weight":0.5},{"script":"push","weight":0.4}]},
			"dataset":{"profile":"small","scale":0.01},"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":4,"duration":"10s"}]}`, "weights sum to 0.9, want 1"},
		{"unknown script", `{"name":"x","workload":{"scripts":[{"script":"clonez","weight":1}]},
			"dataset":{"profile":"small","scale":0.01},"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":4,"duration":"10s"}]}`, "unknown script"},
		{"sqlite cluster", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":2}}],"stages":[{"clients":4,"duration":"10s"}]}`, `need database "postgres"`},
		{"nodes and url", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1,"url":"http://h","username":"u"}}],"stages":[{"clients":4,"duration":"10s"}]}`, "not both"},
		{"no stages", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}]}`, "no stages"},
		{"bad duration", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":4,"duration":"10"}]}`, "missing unit"},
		{"zero clients", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":0,"duration":"10s"}]}`, "clients 0 must be at least 1"},
		{"unknown field", `{"name":"x","workload":` + workload + `,"nodez":1,"threads":[]}`, "unknown field"},
		{"bad profile", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"huge","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, `dataset.profile "huge"`},
		{"duplicate thread", `{"name":"x","workload":` + workload + `,"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}},{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, "duplicate name"},
		{"git client push", `{"name":"x","workload":{"scripts":[{"script":"push","weight":1,"client":"git"}]},"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, "real git client runs"},
		{"ssh clone", `{"name":"x","workload":{"scripts":[{"script":"clone","weight":1,"transport":"ssh"}]},"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, ""},
		{"ssh rest persona", `{"name":"x","workload":{"scripts":[{"script":"browse","weight":1,"transport":"ssh"}]},"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, "transport ssh is for git scripts"},
		{"ssh real git", `{"name":"x","workload":{"scripts":[{"script":"clone","weight":1,"transport":"ssh","client":"git"}]},"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, "runs the load client only"},
		{"bad transport", `{"name":"x","workload":{"scripts":[{"script":"clone","weight":1,"transport":"git"}]},"dataset":{"profile":"small","scale":0.01},
			"threads":[{"name":"a","instance":{"nodes":1}}],"stages":[{"clients":1,"duration":"10s"}]}`, `transport "git"`},
		{"ssh remote without key", `{"name":"x","workload":{"scripts":[{"script":"clone","weight":1,"transport":"ssh"}]},
			"threads":[{"name":"a","instance":{"url":"http://h:7990","ssh":"ssh://h:7999","username":"u","password":"p"}}],"stages":[{"clients":4,"duration":"10s"}]}`, "give ssh (ssh://host:port) and ssh_key"},
		{"ssh remote", `{"name":"x","workload":{"scripts":[{"script":"clone","weight":1,"transport":"ssh"}]},
			"threads":[{"name":"a","instance":{"url":"http://h:7990","ssh":"ssh://h:7999","ssh_key":"/k","username":"u","password":"p"}}],"stages":[{"clients":4,"duration":"10s"}]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json), t.TempDir())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestCheckedInExperiments keeps every file under experiments/ valid.
func TestCheckedInExperiments(t *testing.T) {
	files, err := filepath.Glob("../../experiments/*.json")
	if err != nil || len(files) < 6 {
		t.Fatalf("experiments: %v, %d files", err, len(files))
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Error(err)
		}
	}
}

func TestSplit(t *testing.T) {
	w := Workload{Scripts: []Script{{Script: "clone", Weight: 0.4}, {Script: "fetch", Weight: 0.35}, {Script: "push", Weight: 0.25}}}
	tests := []struct {
		clients int
		want    []int
	}{
		{1, []int{1, 0, 0}},
		{3, []int{1, 1, 1}},
		{4, []int{2, 1, 1}},
		{20, []int{8, 7, 5}},
		{100, []int{40, 35, 25}},
	}
	for _, tt := range tests {
		got := w.Split(tt.clients)
		sum := 0
		for _, n := range got {
			sum += n
		}
		if sum != tt.clients || !equal(got, tt.want) {
			t.Errorf("Split(%d) = %v, want %v", tt.clients, got, tt.want)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFitSaturating(t *testing.T) {
	// Exact data from T = 1000·c/(8+c) must come back.
	var xs, ys []float64
	for _, c := range []float64{1, 2, 4, 8, 16, 32, 64} {
		xs, ys = append(xs, c), append(ys, 1000*c/(8+c))
	}
	f := FitSaturating(xs, ys)
	if f == nil || math.Abs(f.Max-1000) > 1 || math.Abs(f.Half-8) > 0.05 || f.R2 < 0.9999 {
		t.Fatalf("fit = %+v, want max 1000 half 8", f)
	}
	if FitSaturating([]float64{4}, []float64{10}) != nil {
		t.Error("one point fitted")
	}
}

func TestZipfPicker(t *testing.T) {
	pick := newPicker(100, "zipf", 1)
	r := newTestRand()
	counts := make([]int, 100)
	for range 20000 {
		counts[pick(r)]++
	}
	// Rank 1 gets 1/H(100) ≈ 19% of picks, rank 100 about 0.2%.
	if counts[0] < 3000 || counts[0] < 20*counts[99] {
		t.Errorf("rank 1: %d picks, rank 100: %d; not Zipf-like", counts[0], counts[99])
	}
}

func TestParseSample(t *testing.T) {
	tests := []struct {
		line, name, labels string
		value              float64
		ok                 bool
	}{
		{`sluice_git_processes_running 3`, "sluice_git_processes_running", "", 3, true},
		{`sluice_packcache_lookups_total{kind="packs",result="hit"} 1.5e+06`, "sluice_packcache_lookups_total", `kind="packs",result="hit"`, 1.5e6, true},
		{`broken{`, "", "", 0, false},
		{`novalue`, "", "", 0, false},
	}
	for _, tt := range tests {
		name, labels, v, ok := parseSample(tt.line)
		if name != tt.name || labels != tt.labels || v != tt.value || ok != tt.ok {
			t.Errorf("parseSample(%q) = %q %q %g %v", tt.line, name, labels, v, ok)
		}
	}
}

// sampleResults is a two-thread run with every meter, for rendering.
func sampleResults() *Results {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	mk := func(name string, scale float64) ThreadResult {
		tr := ThreadResult{Name: name, Instance: Instance{Nodes: 1, Properties: map[string]string{"cache.packs": "true"}}}
		for i, c := range []int{4, 8, 16} {
			tr.Stages = append(tr.Stages, StageResult{Index: i, Clients: c, GitPerHour: scale * float64(c) * 1000, AllPerHour: scale * float64(c) * 1100,
				NodeCPU: []float64{0.5 * float64(i+1)}, NodeCPUPct: []float64{25 * float64(i+1)},
				InfraCPU: map[string]float64{"postgres": 0.1, "haproxy": 0.05}, MachineCPU: 1.9, OtherCPU: 0.75,
				Ops: []OpResult{
					{Op: "clone", Git: true, Count: int64(10 * c), PerHour: scale * float64(c) * 600, Mean: 120, P95: 300},
					{Op: "push", Git: true, Count: int64(5 * c), Errors: 1, PerHour: scale * float64(c) * 400, Mean: 80, P95: 200,
						ErrorMessages: []ErrorCount{{Message: "push refs/heads/x rejected: <stale> & \"odd\"", Count: 1}}},
				}})
		}
		for s := range 30 {
			tr.Samples = append(tr.Samples, Sample{T: float64(s), Stage: s / 10, OpsPerSec: 3, ClientCPU: 0.2, MachineCPU: 1.5,
				Nodes: []NodeSample{{CPU: 1, Memory: 100e6, GitProcesses: 3, TicketsInUse: 2, TicketsQueued: 1, TicketsLimit: 8, CacheHitRate: 0.7}}})
		}
		var xs, ys []float64
		for _, s := range tr.Stages {
			xs, ys = append(xs, float64(s.Clients)), append(ys, s.GitPerHour)
		}
		tr.Fit = FitSaturating(xs, ys)
		return tr
	}
	return &Results{Experiment: "render <test>", Started: t0, Finished: t0.Add(time.Minute), Machine: Machine{CPUs: 2, Go: "go"},
		Workload: Workload{Scripts: []Script{{Script: "clone", Weight: 0.6}, {Script: "push", Weight: 0.4}}},
		Dataset:  Dataset{Profile: "large", Scale: 0.005}, Threads: []ThreadResult{mk("cache-on", 2), mk("cache-off", 1)}}
}

func TestRenderReport(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderReport(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	checkReport(t, buf.Bytes(), 2)
	if !strings.Contains(buf.String(), "&lt;stale&gt; &amp; &#34;odd&#34;") {
		t.Error("error message not escaped")
	}
	for _, want := range []string{"haproxy 0.05, postgres 0.10", "<td>1.90</td><td>0.75</td>", "cache-on whole machine"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q (helpers, machine and other tenants' CPU)", want)
		}
	}
}

// checkReport parses a report as XML and checks every section, and at
// least minCharts SVG charts with drawn paths, are there; and that
// nothing is fetched from elsewhere.
func checkReport(t *testing.T, b []byte, minCharts int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	ids := map[string]bool{}
	svgs, paths := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("report is not well-formed: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "svg":
			svgs++
		case "path":
			paths++
		case "script", "img", "link", "iframe":
			t.Errorf("report has a <%s> element; it must be self-contained", se.Name.Local)
		}
		for _, a := range se.Attr {
			if a.Name.Local == "id" {
				ids[a.Value] = true
			}
			if a.Name.Local == "src" || a.Name.Local == "href" {
				t.Errorf("report references %q", a.Value)
			}
		}
	}
	for _, s := range ReportSections {
		if !ids[s] {
			t.Errorf("report lacks section %q", s)
		}
	}
	if svgs < minCharts || paths == 0 {
		t.Errorf("report has %d charts and %d paths", svgs, paths)
	}
}

func TestCompare(t *testing.T) {
	a, b := sampleResults(), sampleResults()
	b.Threads[0].Stages[2].GitPerHour *= 2
	var txt bytes.Buffer
	CompareText(&txt, a, b)
	if !strings.Contains(txt.String(), "2.00×") {
		t.Errorf("comparison lacks the 2× ratio:\n%s", txt.String())
	}
	var h bytes.Buffer
	if err := CompareHTML(&h, a, b); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(h.Bytes(), new(struct{})); err != nil {
		t.Fatalf("compare page is not well-formed: %v", err)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := WriteOutputs(dir, sampleResults()); err != nil {
		t.Fatal(err)
	}
	r, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Threads[1].Stages[2].Clients != 16 || r.Threads[0].Fit == nil {
		t.Fatalf("round trip lost data: %+v", r.Threads[1].Stages[2])
	}
	if _, err := os.Stat(filepath.Join(dir, "report.html")); err != nil {
		t.Fatal(err)
	}
}

// TestReportChartsEscapeNames: names reach the SVG charts (legends, axis
// rows, tooltips) through html/template, so markup in them stays text and
// the report stays well-formed.
func TestReportChartsEscapeNames(t *testing.T) {
	res := sampleResults()
	res.Threads[0].Name = `<b>x</b> & "y"`
	res.Threads[0].Stages[0].Ops[0].Op = `clone<script>`
	var buf bytes.Buffer
	if err := RenderReport(&buf, res); err != nil {
		t.Fatal(err)
	}
	checkReport(t, buf.Bytes(), 2)
	out := buf.String()
	if strings.Contains(out, "<b>x</b>") || strings.Contains(out, "<script>") {
		t.Fatal("a name was written as markup")
	}
	for _, want := range []string{
		`&lt;b&gt;x&lt;/b&gt; &amp; &#34;y&#34; node 1</text>`, // a legend entry
		`&lt;b&gt;x&lt;/b&gt; &amp; &#34;y&#34; #1 (`,          // a share row
		`<title>clone&lt;script&gt;: `,                         // a bar's tooltip
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
