package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
