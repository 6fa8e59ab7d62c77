//go:build bench

package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// Command is how `make bench` runs this; it is written into the report.
const Command = "go test -tags bench -run TestBench -count=1 -timeout 60m -v ./internal/bench"

// envInt and envDuration read the knobs documented in docs/benchmarks.md.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

func envFloat(t *testing.T, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		t.Fatalf("%s: want a positive number, got %q", name, v)
	}
	return f
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

func run(ctx context.Context, t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// TestBench measures Sluice against nginx + fcgiwrap + git http-backend
// and writes the tables into docs/benchmarks.md: the main comparison, then
// SSH vs HTTP, the CI clone storm and throttling, each against a
// reference measured in the same run.
func TestBench(t *testing.T) {
	duration := envDuration(t, "BENCH_DURATION", 30*time.Second)
	workers := envInt(t, "BENCH_WORKERS", 16)
	slowRate := int64(envInt(t, "BENCH_SLOW_RATE", 1_000_000))
	throttleCores := float64(envInt(t, "BENCH_THROTTLE_CORES", 1))
	idle := envDuration(t, "BENCH_IDLE", 5*time.Second)
	spec := DefaultRepoSpec
	spec.Commits = envInt(t, "BENCH_COMMITS", spec.Commits)
	// BENCH_ONLY=push,storm… runs only those phases (clone, storm, push,
	// throttle), prints what it measured and writes no report: for
	// working on one path without waiting eight minutes.
	only := map[string]bool{}
	for _, p := range strings.Split(os.Getenv("BENCH_ONLY"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			only[p] = true
		}
	}
	wantPhase := func(phase string) bool { return len(only) == 0 || only[phase] }
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "bench")
	loadBefore := LoadAverage()
	moduleRoot, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	const user, password = "bench", "bench-password-1"

	// The repository, generated once and served by both.
	repoPath := filepath.Join(work, "repos", "bench", "big.git")
	t0 := time.Now()
	if err := GenerateRepo(ctx, "git", repoPath, spec); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(repoPath, "objects", "pack", "*.pack"))
	var packSize int64
	for _, p := range packs {
		if fi, err := os.Stat(p); err == nil {
			packSize += fi.Size()
		}
	}
	objects, err := exec.Command("git", "-C", repoPath, "rev-list", "--objects", "--all").Output()
	if err != nil {
		t.Fatal(err)
	}
	nobj := strings.Count(string(objects), "\n")
	refs, _ := exec.Command("git", "-C", repoPath, "for-each-ref").Output()
	repoDesc := fmt.Sprintf("generated (%d commits on main, seed %d), %d objects, %d refs, %.1f MB packed with a bitmap",
		spec.Commits, spec.Seed, nobj, strings.Count(string(refs), "\n"), float64(packSize)/1e6)
	logger.Info("repository generated", "took", time.Since(t0).Round(time.Millisecond), "repo", repoDesc)

	// Sluice: built from this tree, pack cache off, rate limit off (one
	// user drives all the load; a per-user limit would measure the
	// limiter), and the same content pushed in with real git.
	binary := os.Getenv("BENCH_SLUICE")
	if binary == "" {
		binary = filepath.Join(work, "bin", "sluice")
		run(ctx, t, moduleRoot, "go", "build", "-o", filepath.Dir(binary)+"/", "./cmd/sluice", "./cmd/sluice-hook")
	}
	uncachedSettings := map[string]string{"cache.packs": "false", "throttle.rate_limit": "false"}
	scfg := SluiceConfig{Binary: binary, Dir: filepath.Join(work, "sluice-data"), User: user, Password: password, Settings: uncachedSettings}
	n := &nodes{t: t, ctx: ctx, logger: logger, cfg: scfg}
	sl := n.start("sluice", uncachedSettings, 0, false)
	defer n.stop()
	// Passwords are argon2id-hashed and checked on every request;
	// BENCH_AUTH=token measures with an access token (stored as SHA-256)
	// as the password instead, as CI agents would use.
	authMode := os.Getenv("BENCH_AUTH")
	switch authMode {
	case "", "password":
		authMode = "password"
	case "token":
		out, err := scfg.Admin(ctx, "token", "create", "--username", user, "--name", "bench", "--scope", "write")
		if err != nil {
			t.Fatal(err)
		}
		n.pass = strings.TrimSpace(out)
		sl.pass = n.pass
	default:
		t.Fatalf("BENCH_AUTH=%q: want password or token", authMode)
	}
	if _, err := scfg.Admin(ctx, "project", "create", "--key", "BENCH", "--name", "Bench"); err != nil {
		t.Fatal(err)
	}
	if _, err := scfg.Admin(ctx, "repo", "create", "--project", "BENCH", "--name", "big"); err != nil {
		t.Fatal(err)
	}
	const repoURLPath = "/scm/bench/big.git"
	const sshPath = "/BENCH/big.git"
	run(ctx, t, repoPath, "git", "push", "--quiet", sl.URL(repoURLPath), "refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*")
	// A push leaves one pack without a bitmap; housekeeping gives Sluice
	// the layout the baseline repository has.
	housekeeping := "`sluice admin repo gc` after the import"
	if _, err := scfg.Admin(ctx, "repo", "gc", "BENCH/big"); err != nil {
		logger.Warn("housekeeping failed; sluice serves the pushed pack without a bitmap", "err", err)
		housekeeping = "no housekeeping (`sluice admin repo gc` failed): Sluice served the pushed pack without a bitmap"
	}
	n.addSSHKey(user, filepath.Join(work, "id_ed25519.pub"))

	base, err := StartBaseline(ctx, BaselineConfig{Dir: filepath.Join(work, "nginx"), ProjectRoot: filepath.Join(work, "repos"), User: user, Password: password, FcgiChildren: workers}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Stop()
	staticDir := BaselineConfig{Dir: filepath.Join(work, "nginx")}.StaticDir()

	baseClient := loadgen.NewClient(loadgen.Options{MaxConnsPerHost: workers})
	defer baseClient.CloseIdleConnections()
	// Both must serve the same refs and the same objects, or the
	// comparison is meaningless; the clone doubles as a warm-up.
	var want []loadgen.Ref
	var cloneBytes int64
	for i, s := range []*Server{base, sl} {
		c := baseClient
		if s == sl {
			c = n.http
		}
		url := s.URL(repoURLPath)
		got, err := c.LsRemote(ctx, url, loadgen.V2)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		got = slices.DeleteFunc(got, func(r loadgen.Ref) bool { return r.Name == "HEAD" })
		slices.SortFunc(got, func(a, b loadgen.Ref) int { return strings.Compare(a.Name, b.Name) })
		if i == 0 {
			want = got
		} else if !slices.Equal(got, want) {
			t.Fatalf("%s advertises %d refs, baseline %d, or they differ", s.Name, len(got), len(want))
		}
		res, err := c.Clone(ctx, url, loadgen.CloneOptions{Protocol: loadgen.V2})
		if err != nil {
			t.Fatalf("%s: warm-up clone: %v", s.Name, err)
		}
		if int(res.Objects) != nobj {
			t.Fatalf("%s: clone has %d objects, repository %d", s.Name, res.Objects, nobj)
		}
		cloneBytes = res.Bytes
	}
	if res, err := n.ssh.Clone(ctx, sshPath, loadgen.CloneOptions{Protocol: loadgen.V2}); err != nil || int(res.Objects) != nobj {
		t.Fatalf("warm-up clone over ssh: %d objects, %v", res.Objects, err)
	}

	measure := func(s *Server, workload string, d time.Duration, op loadgen.Op) Measurement {
		t.Helper()
		m, err := Measure(ctx, s, workload, loadgen.Spec{Name: workload, Workers: workers, Duration: d, Op: op})
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("measured", "server", s.Name, "report", m.Report.String(), "cpu_per_op", m.CPUPerOp(),
			"cpu_cgroup", m.CPU.Cgroup, "cpu_tree", m.CPU.Tree, "errors", m.Report.ErrorSamples)
		return m
	}
	const (
		cloneW = "clone (v2, uncached)"
		lsW    = "ls-remote (v2)"
		pushW  = "push (1 commit)"
	)
	var results []Measurement
	var cloneBase, cloneHTTP, cloneSSH, static, cached, pushBase, pushHTTP, pushSSH Measurement
	var slowOff SlowClone
	var storm Storm
	var off, on ThrottleRun

	// Phase 1, cache off: clones over HTTP from both servers and over SSH
	// from Sluice, ls-remote, the static-file floor and a slow clone.
	// Clones come before pushes, which add branches: every clone must
	// fetch the same content.
	if wantPhase("clone") {
		cloneBase = measure(base, cloneW, duration, CloneOp(baseClient, base.URL(repoURLPath), loadgen.V2))
		cloneHTTP = measure(sl, cloneW, duration, CloneOp(n.http, sl.URL(repoURLPath), loadgen.V2))
		cloneSSH = measure(sl, cloneW, duration, SSHCloneOp(n.ssh, sshPath, loadgen.V2))
		results = append(results, cloneBase, cloneHTTP,
			measure(base, lsW, duration/2, LsRemoteOp(baseClient, base.URL(repoURLPath), loadgen.V2)),
			measure(sl, lsW, duration/2, LsRemoteOp(n.http, sl.URL(repoURLPath), loadgen.V2)))
	}
	if wantPhase("storm") {
		if err := WriteStaticFile(filepath.Join(staticDir, "clone.bin"), cloneBytes); err != nil {
			t.Fatal(err)
		}
		// The storm's cache-off rows are its own runs: every storm row
		// checks packs by fingerprint (StormCloneOp), the clone phase's
		// rows by SHA-1.
		stormBase := measure(base, "clone (v2, storm)", duration, StormCloneOp(baseClient, base.URL(repoURLPath)))
		stormOff := measure(sl, "clone (v2, storm)", duration, StormCloneOp(n.http, sl.URL(repoURLPath)))
		staticClient := NewHTTPClient(workers)
		defer staticClient.CloseIdleConnections()
		static = measure(base, "static file", duration, StaticOp(staticClient, base.URL("/static/clone.bin"), cloneBytes))
		slowOff = n.slowClone(sl, repoURLPath, slowRate)

		// Phase 2, cache on: one slow clone (a miss), then the storm.
		sl = n.start("sluice-cache", map[string]string{"cache.packs": "true", "throttle.rate_limit": "false"}, 0, true)
		slowOn := n.slowClone(sl, repoURLPath, slowRate)
		lookups := n.lookups(sl)
		cached = measure(sl, "clone (v2, cached)", duration, StormCloneOp(n.http, sl.URL(repoURLPath)))
		after := n.lookups(sl)
		storm = Storm{Backend: stormBase, Uncached: stormOff, Cached: cached, Static: static,
			Hits: after["hit"] - lookups["hit"], Coalesced: after["coalesced"] - lookups["coalesced"], Misses: after["miss"] - lookups["miss"],
			SlowOff: slowOff, SlowOn: slowOn, SlowRate: slowRate}
		if len(only) > 0 {
			fmt.Println(StormSection(storm).Markdown())
		}
	}

	// Phase 3, cache off again: pushes.
	if wantPhase("push") {
		sl = n.start("sluice-push", uncachedSettings, 0, true)
		pushBase = measure(base, pushW, duration, PushOp(baseClient, base.URL(repoURLPath), "bench/worker-"))
		pushHTTP = measure(sl, pushW, duration, PushOp(n.http, sl.URL(repoURLPath), "bench/worker-"))
		pushSSH = measure(sl, pushW, duration, SSHPushOp(n.ssh, sshPath, "bench/ssh-worker-"))
		// The main table compares "sluice" with the baseline; the push
		// node is the first node restarted with the same settings.
		pushHTTP.Server = "sluice"
		results = append(results, pushBase, pushHTTP)
	}

	// Phase 4: throttling off, then on, each on a node capped at
	// throttleCores, with the pack cache on for the probe's hits but
	// caching only on second sight, so the storm's distinct requests all
	// run git.
	throttleSettings := func(extra ...string) map[string]string {
		m := map[string]string{"cache.packs": "true", "cache.min_occurrences": "2", "throttle.rate_limit": "false",
			"throttle.cores": fmt.Sprint(throttleCores)}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	var capacity ThrottleCapacity
	var stormRate float64
	if wantPhase("throttle") {
		// The pushes above left loose objects and a housekeeping job due
		// 30 s after them; a repack running during the capacity or storm
		// runs would be charged to them. Housekeep now, node stopped, so
		// the job finds nothing to do.
		n.stop()
		if _, err := scfg.Admin(ctx, "repo", "gc", "BENCH/big"); err != nil {
			t.Fatal(err)
		}
		offSettings := throttleSettings("throttle.strategy", "fixed", "throttle.fixed", "10000")
		capacity = n.throttleCapacity(offSettings, throttleCores, repoURLPath)
		stormRate = envFloat(t, "BENCH_THROTTLE_RATE", capacity.Rate())
		off = n.throttleRun("off (fixed, 10000 tickets)", "sluice-throttle-off", offSettings,
			throttleCores, stormRate, duration, idle, repoURLPath)
		on = n.throttleRun("on (adaptive)", "sluice-throttle-on", throttleSettings("throttle.strategy", "adaptive"),
			throttleCores, stormRate, duration, idle, repoURLPath)
	}
	throttleSec := ThrottleSection(on, off)
	throttleSec.Notes = throttleNotes(capacity, stormRate, throttleCores, duration, idle)
	if len(only) > 0 {
		if wantPhase("throttle") {
			fmt.Println(throttleSec.Markdown())
		}
		for _, m := range append(slices.Clone(results), cloneSSH, pushSSH, static, cached) {
			if m.Report.Ops > 0 {
				t.Logf("%-28s %-36s ops/h %8.0f  p50 %v  p95 %v  cpu/op %v  errors %d", m.Workload, m.Server,
					m.Report.OpsPerHour(), m.Report.Latency.Quantile(0.5), m.Report.Latency.Quantile(0.95), m.CPUPerOp(), m.Report.Errors)
			}
		}
		return
	}

	meter := "a cpuacct cgroup per server (every process, however it exits)"
	cpu, _ := base.CPU()
	if !cpu.HasCgroup {
		meter = "the /proc process tree (utime+stime+cutime+cstime); fcgiwrap's workers ignore SIGCHLD, so the baseline's CGI processes are NOT counted and its CPU is a lower bound"
	}
	machine := DescribeMachine("git", "/usr/sbin/nginx")
	machine.LoadBefore, machine.LoadAfter = loadBefore, LoadAverage()
	sshSec := SSHSection([]Measurement{cloneHTTP, pushHTTP}, []Measurement{cloneSSH, pushSSH}, 1.2)
	sshSec.Notes = []string{
		"SSH: each operation opens its own connection (key exchange, ed25519 public-key authentication) and runs one exec session, as every `git` command over SSH does; HTTP reuses keep-alive connections across operations, so the SSH figures include a handshake per operation that the HTTP ones do not.",
		"Pushes over SSH go to branches of their own (`bench/ssh-worker-N`), created by each worker's first push like the HTTP ones.",
	}
	stormSec := StormSection(storm)
	stormSec.Notes = append(stormSec.Notes,
		fmt.Sprintf("%d workers for %s per row; the static file is %d bytes, a v2 clone's whole response (advertisements and side-band framing included), served by the baseline's nginx with `sendfile on` behind the same `auth_basic`, and checked by the client as the storm's packs are (length and CRC-32C).", workers, duration, cloneBytes),
		"Cache on is a node restarted with `cache.packs=true` (defaults otherwise) on the same data; its first clone (the slow one) filled the cache.",
		"Git process lifetime and memory are sampled every 10 ms from /proc (VmRSS summed over the git processes under sluice, VmHWM per process).")
	res := Results{
		Machine:      machine,
		Command:      "make bench (" + Command + ")",
		Repo:         repoDesc,
		Baseline:     base.Name,
		Sluice:       "sluice",
		Measurements: results,
		Targets: []Target{
			{Workload: cloneW, Metric: "cpu/op", Limit: 1.1},
			{Workload: pushW, Metric: "ops/h", Limit: 0.7},
		},
		Notes: []string{
			fmt.Sprintf("%d concurrent loadgen workers per workload, %s per clone/push run, %s for ls-remote; each server measured alone.", workers, duration, duration/2),
			"Server CPU is measured with " + meter + ", between idle readings.",
			fmt.Sprintf("Baseline: nginx (2 workers, auth_basic) → fcgiwrap (%d children) → git http-backend, repository repacked with `git repack -adf --write-bitmap-index`.", workers),
			"Sluice: pack cache off (`cache.packs=false`), per-user rate limit off (`throttle.rate_limit=false`), other settings default; " + housekeeping + "; clients authenticate with HTTP Basic and a " + authMode + " (`BENCH_AUTH`). Pushes ran on the same node restarted with the same settings, after the cache-on storm.",
			"Pushes: each worker pushes one new commit (blob, tree, commit) per operation to a branch of its own, on top of the tip it reads from the advertisement.",
			"Latencies are of successful operations; the load client shares the machine with the server.",
		},
		Sections: []Section{sshSec, stormSec, throttleSec},
	}
	md := res.Markdown()
	fmt.Println(md)
	if os.Getenv("BENCH_WRITE_DOCS") != "0" {
		if err := WriteResults(filepath.Join(moduleRoot, "docs", "benchmarks.md"), res); err != nil {
			t.Fatal(err)
		}
	}
	all := append(slices.Clone(results), cloneSSH, pushSSH, static, cached)
	for _, m := range all {
		if m.Report.Errors > 0 {
			t.Errorf("%s on %s: %d errors, e.g. %q", m.Workload, m.Server, m.Report.Errors, m.Report.ErrorSamples)
		}
	}
	for _, r := range []ThrottleRun{off, on} {
		if other := r.Storm.Report.Errors - r.QueueTimeouts; other > 0 {
			t.Errorf("throttling %s: %d errors besides queue timeouts, e.g. %q", r.Mode, other, r.Storm.Report.ErrorSamples)
		}
	}
}

// nodes starts and restarts the Sluice node under test on one data
// directory, one configuration at a time, with an HTTP and an SSH client
// for the current one.
type nodes struct {
	t      *testing.T
	ctx    context.Context
	logger *slog.Logger
	cfg    SluiceConfig
	// pass overrides the password (BENCH_AUTH=token).
	pass   string
	cur    *Server
	http   *loadgen.Client
	ssh    *loadgen.SSHClient
	signer ssh.Signer
}

// start stops the current node and starts name with settings, capped at
// cpuLimit cores (0: no cap). restart says the data set already exists.
func (n *nodes) start(name string, settings map[string]string, cpuLimit float64, restart bool) *Server {
	n.t.Helper()
	n.stop()
	port, err := freePort()
	if err != nil {
		n.t.Fatal(err)
	}
	cfg := n.cfg
	cfg.Name, cfg.Settings, cfg.CPULimit, cfg.NoUser = name, settings, cpuLimit, restart
	cfg.SSHAddr = fmt.Sprintf("127.0.0.1:%d", port)
	s, err := StartSluice(n.ctx, cfg, n.logger)
	if err != nil {
		n.t.Fatal(err)
	}
	if n.pass != "" {
		s.pass = n.pass
	}
	n.cur = s
	n.http = loadgen.NewClient(loadgen.Options{MaxConnsPerHost: 64})
	if n.signer != nil {
		n.newSSHClient(cfg.SSHAddr)
	}
	n.cfg.SSHAddr = cfg.SSHAddr
	return s
}

func (n *nodes) stop() {
	if n.cur == nil {
		return
	}
	n.http.CloseIdleConnections()
	if err := n.cur.Stop(); err != nil {
		n.t.Error(err)
	}
	n.cur = nil
}

// addSSHKey registers a fresh ed25519 key for user with `sluice admin
// ssh-key add` and connects the SSH client with it.
func (n *nodes) addSSHKey(user, pubPath string) {
	n.t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		n.t.Fatal(err)
	}
	n.signer, err = ssh.NewSignerFromKey(priv)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, ssh.MarshalAuthorizedKey(n.signer.PublicKey()), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if _, err := n.cfg.Admin(n.ctx, "ssh-key", "add", "--username", user, "--key-file", pubPath); err != nil {
		n.t.Fatal(err)
	}
	n.newSSHClient(n.cfg.SSHAddr)
}

