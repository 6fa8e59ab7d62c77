package throttle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-scm/sluice/internal/cluster"
)

// fakeCgroupTree points detection at a temporary tree in which this
// process's v1 cpu cgroup is /node1 (or "/" when root is true).
func fakeCgroupTree(t *testing.T, atRoot bool) string {
	t.Helper()
	root := t.TempDir()
	t.Cleanup(func(p, c string) func() { return func() { procRoot, cgroupRoot = p, c } }(procRoot, cgroupRoot))
	procRoot, cgroupRoot = filepath.Join(root, "proc"), filepath.Join(root, "cg")
	own := "/node1"
	if atRoot {
		own = "/"
	}
	node := filepath.Join(cgroupRoot, "cpu", own)
	for _, d := range []string{filepath.Join(procRoot, "self"), node} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(procRoot, "self", "cgroup"), "5:memory:/m\n4:cpu:"+own+"\n2:cpuacct:/a\n0::/\n")
	write(t, filepath.Join(node, "cpu.cfs_quota_us"), "-1")
	return node
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestGitGroupWrites(t *testing.T) {
	node := fakeCgroupTree(t, false)
	// A crashed node's empty group is removed; a live process's is not.
	for _, d := range []string{"git-999999999-1", "git-1-1"} {
		if err := os.Mkdir(filepath.Join(node, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g, err := OpenGitGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := g.Dir()
	if filepath.Dir(dir) != node || !strings.HasPrefix(filepath.Base(dir), "git-"+strconv.Itoa(os.Getpid())+"-") {
		t.Fatalf("Dir = %s, want %s/git-%d-N", dir, node, os.Getpid())
	}
	// A second node in the same process gets a group of its own.
	g2, err := OpenGitGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Dir() == dir {
		t.Fatalf("two nodes share %s", dir)
	}
	for file, want := range map[string]string{"cpu.shares": "256", "cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "-1"} {
		if got := readTrim(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	for _, tt := range []struct {
		share     float64
		quota     string
		wantShare float64
	}{
		{0.5, "10000", 0.5},    // half of two cores
		{0.2, "4000", 0.2},     // the controller's floor
		{0.001, "1000", 0.001}, // never below the kernel's minimum
		{1.3, "-1", 1},
		{0.75, "15000", 0.75},
		{1, "-1", 1},
	} {
		if err := g.SetShare(tt.share); err != nil {
			t.Fatal(err)
		}
		if got := readTrim(t, filepath.Join(dir, "cpu.cfs_quota_us")); got != tt.quota || g.Share() != tt.wantShare {
			t.Errorf("SetShare(%v): quota %q share %v, want %q %v", tt.share, got, g.Share(), tt.quota, tt.wantShare)
		}
	}
	if _, err := os.Stat(filepath.Join(node, "git-999999999-1")); !os.IsNotExist(err) {
		t.Errorf("stale group of a dead pid not removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(node, "git-1-1")); err != nil {
		t.Errorf("group of a live pid removed: %v", err)
	}
	if err := g.Add(4242); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(dir, "cgroup.procs")); got != "4242" {
		t.Errorf("cgroup.procs = %q", got)
	}
}

func TestGitGroupNeedsOwnCgroup(t *testing.T) {
	fakeCgroupTree(t, true)
	if g, err := OpenGitGroup(1); err == nil {
		t.Fatalf("OpenGitGroup in the root cgroup = %s, want an error", g.Dir())
	}
}

// TestGitGroupReal runs against the kernel: a real node cgroup, a real
// process moved into the git group, a real quota, and a clean removal.
func TestGitGroupReal(t *testing.T) {
	parent, err := cluster.NewCPUGroup("test-gitgroup-"+strconv.Itoa(os.Getpid()), 1)
	if err != nil || parent.Version() != 1 {
		t.Skipf("no writable cgroup v1 cpu hierarchy here: %v", err)
	}
	defer parent.Close()
	// This test process stays where it is; detection is pointed at the
	// parent through a fake /proc/self/cgroup.
	root := t.TempDir()
	defer func(p string) { procRoot = p }(procRoot)
	procRoot = root
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "self", "cgroup"), "1:cpu:/"+filepath.Base(parent.Path)+"\n")
	old := cgroupRoot
	defer func() { cgroupRoot = old }()
	cgroupRoot = filepath.Dir(filepath.Dir(parent.Path)) // parent.Path is <root>/cpu/<name>

	g, err := OpenGitGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	cg := readTrim(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/cgroup")
	want := "/" + filepath.Base(parent.Path) + "/" + filepath.Base(g.Dir())
	if !strings.Contains(cg, "cpu:"+want+"\n") && !strings.HasSuffix(cg, "cpu:"+want) {
		t.Fatalf("process cgroups %q, want cpu:%s", cg, want)
	}
	if err := g.SetShare(0.3); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(g.Dir(), "cpu.cfs_quota_us")); got != "3000" {
		t.Errorf("quota %s, want 3000", got)
	}
	// A process that has exited is not an error.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(done.Process.Pid); err != nil {
		t.Errorf("Add(exited) = %v", err)
	}
	// Close moves the sleeper back to the node and removes the group.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Dir()); !os.IsNotExist(err) {
		t.Errorf("git group still exists: %v", err)
	}
	if cg := readTrim(t, "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/cgroup"); !strings.Contains(cg, "cpu:/"+filepath.Base(parent.Path)) {
		t.Errorf("after Close the process is in %q", cg)
	}
}

// TestThrottleDrivesGitGroup: an adaptive throttle given a git group caps
// it when one ticket alone holds CPU above the band, and says so in its
// state and metric; the cap comes off when the load does.
func TestThrottleDrivesGitGroup(t *testing.T) {
	fakeCgroupTree(t, false)
	g, err := OpenGitGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	cpu := &fakeCPU{}
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	cfg := testConfig()
	reg := prometheus.NewRegistry()
	th := newThrottle(t, cfg, newFakeStore(), Options{Registerer: reg, Now: clk.now, GitGroup: g,
		Sources: &Sources{CPU: cpu, Cores: 1}})
	share := func() float64 {
		t.Helper()
		v := testutil.ToFloat64(th.m.gitShare)
		if st := th.State().Controller; st == nil || st.GitCgroup != g.Dir() || st.GitCPUShare != round2(v) {
			t.Fatalf("controller state %+v, metric %v", st, v)
		}
		return v
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_throttle_git_cpu_share"); err != nil || n != 1 || share() != 1 {
		t.Fatalf("git share metric: %d gathered, %v, value %v", n, err, share())
	}
	tick := func(util float64) {
		clk.add(2 * time.Second)
		cpu.used += time.Duration(util * float64(2*time.Second))
		th.Tick()
	}
	th.Tick() // primes
	if s := share(); s != 1 {
		t.Fatalf("share %v after the priming tick, want 1", s)
	}
	// Two tickets at first (2 per core): the ticket law halves to the
	// floor of one, then the share takes over.
	tick(1)
	if l := th.State().Limit; l != 1 || share() != 1 {
		t.Fatalf("limit %d share %v, want the ticket floor first", l, share())
	}
	tick(1)
	if s := share(); s != 0.75 {
		t.Fatalf("share %v, want the target 0.75 on entering", s)
	}
	quota := readTrim(t, filepath.Join(g.Dir(), "cpu.cfs_quota_us"))
	if quota != "7500" {
		t.Errorf("quota %s, want 7500 (0.75 of one core per 10 ms)", quota)
	}
	tick(0.95)
	if s := share(); s >= 0.75 {
		t.Errorf("share %v after 95%% cpu, want lower", s)
	}
	// The storm ends: the share returns to 1 and the quota is lifted.
	for range 4 {
		tick(0.05)
	}
	if s := share(); s != 1 || readTrim(t, filepath.Join(g.Dir(), "cpu.cfs_quota_us")) != "-1" {
		t.Errorf("share %v quota %s after the storm, want uncapped", s, readTrim(t, filepath.Join(g.Dir(), "cpu.cfs_quota_us")))
	}
}
