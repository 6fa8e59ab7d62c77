package throttle

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// GitGroup is the cgroup the node's heavy git processes run in: a child of
// the node's own cgroup in the cgroup v1 cpu hierarchy, named
// git-<pid>-<n> (the node's process, and which of its nodes: tests run
// several in one process) so that two nodes sharing a cgroup never drive
// one group. It does two things the ticket count cannot:
//
//   - Weight. The group's cpu.shares (gitShares) is a quarter of one of the
//     node's own threads, so when git and the node's request handlers want
//     the same CPU, the handlers — REST, web, pack cache hits — run first.
//   - A fractional cap. A ticket is a whole git process; on a node of one
//     core, one pack-objects can keep the core busy by itself, and the
//     ticket floor cannot hold utilisation at a target below it. Below the
//     floor the controller caps the group's CFS quota instead (SetShare),
//     which leaves the rest of every period to the node's own work.
//
// The node needs a cgroup of its own with a writable cpu hierarchy (a
// container or a systemd unit with CPUAccounting; root or a delegated
// cgroup). Without one, or with cgroup v2 (where a cgroup with processes
// cannot have controlled children, so the node would first have to move
// itself into a leaf), there is no group and tickets act alone.
type GitGroup struct {
	dir   string  // the group's directory
	cores float64 // the node's cores: what a share of 1 means

	mu    sync.Mutex
	share float64 // of cores; 1 is uncapped
}

// gitShares is the group's cpu.shares: the node's own threads have the
// kernel's default of 1024 each.
const gitShares = 256

// gitPeriod is the CFS period of the group's quota: a tenth of the
// kernel's default, which the node's own cgroup has. Periods that long,
// not aligned with the node's, would let git spend its quota at the end of
// one of its periods and again at the start of the next, both inside one
// of the node's: up to twice its share there, and the node's quota, REST
// handlers included, runs out. With 10 ms periods git's use in any 100 ms
// exceeds its share by at most one period's quota, a tenth.
const gitPeriod = 10_000 // µs

// minQuota is the smallest CFS quota the kernel accepts.
const minQuota = 1000 // µs

// OpenGitGroup creates the git group under the node's own v1 cpu cgroup,
// uncapped, and removes the empty groups of nodes that are gone. cores is
// what a share of 1 means: the node's core count (throttle.cores, or its
// cgroup's quota). It fails when the node has no cgroup of its own there
// or cannot write to it.
func OpenGitGroup(cores float64) (*GitGroup, error) {
	node := v1CPUDir()
	if node == "" {
		return nil, errors.New("the node has no cgroup of its own in a cgroup v1 cpu hierarchy")
	}
	if cores <= 0 {
		return nil, fmt.Errorf("git cgroup: cores must be positive, got %v", cores)
	}
	removeStaleGroups(node)
	name := fmt.Sprintf("git-%d-%d", os.Getpid(), groupSeq.Add(1))
	g := &GitGroup{dir: filepath.Join(node, name), cores: cores, share: 1}
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("git cgroup: %w", err)
	}
	for _, w := range []struct{ file, value string }{
		{"cpu.shares", strconv.Itoa(gitShares)},
		{"cpu.cfs_period_us", strconv.Itoa(gitPeriod)},
		{"cpu.cfs_quota_us", "-1"},
	} {
		if err := os.WriteFile(filepath.Join(g.dir, w.file), []byte(w.value), 0); err != nil {
			_ = os.Remove(g.dir)
			return nil, fmt.Errorf("git cgroup: set %s: %w", w.file, err)
		}
	}
	return g, nil
}

// groupSeq numbers the groups this process opens.
var groupSeq atomic.Int64

// removeStaleGroups removes the git groups under node whose node process
// no longer exists (it crashed before Close). The kernel refuses to remove
// a group that still has processes, so a live git is never orphaned.
func removeStaleGroups(node string) {
	dirs, _ := filepath.Glob(filepath.Join(node, "git-*"))
	for _, d := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "git-"), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.Remove(d)
		}
	}
}

// Dir is the group's directory.
func (g *GitGroup) Dir() string { return g.dir }

// Add moves a process into the group. Its children inherit the group, so
// gitcmd adds each heavy git process right after starting it, before it
// has read its request and started pack-objects. A process that already
// exited is not an error.
func (g *GitGroup) Add(pid int) error {
	err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Share is the group's current CPU cap as a share of the node's cores;
// 1 is uncapped.
func (g *GitGroup) Share() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.share
}

// SetShare caps the group at share × the node's cores; a share of 1 or
// more removes the cap.
func (g *GitGroup) SetShare(share float64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	quota := "-1"
	if share < 1 {
		quota = strconv.FormatInt(max(minQuota, int64(math.Round(share*g.cores*gitPeriod))), 10)
	} else {
		share = 1
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cpu.cfs_quota_us"), []byte(quota), 0); err != nil {
		return fmt.Errorf("git cgroup: set cpu.cfs_quota_us: %w", err)
	}
	g.share = share
	return nil
}

// Close lifts the cap, moves any process still in the group back to the
// node's cgroup and removes the group.
func (g *GitGroup) Close() error {
	errs := []error{g.SetShare(1)}
	if b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs")); err == nil {
		parent := filepath.Join(filepath.Dir(g.dir), "cgroup.procs")
		for _, pid := range strings.Fields(string(b)) {
			if err := os.WriteFile(parent, []byte(pid), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("git cgroup: move %s out: %w", pid, err))
			}
		}
	}
	if err := os.Remove(g.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("git cgroup: %w", err))
	}
	return errors.Join(errs...)
}