func (n *nodes) newSSHClient(addr string) {
	n.t.Helper()
	// The harness started the server a moment ago on loopback; there is
	// no host key to check it against.
	c, err := loadgen.NewSSHClient(loadgen.SSHOptions{Addr: addr, Signer: n.signer, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		n.t.Fatal(err)
	}
	n.ssh = c
}

// slowClone clones once through a reader limited to rate bytes per second
// and watches the git processes under the node meanwhile.
func (n *nodes) slowClone(s *Server, path string, rate int64) SlowClone {
	c := loadgen.NewClient(loadgen.Options{Transport: NewSlowTransport(rate)})
	defer c.CloseIdleConnections()
	time.Sleep(settle)
	stop := WatchGit(s.Pid(), 10*time.Millisecond)
	t0 := time.Now()
	res, err := c.Clone(n.ctx, s.URL(path), loadgen.CloneOptions{Protocol: loadgen.V2})
	took := time.Since(t0)
	// Processes still alive now would be a leak worth seeing; give them a
	// moment to be reaped.
	time.Sleep(200 * time.Millisecond)
	sc := SlowClone{Took: took, Err: err, Git: stop()}
	n.logger.Info("slow clone", "server", s.Name, "took", took, "bytes", res.Bytes, "err", err, "git", fmt.Sprintf("%+v", sc.Git))
	return sc
}

// lookups reads the pack cache's lookup counters by result.
func (n *nodes) lookups(s *Server) map[string]float64 {
	c := NewHTTPClient(1)
	defer c.CloseIdleConnections()
	text, err := s.Metrics(n.ctx, c)
	if err != nil {
		n.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, r := range []string{"hit", "miss", "coalesced"} {
		out[r], _ = MetricSum(text, "sluice_packcache_lookups_total", map[string]string{"kind": "packs", "result": r})
	}
	return out
}

// throttleRun starts a node with settings and measures a storm of
// distinct uncached clones against it with the probe running, idle first.
func (n *nodes) throttleRun(mode, name string, settings map[string]string, cores, rate float64, d, idle time.Duration, path string) ThrottleRun {
	n.t.Helper()
	s := n.start(name, settings, cores, true)
	r := ThrottleRun{Mode: mode}
	url := s.URL(path)
	probe := loadgen.NewClient(loadgen.Options{MaxConnsPerHost: 2})
	defer probe.CloseIdleConnections()
	rest := NewHTTPClient(2)
	defer rest.CloseIdleConnections()
	// Seen twice, the full clone is cached (min_occurrences=2), and the
	// probe's clones are hits from then on.
	for range 3 {
		if _, err := probe.Clone(n.ctx, url, loadgen.CloneOptions{Protocol: loadgen.V2}); err != nil {
			n.t.Fatalf("%s: warm-up clone: %v", name, err)
		}
	}
	refs, err := n.http.LsRemote(n.ctx, url, loadgen.V2)
	if err != nil {
		n.t.Fatal(err)
	}
	restOp := func(ctx context.Context) error { return s.Get(ctx, rest, "/rest/api/1.0/projects/BENCH/repos/big") }
	hitOp := func(ctx context.Context) error {
		_, err := probe.Clone(ctx, url, loadgen.CloneOptions{Protocol: loadgen.V2})
		return err
	}
	probes := func(ctx context.Context) (restH, hitH *loadgen.Histogram, errs int64) {
		var wg sync.WaitGroup
		var e1, e2 int64
		wg.Go(func() { restH, e1 = Probe(ctx, 100*time.Millisecond, restOp) })
		wg.Go(func() { hitH, e2 = Probe(ctx, 200*time.Millisecond, hitOp) })
		wg.Wait()
		return restH, hitH, e1 + e2
	}
	ictx, cancel := context.WithTimeout(n.ctx, idle)
	r.IdleREST, r.IdleHit, _ = probes(ictx)
	cancel()

	sctx, stopProbes := context.WithCancel(n.ctx)
	var wg sync.WaitGroup
	var restH, hitH *loadgen.Histogram
	var perr int64
	wg.Go(func() { restH, hitH, perr = probes(sctx) })
	metrics := NewHTTPClient(1)
	defer metrics.CloseIdleConnections()
	stopUtil := UtilSampler(s, metrics, cores, 2*time.Second)
	periods0, throttled0, cfsOK := cfsStat(s)
	var ec errorCounter
	m, err := Measure(n.ctx, s, "clone storm (distinct, uncached)",
		loadgen.Spec{Name: name, Rate: rate, Duration: d, CutOff: true, MaxInFlight: stormMaxInFlight,
			Op: ec.wrap(DistinctCloneOp(n.http, url, refs))})
	util, metric := stopUtil()
	if periods1, throttled1, ok := cfsStat(s); ok && cfsOK && periods1 > periods0 {
		r.Throttled = float64(throttled1-throttled0) / float64(periods1-periods0)
		r.HasThrottled = true
	}
	stopProbes()
	wg.Wait()
	if err != nil {
		n.t.Fatal(err)
	}
	// The first two intervals are the ramp-up from idle.
	r.Storm, r.REST, r.Hit, r.ProbeErrors = m, restH, hitH, perr
	r.Util, r.Metric = util[min(2, len(util)):], metric[min(2, len(metric)):]
	r.QueueTimeouts = ec.refusals.Load()
	n.logger.Info("throttle run", "mode", mode, "report", m.Report.String(), "errors", m.Report.ErrorSamples,
		"idle_rest_p95", r.IdleREST.Quantile(0.95), "rest_p95", restH.Quantile(0.95),
		"idle_hit_p95", r.IdleHit.Quantile(0.95), "hit_p95", hitH.Quantile(0.95), "probe_errors", perr,
		"util", fmt.Sprintf("%.2f", util), "metric", fmt.Sprintf("%.2f", metric))
	return r
}

// errorCounter counts the documented refusals among an Op's errors; the
// run's report has the total.
type errorCounter struct {
	refusals atomic.Int64
}

// wrap counts op's documented refusals.
func (c *errorCounter) wrap(op loadgen.Op) loadgen.Op {
	return func(ctx context.Context, w int) (int64, error) {
		n, err := op(ctx, w)
		var rerr *loadgen.RemoteError
		var herr *loadgen.HTTPError
		if err != nil && (errors.As(err, &rerr) || errors.As(err, &herr)) && IsQueueRefusal(err.Error()) {
			c.refusals.Add(1)
		}
		return n, err
	}
}

// throttleCapacity measures one worker cloning distinct requests, alone,
// on a node capped like the storm's.
func (n *nodes) throttleCapacity(settings map[string]string, cores float64, path string) ThrottleCapacity {
	n.t.Helper()
	s := n.start("sluice-throttle-capacity", settings, cores, true)
	refs, err := n.http.LsRemote(n.ctx, s.URL(path), loadgen.V2)
	if err != nil {
		n.t.Fatal(err)
	}
	op := DistinctCloneOp(n.http, s.URL(path), refs)
	// Two clones warm the page cache and the connection first.
	for w := range 2 {
		if _, err := op(n.ctx, w); err != nil {
			n.t.Fatal(err)
		}
	}
	m, err := Measure(n.ctx, s, "clone (distinct, uncached, alone)",
		loadgen.Spec{Name: "capacity", Workers: 1, Duration: capacityRun, Op: op})
	if err != nil {
		n.t.Fatal(err)
	}
	if m.Report.Ops == 0 || m.Report.Errors > 0 {
		n.t.Fatalf("capacity run: %s, e.g. %q", m.Report.String(), m.Report.ErrorSamples)
	}
	c := ThrottleCapacity{Cores: cores, Busy: m.CPU.Best().Seconds() / m.Report.Elapsed.Seconds(), PerClone: m.CPUPerOp(), Clones: m.Report.Ops}
	n.logger.Info("throttle capacity", "report", m.Report.String(), "busy_cores", fmt.Sprintf("%.2f", c.Busy),
		"cpu_per_clone", c.PerClone, "served_per_s", fmt.Sprintf("%.2f", c.Served()), "storm_rate", fmt.Sprintf("%.2f", c.Rate()))
	return c
}

// capacityRun is how long throttleCapacity measures: some dozens of
// clones of the generated repository.
const capacityRun = 10 * time.Second

// stormMaxInFlight bounds the storm's clones in flight, a guard for the
// shared machine's memory (each uncached clone in flight on a node
// without throttling is an upload-pack and a pack-objects).
const stormMaxInFlight = 600

// throttleNotes describe the throttling section's method.
func throttleNotes(c ThrottleCapacity, rate, cores float64, d, idle time.Duration) []string {
	storm := fmt.Sprintf("Storm: open loop, %.1f clones a second for %s whatever the node answers (CI agents do not wait for each other), each cloning every branch and all tags but a pair that differs on every clone, so no two requests are alike; `cache.min_occurrences=2` keeps them out of the cache. At %s the clones still running are cut off and counted apart: clones/hour is what completed within the window, for both nodes alike. At most %d clones are in flight (a guard for the machine's memory; an arrival beyond it is not sent and would show as offered minus clones, cut off and errors).",
		rate, d, d, stormMaxInFlight)
	if c.Clones > 0 {
		storm += fmt.Sprintf(" The rate is twice what the CPU can serve: one such clone at a time, on a node capped the same way (%d clones in %s), cost %s of CPU each, so %g core(s) serve %.1f a second (`BENCH_THROTTLE_RATE` overrides).",
			c.Clones, capacityRun, ms3(c.PerClone), cores, c.Served())
	}
	return []string{
		fmt.Sprintf("Each node is capped at %g core(s) by CFS bandwidth control and told so (`throttle.cores=%g`), so that it is saturated whatever else the machine runs and the load client and probe keep the other core(s). Utilisation is the node's cgroup CPU over 2 s intervals divided by its cores; the first two intervals (ramp-up) are left out. The controller's own reading (`sluice_throttle_cpu_utilization_ratio`, scraped at the same times) is shown alongside. CPU per clone is the node's CPU during the storm (the probe's requests included) over the clones completed.", cores, cores),
		storm,
		fmt.Sprintf("Probe: one client, separate connections; a REST GET (`/rest/api/1.0/projects/BENCH/repos/big`) every 100 ms and a full clone answered from the cache (the same request seen twice before) every 200 ms, for %s with the node idle, then throughout the storm.", idle),
		"Rate limiting is off on these nodes (`throttle.rate_limit=false`): one user runs the storm and the probe, and a per-user bucket would refuse the storm instead of queueing it. “Off” is the fixed strategy with 10000 tickets and no git cgroup; “on” is the default adaptive strategy, whose git cgroup (`throttle.git_cgroup`) sits under the node's capped cgroup. Queue wait and length are the defaults (5 min, 1000).",
		"The push phase's objects are housekept (`sluice admin repo gc`, node stopped) before this phase, so no repack runs during the capacity or storm runs.",
	}
}

// cfsStat reads the CFS bandwidth statistics of the node's capped cgroup:
// periods with runnable tasks, and those in which the quota ran out and
// every process of the node waited for the next period.
func cfsStat(s *Server) (periods, throttled int64, ok bool) {
	for _, p := range s.procs {
		if p.cg == nil {
			continue
		}
		for _, dir := range append([]string{p.cg.dir}, p.cg.extra...) {
			b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
			if err != nil {
				continue
			}
			var gotP, gotT bool
			for line := range strings.SplitSeq(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) != 2 {
					continue
				}
				v, err := strconv.ParseInt(f[1], 10, 64)
				switch {
				case err != nil:
				case f[0] == "nr_periods":
					periods, gotP = v, true
				case f[0] == "nr_throttled":
					throttled, gotT = v, true
				}
			}
			if gotP && gotT {
				return periods, throttled, true
			}
		}
	}
	return 0, 0, false
}
