package e3

import (
	"encoding/json"
	"math"
	"os"
	"time"
)

// Results is results.json: everything the report is drawn from.
type Results struct {
	Experiment  string         `json:"experiment"`
	Description string         `json:"description,omitempty"`
	File        string         `json:"file,omitempty"`
	Started     time.Time      `json:"started"`
	Finished    time.Time      `json:"finished"`
	Machine     Machine        `json:"machine"`
	Workload    Workload       `json:"workload"`
	Dataset     Dataset        `json:"dataset"`
	Threads     []ThreadResult `json:"threads"`
}

// Machine is where the lab ran.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	Go       string `json:"go"`
	Git      string `json:"git,omitempty"`
}

// ThreadResult is one instance's run.
type ThreadResult struct {
	Name     string        `json:"name"`
	Instance Instance      `json:"instance"`
	Stages   []StageResult `json:"stages"`
	// Samples is the per-second time series over the whole thread.
	Samples []Sample `json:"samples"`
	// Fit is the saturating curve fitted to git ops/hour by clients.
	Fit *Fit `json:"fit,omitempty"`
	// Error is why the thread stopped early, if it did.
	Error string `json:"error,omitempty"`
	// Profile is a CPU profile taken from node 1 during the last stage,
	// when asked for, or why it could not be taken.
	Profile string `json:"profile,omitempty"`
}

// StageResult is one stage of a thread.
type StageResult struct {
	Index   int     `json:"index"`
	Clients int     `json:"clients"`
	Start   float64 `json:"start_s"` // seconds since the thread's start
	End     float64 `json:"end_s"`
	// ScriptClients is how many clients ran each script.
	ScriptClients map[string]int `json:"script_clients"`
	Ops           []OpResult     `json:"ops"`
	// GitPerHour counts clone, fetch, push and ls-remote; AllPerHour
	// every successful operation.
	GitPerHour float64 `json:"git_ops_per_hour"`
	AllPerHour float64 `json:"all_ops_per_hour"`
	Errors     int64   `json:"errors"`
	// NodeCPU is each node's mean CPU in cores over the stage; NodeCPUPct
	// the same as a share of the node's cores (its cap, or the machine).
	NodeCPU    []float64 `json:"node_cpu_cores,omitempty"`
	NodeCPUPct []float64 `json:"node_cpu_pct,omitempty"`
	// ClientCPU is the load client's own CPU in cores (this process and
	// the git processes it ran), ClientCPUPct its share of the machine.
	ClientCPU    float64 `json:"client_cpu_cores"`
	ClientCPUPct float64 `json:"client_cpu_pct"`
	// InfraCPU is the local helpers' CPU in cores: "postgres" and
	// "haproxy" when the instance has them.
	InfraCPU map[string]float64 `json:"infra_cpu_cores,omitempty"`
	// MachineCPU is the whole machine's busy CPU in cores (/proc/stat),
	// OtherCPU what of it was neither nodes, client nor helpers: other
	// tenants of the machine, which the measurement did not have.
	MachineCPU float64 `json:"machine_cpu_cores"`
	OtherCPU   float64 `json:"other_cpu_cores"`
}

// OpResult is one operation's statistics in a stage; times in ms.
type OpResult struct {
	Op            string       `json:"op"`
	Git           bool         `json:"git"`
	Count         int64        `json:"count"`
	Errors        int64        `json:"errors"`
	Bytes         int64        `json:"bytes"`
	PerHour       float64      `json:"per_hour"`
	Mean          float64      `json:"mean_ms"`
	P50           float64      `json:"p50_ms"`
	P95           float64      `json:"p95_ms"`
	P99           float64      `json:"p99_ms"`
	Max           float64      `json:"max_ms"`
	ErrorMessages []ErrorCount `json:"error_messages,omitempty"`
}

// ErrorCount is one distinct error message and how often it occurred.
type ErrorCount struct {
	Message string `json:"message"`
	Count   int64  `json:"count"`
}

// Sample is one second of the run.
type Sample struct {
	T         float64 `json:"t"` // seconds since the thread's start
	Stage     int     `json:"stage"`
	OpsPerSec float64 `json:"ops_per_s"`
	ClientCPU float64 `json:"client_cpu_cores"`
	// MachineCPU is the whole machine's busy CPU in cores.
	MachineCPU float64      `json:"machine_cpu_cores"`
	Nodes      []NodeSample `json:"nodes"`
}

// NodeSample is one node's meters at one second. A meter a node does not
// expose is -1.
type NodeSample struct {
	CPU           float64 `json:"cpu_cores"`
	Memory        int64   `json:"memory_bytes"`
	GitProcesses  float64 `json:"git_processes"`
	TicketsInUse  float64 `json:"tickets_in_use"`
	TicketsQueued float64 `json:"tickets_queued"`
	TicketsLimit  float64 `json:"tickets_limit"`
	// CacheHitRate is (hit+coalesced)/(hit+coalesced+miss) of pack
	// lookups during this second; bypasses (fetches with haves, which are
	// never cached) are left out. -1 when there was no cacheable lookup.
	CacheHitRate float64 `json:"cache_hit_rate"`
}

// Fit is T(c) = Max·c/(Half+c), fitted by least squares to throughput T
// (git ops/hour) against clients c: Max is the throughput the instance
// tends to, Half the client count that reaches half of it.
type Fit struct {
	Max  float64 `json:"max"`
	Half float64 `json:"half"`
	R2   float64 `json:"r2"`
}

// Eval is the fitted throughput at c clients.
func (f Fit) Eval(c float64) float64 { return f.Max * c / (f.Half + c) }

// FitSaturating fits T = Max·c/(Half+c). For a fixed Half the model is
// linear in Max, with the closed-form least-squares Max = Σyg/Σg² where
// g = c/(Half+c); Half is found by a coarse logarithmic scan then golden
// section search on the residual. Fewer than two points fit nothing.
func FitSaturating(x, y []float64) *Fit {
	if len(x) < 2 || len(x) != len(y) {
		return nil
	}
	sse := func(h float64) (float64, float64) {
		var gy, gg float64
		for i := range x {
			g := x[i] / (h + x[i])
			gy += g * y[i]
			gg += g * g
		}
		if gg == 0 {
			return math.Inf(1), 0
		}
		m := gy / gg
		var s float64
		for i := range x {
			d := y[i] - m*x[i]/(h+x[i])
			s += d * d
		}
		return s, m
	}
	best, bestH := math.Inf(1), 0.0
	for e := -3.0; e <= 5; e += 0.05 {
		h := math.Pow(10, e)
		if s, _ := sse(h); s < best {
			best, bestH = s, h
		}
	}
	lo, hi := bestH/math.Pow(10, 0.05), bestH*math.Pow(10, 0.05)
	const phi = 0.6180339887498949
	for range 60 {
		a, b := hi-phi*(hi-lo), lo+phi*(hi-lo)
		sa, _ := sse(a)
		sb, _ := sse(b)
		if sa < sb {
			hi = b
		} else {
			lo = a
		}
	}
	h := (lo + hi) / 2
	s, m := sse(h)
	var mean, tot float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(len(y))
	for _, v := range y {
		tot += (v - mean) * (v - mean)
	}
	r2 := 1.0
	if tot > 0 {
		r2 = 1 - s/tot
	}
	return &Fit{Max: m, Half: h, R2: r2}
}

// ReadResults loads a results.json.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
