package testbed

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluice-scm/sluice/internal/cluster"
)

// OwnCgroup moves this test process into a fresh, uncapped cgroup of its
// own in the cgroup v1 cpu hierarchy until the test ends, so that a node
// started in-process meanwhile has a cgroup of its own (and its git cgroup
// goes inside it). It returns the cgroup's directory, and skips the test
// where no such hierarchy is writable (not root, or cgroup v2 only).
func OwnCgroup(t testing.TB, name string) string {
	t.Helper()
	g, err := cluster.NewCPUGroup(name+"-"+strconv.Itoa(os.Getpid()), float64(runtime.NumCPU()))
	if err != nil {
		t.Skipf("no writable cgroup v1 cpu hierarchy here: %v", err)
	}
	if g.Version() != 1 {
		g.Close()
		t.Skip("no cgroup v1 cpu hierarchy here")
	}
	if err := g.Add(os.Getpid()); err != nil {
		g.Close()
		t.Fatal(err)
	}
	// Registered first, so it runs after the cleanups of the nodes the
	// test starts in the group.
	t.Cleanup(func() {
		root := filepath.Join(filepath.Dir(g.Path), "cgroup.procs")
		if err := os.WriteFile(root, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			t.Error(err)
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g.Path
}
