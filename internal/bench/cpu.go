package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of the times in /proc/<pid>/stat. It is
// 100 on every Linux architecture Go supports (the kernel exports a fixed
// value to user space whatever CONFIG_HZ is).
const clockTick = 100

// procStat is what the meter needs from /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	// self is utime+stime, reaped is cutime+cstime: the CPU of children
	// this process has waited for, each including its own reaped children.
	self, reaped time.Duration
}

// readProcStat parses /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may hold spaces or parentheses, so fields are counted
// from the last ')'.
func readProcStat(procDir string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(pid, b)
}

func parseProcStat(pid int, b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse stat of %d: no command name", pid)
	}
	// After ")": state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("parse stat of %d: %d fields", pid, len(f))
	}
	num := func(k int) int64 {
		n, _ := strconv.ParseInt(f[k], 10, 64)
		return n
	}
	tick := time.Second / clockTick
	return procStat{
		pid:    pid,
		ppid:   int(num(1)),
		self:   time.Duration(num(11)+num(12)) * tick,
		reaped: time.Duration(num(13)+num(14)) * tick,
	}, nil
}

// TreeCPU returns the CPU time (user+system) consumed so far by the process
// root and every process that descended from it and was waited for.
//
// Each live process in the tree contributes its own time plus the times of
// the children it has reaped (cutime/cstime), which the kernel accumulates
// recursively at wait(2). So the sum over the live tree counts every
// short-lived git process too, as long as its parent reaped it — which
// nginx, fcgiwrap, git http-backend and Go's os/exec all do. Processes that
// are orphaned (reparented to init) or whose parent ignores SIGCHLD are
// lost; the cgroup meter has no such gap and the harness prefers it when
// it can create one.
//
// A process that is reaped while the tree is being walked may be counted
// twice or not at all, so compare readings taken while the server is idle.
func TreeCPU(root int) (time.Duration, error) {
	return treeCPU("/proc", root)
}

func treeCPU(procDir string, root int) (time.Duration, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", procDir, err)
	}
	children := map[int][]procStat{}
	var rootStat *procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(procDir, pid)
		if err != nil {
			continue // exited since ReadDir
		}
		if pid == root {
			rootStat = &st
		}
		children[st.ppid] = append(children[st.ppid], st)
	}
	if rootStat == nil {
		return 0, fmt.Errorf("process %d not found", root)
	}
	var total time.Duration
	queue := []procStat{*rootStat}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		total += st.self + st.reaped
		queue = append(queue, children[st.pid]...)
	}
	return total, nil
}

// cgroup is a cpuacct cgroup (v1) or a cgroup v2 directory that the
// harness starts a server in, so that every process the server ever runs
// is charged to it, however it exits. On v1 the process also joins a cpu
// cgroup when its CPU is capped and a memory cgroup when one is writable
// (extra); v2 has one directory for every controller.
type cgroup struct {
	dir   string
	v2    bool
	extra []string // v1 only: cpu and memory cgroup directories joined too
	mem   string   // memory.usage_in_bytes (v1) or memory.current (v2) path; "" when unknown
}

// newCgroup creates a cgroup named name; it fails where cgroups are not
// writable (no root, read-only /sys/fs/cgroup), and the caller then falls
// back to TreeCPU. cpuLimit > 0 caps the processes at that many cores
// through CFS bandwidth control (v1 cpu.cfs_quota_us, v2 cpu.max); a cap
// that cannot be set is an error, because a measurement that silently runs
// uncapped would be wrong.
func newCgroup(name string, cpuLimit float64) (*cgroup, error) {
	candidates := []struct {
		parent string
		v2     bool
		probe  string
	}{
		{"/sys/fs/cgroup/cpuacct", false, "cpuacct.usage"},
		{"/sys/fs/cgroup/unified", true, "cpu.stat"},
		{"/sys/fs/cgroup", true, "cpu.stat"},
	}
	var errs []error
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c.parent, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(c.parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		cg := &cgroup{dir: dir, v2: c.v2}
		if _, err := cg.usage(); err != nil {
			os.Remove(dir)
			errs = append(errs, err)
			continue
		}
		if err := cg.attachControllers(name, cpuLimit); err != nil {
			cg.remove()
			return nil, err
		}
		return cg, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no cgroup hierarchy with cpu accounting")
	}
	return nil, fmt.Errorf("create cgroup: %w", errors.Join(errs...))
}

