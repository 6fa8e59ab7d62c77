package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want procStat
	}{
		{
			name: "plain",
			stat: "42 (git) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 1 0 100 0 0",
			want: procStat{pid: 42, ppid: 7, self: 2 * time.Second, reaped: 500 * time.Millisecond},
		},
		{
			name: "command with spaces and parentheses",
			stat: "43 (a (b) c) R 1 43 43 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 100 0 0",
			want: procStat{pid: 43, ppid: 1, self: 30 * time.Millisecond, reaped: 70 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		got, err := parseProcStat(tt.want.pid, []byte(tt.stat))
		if err != nil || got != tt.want {
			t.Errorf("%s: got %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	if _, err := parseProcStat(1, []byte("1 (x) S 0")); err == nil {
		t.Error("short stat parsed")
	}
}

// burn is a shell loop that costs some CPU in a process of its own.
const burn = `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`

// TestTreeCPUCountsExitedDescendants is the property the harness relies
// on: a grandchild that ran and exited before the reading is still counted,
// through its parent's cumulative children times.
func TestTreeCPUCountsExitedDescendants(t *testing.T) {
	// The child starts a grandchild that burns CPU and exits, then
	// signals it is done and waits to be killed.
	cmd := exec.Command("/bin/sh", "-c", "/bin/sh -c '"+burn+"'; echo done; exec sleep 60")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(stdout, buf); err != nil {
		t.Fatal(err)
	}
	got, err := TreeCPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The loop takes well over 50 ms of CPU on any machine; what matters
	// is that it is not zero, which is what counting only live processes
	// would give.
	if got < 50*time.Millisecond {
		t.Errorf("tree CPU = %s, want the exited grandchild's time", got)
	}
	if _, err := TreeCPU(1 << 30); err == nil {
		t.Error("missing process measured")
	}
}

// TestCgroupCountsAutoReaped checks the cgroup meter charges a process
// whose parent ignores SIGCHLD, the case the process-tree meter misses.
func TestCgroupCountsAutoReaped(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	p, err := startProc("burn", []string{"/bin/sh", "-c", "trap '' CHLD; /bin/sh -c '" + burn + "'; exec sleep 60"}, nil, filepath.Join(dir, "log"), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if p.cg == nil {
		t.Skip("cgroups not writable here")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, err := p.cg.usage()
		if err != nil {
			t.Fatal(err)
		}
		if u >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup usage %s after 20s", u)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestReplaceBetweenMarkers(t *testing.T) {
	doc := "# Title\n\n" + BeginMarker + "\nold\n" + EndMarker + "\ntrailer\n"
	got, err := ReplaceBetweenMarkers(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\n" + BeginMarker + "\nnew table\n" + EndMarker + "\ntrailer\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := ReplaceBetweenMarkers("no markers", "x"); err == nil {
		t.Error("missing markers accepted")
	}
	if _, err := ReplaceBetweenMarkers(EndMarker+BeginMarker, "x"); err == nil {
		t.Error("reversed markers accepted")
	}
}

func TestMarkdownRatios(t *testing.T) {
	rep := func(ops int64, elapsed time.Duration) loadgen.Report {
		h := loadgen.NewHistogram()
		for range ops {
			h.Record(100 * time.Millisecond)
		}
		return loadgen.Report{Workers: 2, Ops: ops, Elapsed: elapsed, Latency: h}
	}
	r := Results{
		Baseline: "base", Sluice: "sluice", Command: "make bench",
		Measurements: []Measurement{
			{Server: "base", Workload: "clone", Report: rep(10, time.Minute), CPU: CPU{Tree: 10 * time.Second}},
			{Server: "sluice", Workload: "clone", Report: rep(10, time.Minute), CPU: CPU{Tree: 12 * time.Second, Cgroup: 11 * time.Second, HasCgroup: true}},
			{Server: "base", Workload: "push", Report: rep(100, time.Minute)},
			{Server: "sluice", Workload: "push", Report: rep(60, time.Minute)},
		},
		Targets: []Target{{"clone", "cpu/op", 1.1}, {"push", "ops/h", 0.7}},
	}
	md := r.Markdown()
	for _, want := range []string{
		"| clone | sluice | 2 | 10 | 0 | 600 | 100 ms | 100 ms | 100 ms | 1100 ms | 1.10× |",
		"- clone cpu/op: 1.10× (target ≤ 1.1×) — met",
		"- push ops/h: 0.60× (target ≥ 0.7×) — **missed**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestGenerateRepo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r.git")
	spec := RepoSpec{Commits: 210, Files: 10, Seed: 7}
	if err := GenerateRepo(context.Background(), "git", dir, spec); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", dir, "for-each-ref", "--format=%(refname)").Output()
	if err != nil {
		t.Fatal(err)
	}
	refs := strings.Fields(string(out))
	// main, tags v1.0..v4.0, topic/200.
	if len(refs) != 6 {
		t.Errorf("refs = %q", refs)
	}
	if n, _ := exec.Command("git", "-C", dir, "rev-list", "--count", "main").Output(); strings.TrimSpace(string(n)) != "210" {
		t.Errorf("main has %s commits", n)
	}
	bitmaps, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.bitmap"))
	if len(bitmaps) != 1 {
		t.Errorf("bitmaps: %q", bitmaps)
	}
	// Deterministic: the same spec gives the same history.
	dir2 := filepath.Join(t.TempDir(), "r2.git")
	if err := GenerateRepo(context.Background(), "git", dir2, spec); err != nil {
		t.Fatal(err)
	}
	a, _ := exec.Command("git", "-C", dir, "rev-parse", "main").Output()
	b, _ := exec.Command("git", "-C", dir2, "rev-parse", "main").Output()
	if string(a) != string(b) {
		t.Errorf("main differs between runs: %s vs %s", a, b)
	}
}

// TestBaseline starts the real nginx + fcgiwrap + http-backend and drives
// each workload once through it.
func TestBaseline(t *testing.T) {
	for _, bin := range []string{"/usr/sbin/nginx", "/usr/sbin/fcgiwrap"} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := t.TempDir()
	repo := filepath.Join(root, "repos", "bench", "r.git")
	if err := GenerateRepo(ctx, "git", repo, RepoSpec{Commits: 60, Files: 10, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := StartBaseline(ctx, BaselineConfig{Dir: filepath.Join(root, "nginx"), ProjectRoot: filepath.Join(root, "repos"), User: "bench", Password: "pw"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := loadgen.NewClient(loadgen.Options{})
	defer c.CloseIdleConnections()
	url := srv.URL("/scm/bench/r.git")

	// Wrong credentials are refused by nginx.
	if _, err := c.LsRemote(ctx, strings.Replace(url, ":pw@", ":nope@", 1), loadgen.V2); err == nil {
		t.Error("wrong password accepted")
	}
	for _, w := range []struct {
		name string
		op   loadgen.Op
	}{
		{"clone v2", CloneOp(c, url, loadgen.V2)},
		{"clone v0", CloneOp(c, url, loadgen.V0)},
		{"ls-remote", LsRemoteOp(c, url, loadgen.V2)},
		{"push", PushOp(c, url, "bench/w")},
	} {
		m, err := Measure(ctx, srv, w.name, loadgen.Spec{Workers: 2, MaxOps: 2, Op: w.op})
		if err != nil {
			t.Fatal(err)
		}
		if m.Report.Ops != 2 || m.Report.Errors != 0 {
			t.Fatalf("%s: %d ops, errors %q", w.name, m.Report.Ops, m.Report.ErrorSamples)
		}
		// Every operation forks http-backend and git under fcgiwrap,
		// whose workers ignore SIGCHLD, so those processes never reach
		// a cutime: only the cgroup meter sees them.
		if m.CPU.HasCgroup && m.CPU.Cgroup <= 0 {
			t.Errorf("%s: no server CPU measured: %+v", w.name, m.CPU)
		}
		t.Logf("%s: cpu %+v", w.name, m.CPU)
	}
	out, err := exec.Command("git", "-C", repo, "fsck", "--strict", "--no-dangling").CombinedOutput()
	if err != nil {
		t.Fatalf("fsck after pushes: %v: %s", err, out)
	}
}
