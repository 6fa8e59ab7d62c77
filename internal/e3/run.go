package e3

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/bench"
	"github.com/sluice-scm/sluice/internal/loadgen"
)

// Options configure a run.
type Options struct {
	// Out receives results.json, report.html and the instances' logs.
	Out string
	// File is the experiment file's path, recorded in the results.
	File   string
	Logger *slog.Logger
	// Progress receives the live progress line; nil shows none.
	Progress io.Writer
	// PProf takes a CPU profile of node 1 during each thread's last stage
	// from /debug/pprof/profile, when the node serves it.
	PProf bool
	// HistoryCache keeps generated repository histories between runs.
	HistoryCache string
}

// Run runs every thread of e and writes results.json and report.html.
func Run(ctx context.Context, e *Experiment, opts Options) (*Results, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	logger := opts.Logger.With("component", "e3")
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	out, err := filepath.Abs(opts.Out)
	if err != nil {
		return nil, err
	}
	m := bench.DescribeMachine("git", "")
	res := &Results{Experiment: e.Name, Description: e.Description, File: opts.File, Started: time.Now().UTC(),
		Machine:  Machine{CPUs: m.CPUs, CPUModel: m.CPUModel, Kernel: m.Kernel, Go: m.Go, Git: m.Git},
		Workload: e.workload, Dataset: e.Dataset, Threads: make([]ThreadResult, len(e.Threads))}
	runOne := func(i int) {
		t := e.Threads[i]
		tr := ThreadResult{Name: t.Name, Instance: t.Instance}
		tr.Instance.Password = "" // results are shared; credentials are not
		if err := runThread(ctx, e, t, &tr, filepath.Join(out, cgroupSafe(t.Name)), opts, logger); err != nil {
			tr.Error = err.Error()
			logger.Error("thread failed", "thread", t.Name, "err", err)
		}
		res.Threads[i] = tr
	}
	if e.Parallel {
		var wg sync.WaitGroup
		for i := range e.Threads {
			wg.Go(func() { runOne(i) })
		}
		wg.Wait()
	} else {
		for i := range e.Threads {
			if ctx.Err() != nil {
				break
			}
			runOne(i)
		}
	}
	res.Finished = time.Now().UTC()
	if err := WriteOutputs(out, res); err != nil {
		return res, err
	}
	return res, nil
}

