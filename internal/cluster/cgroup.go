package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// CPU caps for measurements: each node of a benchmark cluster runs in a
// cgroup of its own with a CPU quota, so that "n nodes" means n times the
// capacity even on one machine. cgroup v2 (cpu.max) is used where the
// unified hierarchy has the cpu controller, else v1 (cpu.cfs_quota_us under
// the cpu hierarchy), which is what these machines offer.

// CgroupRoot* are where the hierarchies are mounted.
var (
	CgroupV1CPURoot = "/sys/fs/cgroup/cpu"
	CgroupV2Root    = "/sys/fs/cgroup"
)

// cfsPeriod is the CFS period the quota is expressed against: the kernel's
// default of 100 ms.
const cfsPeriod = 100_000 // µs

// CPUGroup is a cgroup with a CPU quota.
type CPUGroup struct {
	Path string // the cgroup's directory
	v2   bool
}

var cgroupName = regexp.MustCompile(`\A[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}\z`)

// NewCPUGroup creates (or reuses) the cgroup sluice-<name> capped at cores
// CPUs (1.5 = one and a half cores). Remove it with Close when done.
func NewCPUGroup(name string, cores float64) (*CPUGroup, error) {
	if !cgroupName.MatchString(name) {
		return nil, fmt.Errorf("cgroup: invalid name %q", name)
	}
	if cores <= 0 {
		return nil, fmt.Errorf("cgroup: cores must be positive, got %v", cores)
	}
	quota := int64(cores * cfsPeriod)
	// cgroup v2 with the cpu controller enabled for children.
	if b, err := os.ReadFile(filepath.Join(CgroupV2Root, "cgroup.subtree_control")); err == nil && hasWord(string(b), "cpu") {
		g := &CPUGroup{Path: filepath.Join(CgroupV2Root, "sluice-"+name), v2: true}
		if err := os.Mkdir(g.Path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if err := os.WriteFile(filepath.Join(g.Path, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, cfsPeriod), 0); err != nil {
			return nil, fmt.Errorf("cgroup: set cpu.max: %w", err)
		}
		return g, nil
	}
	if _, err := os.Stat(filepath.Join(CgroupV1CPURoot, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("cgroup: neither cgroup v2 cpu.max nor v1 cpu.cfs_quota_us is available: %w", err)
	}
	g := &CPUGroup{Path: filepath.Join(CgroupV1CPURoot, "sluice-"+name)}
	if err := os.Mkdir(g.Path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	// The period first: the kernel checks quota against it.
	if err := os.WriteFile(filepath.Join(g.Path, "cpu.cfs_period_us"), []byte(strconv.Itoa(cfsPeriod)), 0); err != nil {
		return nil, fmt.Errorf("cgroup: set cpu.cfs_period_us: %w", err)
	}
	if err := os.WriteFile(filepath.Join(g.Path, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0); err != nil {
		return nil, fmt.Errorf("cgroup: set cpu.cfs_quota_us: %w", err)
	}
	return g, nil
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// Version is 1 or 2.
func (g *CPUGroup) Version() int {
	if g.v2 {
		return 2
	}
	return 1
}

// Add moves process pid (all its threads) into the group. Children it
// starts afterwards (git) inherit the group.
func (g *CPUGroup) Add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.Path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("cgroup: add pid %d: %w", pid, err)
	}
	return nil
}

// Pids lists the processes in the group.
func (g *CPUGroup) Pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.Path, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// ThrottledTime is how long the group's processes were held back by the
// quota so far (cpu.stat throttled_time in v1, throttled_usec in v2): a
// benchmark shows with it that the cap was what limited a node.
func (g *CPUGroup) ThrottledTime() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(g.Path, "cpu.stat"))
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	key, unit := "throttled_time", time.Nanosecond
	if g.v2 {
		key, unit = "throttled_usec", time.Microsecond
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cgroup: parse %s: %w", key, err)
			}
			return time.Duration(n) * unit, nil
		}
	}
	return 0, fmt.Errorf("cgroup: %s not in cpu.stat", key)
}

// Close moves any process still in the group, or in a group a node made
// inside it (its git cgroup, left behind when the node was killed), back
// to the parent and removes them all. A cgroup directory can only be
// removed when empty.
func (g *CPUGroup) Close() error {
	parent := filepath.Dir(g.Path)
	entries, err := os.ReadDir(g.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			child := filepath.Join(g.Path, e.Name())
			moveProcs(child, parent)
			if err := os.Remove(child); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("cgroup: remove %s: %w", child, err)
			}
		}
	}
	moveProcs(g.Path, parent)
	// rmdir, not RemoveAll: the control files are not removable.
	if err := os.Remove(g.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup: remove %s: %w", g.Path, err)
	}
	return nil
}

// moveProcs moves the processes of cgroup dir to cgroup to.
func moveProcs(dir, to string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, pid := range strings.Fields(string(b)) {
		// A process that exited meanwhile cannot be moved: ignore ESRCH.
		_ = os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(pid), 0)
	}
}
