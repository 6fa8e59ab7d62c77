//go:build bench

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// Command is how `make bench` runs this; it is written into the report.
const Command = "go test -tags bench -run TestBench -timeout 30m -v ./internal/bench"

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
// and writes the table into docs/benchmarks.md.
func TestBench(t *testing.T) {
	duration := envDuration(t, "BENCH_DURATION", 30*time.Second)
	workers := envInt(t, "BENCH_WORKERS", 16)
	spec := DefaultRepoSpec
	spec.Commits = envInt(t, "BENCH_COMMITS", spec.Commits)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "bench")
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
		run(ctx, t, moduleRoot, "go", "build", "-o", binary, "./cmd/sluice")
	}
	sluiceSettings := map[string]string{"cache.packs": "false", "throttle.rate_limit": "false"}
	scfg := SluiceConfig{Binary: binary, Dir: filepath.Join(work, "sluice-data"), User: user, Password: password, Settings: sluiceSettings}
	sl, err := StartSluice(ctx, scfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Stop()
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
		sl.pass = strings.TrimSpace(out)
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
	run(ctx, t, repoPath, "git", "push", "--quiet", sl.URL(repoURLPath), "refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*")
	// A push leaves one pack without a bitmap; housekeeping gives Sluice
	// the layout the baseline repository has.
	housekeeping := "`sluice admin repo gc` after the import"
	if _, err := scfg.Admin(ctx, "repo", "gc", "BENCH/big"); err != nil {
		logger.Warn("housekeeping failed; sluice serves the pushed pack without a bitmap", "err", err)
		housekeeping = "no housekeeping (`sluice admin repo gc` failed): Sluice served the pushed pack without a bitmap"
	}

	base, err := StartBaseline(ctx, BaselineConfig{Dir: filepath.Join(work, "nginx"), ProjectRoot: filepath.Join(work, "repos"), User: user, Password: password, FcgiChildren: workers}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Stop()

	servers := []*Server{base, sl}
	clients := map[*Server]*loadgen.Client{}
	for _, s := range servers {
		c := loadgen.NewClient(loadgen.Options{MaxConnsPerHost: workers})
		defer c.CloseIdleConnections()
		clients[s] = c
	}
	// Both must serve the same refs and the same objects, or the
	// comparison is meaningless; the clone doubles as a warm-up.
	var want []loadgen.Ref
	for i, s := range servers {
		url := s.URL(repoURLPath)
		got, err := clients[s].LsRemote(ctx, url, loadgen.V2)
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
		res, err := clients[s].Clone(ctx, url, loadgen.CloneOptions{Protocol: loadgen.V2})
		if err != nil {
			t.Fatalf("%s: warm-up clone: %v", s.Name, err)
		}
		if int(res.Objects) != nobj {
			t.Fatalf("%s: clone has %d objects, repository %d", s.Name, res.Objects, nobj)
		}
	}

	// Clones first, pushes last: pushes add branches, and every clone
	// must fetch the same content from both servers.
	workloads := []struct {
		name     string
		op       func(c *loadgen.Client, url string) loadgen.Op
		duration time.Duration
	}{
		{"clone (v2, uncached)", func(c *loadgen.Client, url string) loadgen.Op { return CloneOp(c, url, loadgen.V2) }, duration},
		{"ls-remote (v2)", func(c *loadgen.Client, url string) loadgen.Op { return LsRemoteOp(c, url, loadgen.V2) }, duration / 2},
		{"push (1 commit)", func(c *loadgen.Client, url string) loadgen.Op { return PushOp(c, url, "bench/worker-") }, duration},
	}
	var results []Measurement
	for _, w := range workloads {
		for _, s := range servers {
			m, err := Measure(ctx, s, w.name, loadgen.Spec{Name: w.name, Workers: workers, Duration: w.duration, Op: w.op(clients[s], s.URL(repoURLPath))})
			if err != nil {
				t.Fatal(err)
			}
			logger.Info("measured", "server", s.Name, "report", m.Report.String(), "cpu_per_op", m.CPUPerOp(),
				"cpu_cgroup", m.CPU.Cgroup, "cpu_tree", m.CPU.Tree, "errors", m.Report.ErrorSamples)
			results = append(results, m)
		}
	}

	meter := "a cpuacct cgroup per server (every process, however it exits)"
	cpu, _ := base.CPU()
	if !cpu.HasCgroup {
		meter = "the /proc process tree (utime+stime+cutime+cstime); fcgiwrap's workers ignore SIGCHLD, so the baseline's CGI processes are NOT counted and its CPU is a lower bound"
	}
	res := Results{
		Machine:      DescribeMachine("git", "/usr/sbin/nginx"),
		Command:      "make bench (" + Command + ")",
		Repo:         repoDesc,
		Baseline:     base.Name,
		Sluice:       sl.Name,
		Measurements: results,
		Targets: []Target{
			{Workload: "clone (v2, uncached)", Metric: "cpu/op", Limit: 1.1},
			{Workload: "push (1 commit)", Metric: "ops/h", Limit: 0.7},
		},
		Notes: []string{
			fmt.Sprintf("%d concurrent loadgen workers per workload, %s per clone/push run, %s for ls-remote; each server measured alone.", workers, duration, duration/2),
			"Server CPU is measured with " + meter + ", between idle readings.",
			fmt.Sprintf("Baseline: nginx (2 workers, auth_basic) → fcgiwrap (%d children) → git http-backend, repository repacked with `git repack -adf --write-bitmap-index`.", workers),
			"Sluice: pack cache off (`cache.packs=false`), per-user rate limit off (`throttle.rate_limit=false`), other settings default; " + housekeeping + "; clients authenticate with HTTP Basic and a " + authMode + " (`BENCH_AUTH`).",
			"Pushes: each worker pushes one new commit (blob, tree, commit) per operation to a branch of its own, on top of the tip it reads from the advertisement.",
			"Latencies are of successful operations; the load client shares the machine with the server.",
		},
	}
	md := res.Markdown()
	fmt.Println(md)
	if os.Getenv("BENCH_WRITE_DOCS") != "0" {
		if err := WriteResults(filepath.Join(moduleRoot, "docs", "benchmarks.md"), res); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range results {
		if m.Report.Errors > 0 {
			t.Errorf("%s on %s: %d errors, e.g. %q", m.Workload, m.Server, m.Report.Errors, m.Report.ErrorSamples)
		}
	}
}