// WriteOutputs writes results.json and report.html into dir.
func WriteOutputs(dir string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	if err := RenderReport(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runThread provisions (or connects to) the thread's instance and runs
// its stages.
func runThread(ctx context.Context, e *Experiment, t Thread, tr *ThreadResult, dir string, opts Options, logger *slog.Logger) error {
	// Every run starts from a fresh instance: what an earlier run into the
	// same directory left (database, pushes, cache) would skew this one.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var in *instance
	var err error
	if t.Instance.URL != "" {
		in, err = connect(ctx, e, t)
	} else {
		in, err = provision(ctx, e, t, dir, opts.HistoryCache, logger)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := in.stop(); err != nil {
			logger.Warn("stop instance", "thread", t.Name, "err", err)
		}
	}()
	stages := e.StagesOf(t)
	maxClients := 0
	for _, s := range stages {
		maxClients = max(maxClients, s.Clients)
	}
	d := &driver{in: in, pick: newPicker(len(in.repos), e.Popularity, e.ZipfS), tmp: filepath.Join(dir, "git-tmp")}
	d.lg = loadgen.NewClient(loadgen.Options{MaxConnsPerHost: maxClients + 4, Agent: "sluice-e3/1"})
	defer d.lg.CloseIdleConnections()
	d.hc = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxClients + 4,
		IdleConnTimeout:     90 * time.Second,
	}}
	defer d.hc.CloseIdleConnections()
	if e.workload.NeedsSSH() {
		if d.ssh, err = sshClients(in.sshAddr, in.keys); err != nil {
			return err
		}
		if len(d.ssh) == 0 {
			return errors.New("the workload runs scripts over SSH but the instance has no SSH keys")
		}
	}
	if err := os.MkdirAll(d.tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(d.tmp)

	pool := &clientPool{d: d, w: e.workload, running: make([][]context.CancelFunc, len(e.workload.Scripts))}
	runCtx, stopClients := context.WithCancel(ctx)
	defer func() {
		stopClients()
		pool.wg.Wait()
	}()

	if e.Warmup.Duration > 0 {
		d.rec.Store(newRecorder())
		pool.resize(runCtx, stages[0].Clients)
		sleep(ctx, e.Warmup.Duration)
	}

	// The sampler: one Sample a second, for the whole thread.
	start := time.Now()
	var (
		mu       sync.Mutex
		stageIdx = 0
		samples  []Sample
	)
	hcm := &http.Client{Timeout: time.Second}
	sampCtx, stopSampler := context.WithCancel(ctx)
	sampDone := make(chan struct{})
	go func() {
		defer close(sampDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		prevCPU := make([]time.Duration, len(in.metrics))
		prevProc := make([]float64, len(in.metrics))
		prevHit := make([]float64, len(in.metrics))
		prevMiss := make([]float64, len(in.metrics))
		for i, n := range in.nodes {
			c, _ := n.CPU()
			prevCPU[i] = c.Best()
		}
		for i, u := range in.metrics {
			mv := scrape(sampCtx, hcm, u)
			prevProc[i], prevHit[i], prevMiss[i] = mv.processCPU, mv.hit, mv.miss
		}
		prevClient, prevMachine, prevT := clientCPU(), machineBusy(), time.Now()
		prevOK, _ := d.totals()
		for {
			select {
			case <-sampCtx.Done():
				return
			case now := <-tick.C:
				dt := now.Sub(prevT).Seconds()
				prevT = now
				s := Sample{T: now.Sub(start).Seconds()}
				cc := clientCPU()
				s.ClientCPU = (cc - prevClient).Seconds() / dt
				prevClient = cc
				mb := machineBusy()
				s.MachineCPU = (mb - prevMachine).Seconds() / dt
				prevMachine = mb
				ok, failed := d.totals()
				s.OpsPerSec = float64(ok-prevOK) / dt
				prevOK = ok
				for i, u := range in.metrics {
					mv := scrape(sampCtx, hcm, u)
					ns := NodeSample{CPU: -1, Memory: -1, GitProcesses: -1, TicketsInUse: -1, TicketsQueued: -1, TicketsLimit: -1, CacheHitRate: -1}
					if i < len(in.nodes) {
						if c, err := in.nodes[i].CPU(); err == nil {
							ns.CPU = (c.Best() - prevCPU[i]).Seconds() / dt
							prevCPU[i] = c.Best()
						}
						ns.Memory = in.nodes[i].Memory()
					} else if mv.ok {
						ns.CPU = (mv.processCPU - prevProc[i]) / dt
						prevProc[i] = mv.processCPU
					}
					if mv.ok {
						ns.GitProcesses, ns.TicketsInUse, ns.TicketsQueued, ns.TicketsLimit = mv.gitProcs, mv.inUse, mv.queued, mv.limit
						if h, m := mv.hit-prevHit[i], mv.miss-prevMiss[i]; h+m > 0 {
							ns.CacheHitRate = h / (h + m)
						}
						prevHit[i], prevMiss[i] = mv.hit, mv.miss
					}
					s.Nodes = append(s.Nodes, ns)
				}
				mu.Lock()
				s.Stage = stageIdx
				samples = append(samples, s)
				mu.Unlock()
				if opts.Progress != nil {
					cpu := 0.0
					for _, n := range s.Nodes {
						cpu += max(n.CPU, 0)
					}
					fmt.Fprintf(opts.Progress, "\r[%s] stage %d/%d %3d clients %5.0fs  ok %d  errors %d  %.1f ops/s  nodes %.2f cores  client %.2f cores   ",
						t.Name, s.Stage+1, len(stages), pool.size(), s.T, ok, failed, s.OpsPerSec, cpu, s.ClientCPU)
				}
			}
		}
	}()

	var profileDone chan string
	for i, st := range stages {
		rec := newRecorder()
		d.rec.Store(rec)
		mu.Lock()
		stageIdx = i
		mu.Unlock()
		cpu0 := nodeCPU(in)
		client0, machine0, infra0 := clientCPU(), machineBusy(), infraCPU(in.infra)
		t0 := time.Now()
		pool.resize(runCtx, st.Clients)
		if opts.PProf && i == len(stages)-1 && len(in.metrics) > 0 {
			profileDone = make(chan string, 1)
			secs := max(1, int(st.Duration.Seconds()*0.8))
			go func() { profileDone <- takeProfile(ctx, strings.TrimSuffix(in.metrics[0], "/metrics"), secs, dir) }()
		}
		sleep(ctx, st.Duration.Duration)
		elapsed := time.Since(t0)
		sr := StageResult{Index: i, Clients: st.Clients, Start: t0.Sub(start).Seconds(), End: time.Since(start).Seconds(),
			ScriptClients: pool.counts(), Ops: rec.result(elapsed)}
		cpu1 := nodeCPU(in)
		for k := range cpu1 {
			cores := (cpu1[k] - cpu0[k]).Seconds() / elapsed.Seconds()
			sr.NodeCPU = append(sr.NodeCPU, cores)
			capacity := float64(runtime.NumCPU())
			if t.Instance.CPUs > 0 {
				capacity = t.Instance.CPUs
			}
			sr.NodeCPUPct = append(sr.NodeCPUPct, 100*cores/capacity)
		}
		sr.ClientCPU = (clientCPU() - client0).Seconds() / elapsed.Seconds()
		sr.ClientCPUPct = 100 * sr.ClientCPU / float64(runtime.NumCPU())
		sr.MachineCPU = (machineBusy() - machine0).Seconds() / elapsed.Seconds()
		accounted := sr.ClientCPU
		for _, c := range sr.NodeCPU {
			accounted += c
		}
		for name, t1 := range infraCPU(in.infra) {
			if t0, ok := infra0[name]; ok {
				if sr.InfraCPU == nil {
					sr.InfraCPU = map[string]float64{}
				}
				sr.InfraCPU[name] = (t1 - t0).Seconds() / elapsed.Seconds()
				accounted += sr.InfraCPU[name]
			}
		}
		sr.OtherCPU = max(0, sr.MachineCPU-accounted)
		for _, o := range sr.Ops {
			sr.Errors += o.Errors
			sr.AllPerHour += o.PerHour
			if o.Git {
				sr.GitPerHour += o.PerHour
			}
		}
		tr.Stages = append(tr.Stages, sr)
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "\n[%s] stage %d: %d clients, %s git ops, %s all ops, %d errors\n",
				t.Name, i+1, st.Clients, fmtRate(sr.GitPerHour), fmtRate(sr.AllPerHour), sr.Errors)
		}
		if ctx.Err() != nil {
			break
		}
	}
	stopClients()
	pool.wg.Wait()
	stopSampler()
	<-sampDone
	if profileDone != nil {
		tr.Profile = <-profileDone
	}
	mu.Lock()
	tr.Samples = samples
	mu.Unlock()
	var xs, ys []float64
	for _, s := range tr.Stages {
		y := s.GitPerHour
		if y == 0 {
			y = s.AllPerHour
		}
		xs, ys = append(xs, float64(s.Clients)), append(ys, y)
	}
	tr.Fit = FitSaturating(xs, ys)
	for _, n := range in.nodes {
		if done, err := n.Exited(); done {
			return fmt.Errorf("a node died during the run: %v", err)
		}
	}
	return ctx.Err()
}