// cfsPeriod is the CFS bandwidth period the harness sets: the kernel's
// default, 100 ms.
const cfsPeriod = 100000

// attachControllers sets the CPU cap and finds the memory meter.
func (c *cgroup) attachControllers(name string, cpuLimit float64) error {
	quota := int64(cpuLimit * cfsPeriod)
	if c.v2 {
		if f := filepath.Join(c.dir, "memory.current"); fileExists(f) {
			c.mem = f
		}
		if cpuLimit > 0 {
			if err := os.WriteFile(filepath.Join(c.dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, cfsPeriod)), 0o644); err != nil {
				return fmt.Errorf("set cpu.max (is the cpu controller enabled in the parent's cgroup.subtree_control?): %w", err)
			}
		}
		return nil
	}
	// v1: the memory hierarchy is optional (a meter), the cpu one is
	// required only for a cap.
	if fileExists("/sys/fs/cgroup/memory/cgroup.procs") {
		dir := filepath.Join("/sys/fs/cgroup/memory", name)
		if err := os.Mkdir(dir, 0o755); err == nil {
			c.extra = append(c.extra, dir)
			c.mem = filepath.Join(dir, "memory.usage_in_bytes")
		}
	}
	if cpuLimit > 0 {
		dir := filepath.Join("/sys/fs/cgroup/cpu", name)
		if filepath.Clean(c.dir) == filepath.Clean(dir) {
			// cpu and cpuacct co-mounted: one directory has both files.
		} else if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("create cpu cgroup for a cpu cap: %w", err)
		} else {
			c.extra = append(c.extra, dir)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(fmt.Sprint(cfsPeriod)), 0o644); err != nil {
			return fmt.Errorf("set cpu.cfs_period_us: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(fmt.Sprint(quota)), 0o644); err != nil {
			return fmt.Errorf("set cpu.cfs_quota_us: %w", err)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// wrap returns an argv that joins the cgroup (and, on v1, its cpu and
// memory twins) and then execs argv, so the process is inside them before
// it forks anything.
func (c *cgroup) wrap(argv []string) []string {
	script := `for d in "$0" $CG_EXTRA; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$@"`
	if len(c.extra) > 0 {
		script = "CG_EXTRA='" + strings.Join(c.extra, " ") + "'; " + script
	}
	return append([]string{"/bin/sh", "-c", script, c.dir}, argv...)
}

// memory is the memory charged to the cgroup (page cache included, as the
// kernel counts it); ok is false when there is no memory meter.
func (c *cgroup) memory() (n int64, ok bool) {
	if c.mem == "" {
		return 0, false
	}
	b, err := os.ReadFile(c.mem)
	if err != nil {
		return 0, false
	}
	n, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// usage is the CPU time charged to the cgroup so far.
func (c *cgroup) usage() (time.Duration, error) {
	if !c.v2 {
		b, err := os.ReadFile(filepath.Join(c.dir, "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse cpuacct.usage: %w", err)
		}
		return time.Duration(ns), nil
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse cpu.stat: %w", err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, errors.New("cpu.stat: no usage_usec")
}

// remove deletes the cgroup once its processes have exited.
func (c *cgroup) remove() error {
	var errs []error
	for _, dir := range append([]string{c.dir}, c.extra...) {
		// A node killed before its Close leaves its git cgroup behind
		// (throttle.GitGroup); the kernel removes only empty groups,
		// children first.
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				if e.IsDir() {
					_ = os.Remove(filepath.Join(dir, e.Name()))
				}
			}
		}
		var err error
		// The kernel refuses rmdir while a just-killed process is still
		// being torn down; give it a moment.
		for range 50 {
			if err = os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// treeRSS sums the resident set of root and its live descendants; 0 when
// root is gone.
func treeRSS(procDir string, root int) int64 {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return 0
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(procDir, pid)
		if err != nil {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
	}
	var total int64
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		// statm's second field is resident pages.
		if b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "statm")); err == nil {
			if f := strings.Fields(string(b)); len(f) > 1 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				total += n * int64(os.Getpagesize())
			}
		}
		queue = append(queue, children[pid]...)
	}
	return total
}
