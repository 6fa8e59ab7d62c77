package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestCPUGroup(t *testing.T) {
	if err := checkWritable(); err != nil {
		t.Skipf("no writable cgroup cpu hierarchy here: %v", err)
	}
	g, err := NewCPUGroup("test-"+strings.ToLower(t.Name()), 0.5)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(g.Path); !os.IsNotExist(err) {
			t.Errorf("cgroup %s still exists after Close: %v", g.Path, err)
		}
	}()
	quotaFile, want := "cpu.cfs_quota_us", "50000"
	if g.Version() == 2 {
		quotaFile, want = "cpu.max", "50000 100000"
	}
	b, err := os.ReadFile(filepath.Join(g.Path, quotaFile))
	if err != nil || strings.TrimSpace(string(b)) != want {
		t.Fatalf("%s = %q, %v; want %q", quotaFile, b, err, want)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := g.Pids()
	if err != nil || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("Pids = %v, %v; want %d in it", pids, err, cmd.Process.Pid)
	}
	if _, err := g.ThrottledTime(); err != nil {
		t.Fatal(err)
	}
}

// TestCPUGroupCloseChildren: a node killed before it removed its git
// cgroup leaves a child group, with a process in it; Close removes both
// groups and the process survives in the parent.
func TestCPUGroupCloseChildren(t *testing.T) {
	if err := checkWritable(); err != nil {
		t.Skipf("no writable cgroup cpu hierarchy here: %v", err)
	}
	g, err := NewCPUGroup("test-children-"+strconv.Itoa(os.Getpid()), 1)
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(g.Path, "git-1-1")
	if err := os.Mkdir(child, 0o755); err != nil {
		g.Close()
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{child, g.Path} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still exists: %v", d, err)
		}
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process in the child group is gone: %v", err)
	}
}

func TestCPUGroupInvalid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cores float64
	}{{"../escape", 1}, {"", 1}, {"a/b", 1}, {"ok", 0}, {"ok", -1}} {
		if _, err := NewCPUGroup(tc.name, tc.cores); err == nil {
			t.Errorf("NewCPUGroup(%q, %v) succeeded", tc.name, tc.cores)
		}
	}
}

func checkWritable() error {
	dir, err := os.MkdirTemp(CgroupV1CPURoot, "sluice-probe-")
	if err != nil {
		return err
	}
	return os.Remove(dir)
}