func nodeCPU(in *instance) []time.Duration {
	out := make([]time.Duration, len(in.nodes))
	for i, n := range in.nodes {
		if c, err := n.CPU(); err == nil {
			out[i] = c.Best()
		}
	}
	return out
}

// totals is the driver's running count of operations across stages.
func (d *driver) totals() (ok, failed int64) {
	return d.okOps.Load(), d.failedOps.Load()
}

// clientPool holds the running clients of each script.
type clientPool struct {
	d       *driver
	w       Workload
	mu      sync.Mutex
	running [][]context.CancelFunc
	nextID  int
	wg      sync.WaitGroup
}

// resize starts or stops clients so that each script runs its share of n.
func (p *clientPool) resize(ctx context.Context, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := p.w.Split(n)
	for i, s := range p.w.Scripts {
		for len(p.running[i]) < want[i] {
			id := p.nextID
			p.nextID++
			cred := p.d.in.creds[id%len(p.d.in.creds)]
			cctx, cancel := context.WithCancel(ctx)
			c := &client{d: p.d, id: id, script: s, user: cred[0], pass: cred[1],
				rng: rand.New(rand.NewPCG(uint64(id)+1, 0xe3)), seen: map[int][]string{}}
			p.running[i] = append(p.running[i], cancel)
			p.wg.Go(func() { c.run(cctx) })
		}
		for len(p.running[i]) > want[i] {
			last := len(p.running[i]) - 1
			p.running[i][last]()
			p.running[i] = p.running[i][:last]
		}
	}
}

func (p *clientPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.running {
		n += len(r)
	}
	return n
}

func (p *clientPool) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for i, s := range p.w.Scripts {
		m[s.Script+"/"+orDefault(s.Protocol, "v2")+"/"+orDefault(s.Transport, "http")+"/"+orDefault(s.Client, "loadgen")] += len(p.running[i])
	}
	return m
}

// takeProfile fetches a CPU profile from base/debug/pprof/profile and
// summarises it with go tool pprof when the toolchain is there. It
// returns the summary or why there is none.
func takeProfile(ctx context.Context, base string, seconds int, dir string) string {
	hc := &http.Client{Timeout: time.Duration(seconds+30) * time.Second}
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds), nil)
	req.SetBasicAuth("admin", adminPassword)
	resp, err := hc.Do(req)
	if err != nil {
		return "no profile: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Sprintf("no profile: GET /debug/pprof/profile answered http %d (the node does not serve pprof)", resp.StatusCode)
	}
	path := filepath.Join(dir, "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return "no profile: " + err.Error()
	}
	_, err = io.Copy(f, resp.Body)
	f.Close()
	if err != nil {
		return "no profile: " + err.Error()
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		return "profile saved to " + path + " (go tool pprof failed: " + err.Error() + ")"
	}
	return "profile: " + path + "\n" + string(out)
}
