package bench

import (
	"bytes"
	"errors"
	"fmt"
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
// is charged to it, however it exits.
type cgroup struct {
	dir string
	v2  bool
}

// newCgroup creates a cgroup named name; it fails where cgroups are not
// writable (no root, read-only /sys/fs/cgroup), and the caller then falls
// back to TreeCPU.
func newCgroup(name string) (*cgroup, error) {
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
		return cg, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no cgroup hierarchy with cpu accounting")
	}
	return nil, fmt.Errorf("create cgroup: %w", errors.Join(errs...))
}

// wrap returns an argv that joins the cgroup and then execs argv, so the
// process is inside it before it forks anything.
func (c *cgroup) wrap(argv []string) []string {
	return append([]string{"/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, c.dir}, argv...)
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
	var err error
	// The kernel refuses rmdir while a just-killed process is still being
	// torn down; give it a moment.
	for range 50 {
		if err = os.Remove(c.dir); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}
