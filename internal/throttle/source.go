package throttle

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// CPUSource reports the cumulative CPU time consumed by what this node is
// responsible for. The controller differentiates it over each sampling
// interval.
type CPUSource interface {
	Usage() (time.Duration, error)
	// Name says where the numbers come from, for the admin state.
	Name() string
}

// PressureSource reports CPU pressure: the share of recent time (0..1) in
// which some runnable task waited for a CPU (PSI "some avg10").
type PressureSource interface {
	Pressure() (float64, error)
	// Own is true when the pressure is this node's own (its cgroup's)
	// rather than the whole machine's.
	Own() bool
}

// MemorySource reports the memory still available to the node.
type MemorySource interface {
	Available() (int64, error)
}

// Sources are what the adaptive controller measures, with the core count
// the CPU time is divided by.
type Sources struct {
	CPU      CPUSource
	Cores    float64
	Pressure PressureSource // nil: no PSI
	Memory   MemorySource   // nil: no memory backstop
}

// procRoot and cgroupRoot are variables so tests can point detection at a
// fake tree.
var (
	procRoot   = "/proc"
	cgroupRoot = "/sys/fs/cgroup"
)

// DetectSources picks the CPU source for this node (see the package
// comment): with cores > 0 the operator has said what this node's share of
// the machine is, and the process tree's CPU time is measured against it;
// otherwise the node's own cgroup when it has one (v2 cpu.stat, v1
// cpuacct.usage) with the cgroup's CPU quota as the core count; otherwise
// the process tree against the CPUs this process may run on. A root cgroup
// is never used: it is the whole machine, and several nodes sharing one
// machine must each see their own load.
func DetectSources(cores float64) Sources {
	s := Sources{Memory: meminfo{path: filepath.Join(procRoot, "meminfo")}}
	configured := cores > 0
	if !configured {
		if cg, ok := detectCgroup(); ok {
			s.CPU = cg
			s.Cores = cg.cores
			if cg.pressure != "" {
				s.Pressure = psiFile{path: cg.pressure, own: true}
			}
			if cg.memMax != "" {
				s.Memory = cgroupMemory{max: cg.memMax, current: cg.memCurrent, machine: s.Memory}
			}
			return s
		}
		// No cgroup of our own to meter, but cgroup v1 may still cap us
		// through a cpu hierarchy mounted apart from cpuacct (the lab's
		// CPU-capped nodes): size for the quota, not the machine.
		if cores = v1QuotaCores(); cores <= 0 {
			cores = float64(runtime.NumCPU())
		}
	}
	s.CPU = &processTree{proc: procRoot, pid: os.Getpid()}
	s.Cores = cores
	// Machine-wide pressure says something about this node only when the
	// machine is its own. With throttle.cores configured the node shares
	// it (several nodes, a lab client) and others' load must not pin its
	// ticket limit, so pressure is left out.
	if !configured {
		if _, err := os.Stat(filepath.Join(procRoot, "pressure", "cpu")); err == nil {
			s.Pressure = psiFile{path: filepath.Join(procRoot, "pressure", "cpu")}
		}
	}
	return s
}

// PackThreads is how many threads one git process of this node should use
// (pack.threads): the node's core count as DetectSources sees it — the
// configured throttle.cores, the cgroup's CPU quota, or the CPUs the
// process may use — rounded up. Git's own default counts the machine's
// CPUs, and a pack-objects with more threads than its node has cores
// spends the node's CFS quota early in each period, after which every
// process of the node waits for the next one.
func PackThreads(cores float64) int {
	return max(1, int(math.Ceil(DetectSources(cores).Cores-1e-9)))
}

// v1QuotaCores returns the CFS quota, in cores, of this process's cgroup
// in a cgroup v1 cpu hierarchy, or 0 when there is none.
func v1QuotaCores() float64 {
	if dir := v1CPUDir(); dir != "" {
		return quotaCores(dir)
	}
	return 0
}

// v1CPUDir is this process's own cgroup in a cgroup v1 cpu hierarchy, or
// "" when there is none or it is the root (the whole machine).
func v1CPUDir() string {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		for ctl := range strings.SplitSeq(parts[1], ",") {
			if ctl != "cpu" {
				continue
			}
			for _, mount := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
				dir := filepath.Join(cgroupRoot, mount, filepath.Clean("/"+parts[2]))
				if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
					return dir
				}
			}
		}
	}
	return ""
}

// cgroupCPU reads a cgroup's cumulative CPU usage.
type cgroupCPU struct {
	name       string
	file       string // cpu.stat (v2) or cpuacct.usage (v1)
	v2         bool
	cores      float64
	pressure   string // v2 cpu.pressure, if present
	memMax     string
	memCurrent string
}

func (c *cgroupCPU) Name() string { return c.name }

func (c *cgroupCPU) Usage() (time.Duration, error) {
	b, err := os.ReadFile(c.file)
	if err != nil {
		return 0, err
	}
	if !c.v2 {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", c.file, err)
		}
		return time.Duration(ns), nil
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %w", c.file, err)
			}
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("no usage_usec in %s", c.file)
}

// detectCgroup finds this process's own cgroup from /proc/self/cgroup.
func detectCgroup() (*cgroupCPU, bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return nil, false
	}
	var v2Path, v1CPU, v1Mem string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path = parts[2]
		}
		for ctl := range strings.SplitSeq(parts[1], ",") {
			switch ctl {
			case "cpuacct":
				v1CPU = parts[2]
			case "memory":
				v1Mem = parts[2]
			}
		}
	}
	// cgroup v2: a cgroup other than the root has cpu.max (the root has
	// none), which also tells a container's namespaced "/" from the host's.
	if v2Path != "" {
		dir := filepath.Join(cgroupRoot, filepath.Clean("/"+v2Path))
		if quota, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cpu.stat")); err == nil {
				cg := &cgroupCPU{name: "cgroup2:" + v2Path, file: filepath.Join(dir, "cpu.stat"), v2: true,
					cores: v2Cores(string(quota))}
				if _, err := os.Stat(filepath.Join(dir, "cpu.pressure")); err == nil {
					cg.pressure = filepath.Join(dir, "cpu.pressure")
				}
				if _, err := os.Stat(filepath.Join(dir, "memory.max")); err == nil {
					cg.memMax, cg.memCurrent = filepath.Join(dir, "memory.max"), filepath.Join(dir, "memory.current")
				}
				return cg, true
			}
		}
	}
	// cgroup v1: "/" is the root, the whole machine.
	if v1CPU == "" || v1CPU == "/" {
		return nil, false
	}
	for _, mount := range []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
		dir := filepath.Join(cgroupRoot, mount, filepath.Clean("/"+v1CPU))
		file := filepath.Join(dir, "cpuacct.usage")
		if _, err := os.Stat(file); err != nil {
			continue
		}
		cg := &cgroupCPU{name: "cgroup1:" + v1CPU, file: file, cores: v1Cores(dir)}
		if v1Mem != "" && v1Mem != "/" {
			mdir := filepath.Join(cgroupRoot, "memory", filepath.Clean("/"+v1Mem))
			if _, err := os.Stat(filepath.Join(mdir, "memory.limit_in_bytes")); err == nil {
				cg.memMax, cg.memCurrent = filepath.Join(mdir, "memory.limit_in_bytes"), filepath.Join(mdir, "memory.usage_in_bytes")
			}
		}
		return cg, true
	}
	return nil, false
}

// v2Cores turns cpu.max ("max 100000" or "150000 100000") into cores.
func v2Cores(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 2 && f[0] != "max" {
		q, err1 := strconv.ParseFloat(f[0], 64)
		p, err2 := strconv.ParseFloat(f[1], 64)
		if err1 == nil && err2 == nil && q > 0 && p > 0 {
			return q / p
		}
	}
	return float64(runtime.NumCPU())
}

func v1Cores(dir string) float64 {
	if c := quotaCores(dir); c > 0 {
		return c // cpu and cpuacct mounted together
	}
	if c := v1QuotaCores(); c > 0 {
		return c // cpu mounted apart from cpuacct
	}
	return float64(runtime.NumCPU())
}

// quotaCores reads a cgroup v1 CFS quota in dir, in cores; 0 when unset.
func quotaCores(dir string) float64 {
	q, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
	p, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 == nil && err2 == nil && q > 0 && p > 0 {
		return float64(q) / float64(p)
	}
	return 0
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times. It is 100 on
// every Linux architecture Go supports (the kernel fixes it for user space
// whatever CONFIG_HZ is); reading it would need sysconf, hence cgo.
const clockTick = 10 * time.Millisecond

// processTree is the CPU time of this process and every descendant: the
// process's own utime+stime, what its reaped children left in
// cutime+cstime, and the utime+stime+cutime+cstime of every live
// descendant (a git upload-pack whose pack-objects child has finished
// holds that child's time in its cutime until we reap it). Nothing is
// counted twice: a descendant's totals move into its parent's c-times only
// when it is reaped, at which point it is no longer listed.
type processTree struct {
	proc string
	pid  int
	last time.Duration
}

func (p *processTree) Name() string { return "process-tree" }

func (p *processTree) Usage() (time.Duration, error) {
	entries, err := os.ReadDir(p.proc)
	if err != nil {
		return 0, err
	}
	type stat struct {
		ppid  int
		ticks int64
	}
	stats := make(map[int]stat, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.proc, e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		ppid, ticks, err := parseStat(b)
		if err != nil {
			continue
		}
		stats[pid] = stat{ppid: ppid, ticks: ticks}
	}
	self, ok := stats[p.pid]
	if !ok {
		return 0, errors.New("own process missing from " + p.proc)
	}
	children := make(map[int][]int)
	for pid, s := range stats {
		children[s.ppid] = append(children[s.ppid], pid)
	}
	total := self.ticks
	stack := append([]int(nil), children[p.pid]...)
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		total += stats[pid].ticks
		stack = append(stack, children[pid]...)
	}
	d := time.Duration(total) * clockTick
	// A descendant reaped between our reading its stat and its parent's
	// moves its time, and may be missed once: never report going back.
	if d < p.last {
		d = p.last
	}
	p.last = d
	return d, nil
}

// parseStat reads ppid and utime+stime+cutime+cstime from a
// /proc/<pid>/stat line. The command name in parentheses may hold spaces
// and parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (ppid int, ticks int64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return 0, 0, errors.New("short stat")
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		ticks += v
	}
	return ppid, ticks, nil
}

// psiFile reads "some avg10" from a PSI file (/proc/pressure/cpu or a v2
// cgroup's cpu.pressure).
type psiFile struct {
	path string
	own  bool
}

func (p psiFile) Own() bool { return p.own }

func (p psiFile) Pressure() (float64, error) {
	b, err := os.ReadFile(p.path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "some ")
		if !ok {
			continue
		}
		for f := range strings.FieldsSeq(rest) {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("parse %s: %w", p.path, err)
				}
				return x / 100, nil
			}
		}
	}
	return 0, fmt.Errorf("no some avg10 in %s", p.path)
}

// meminfo reads MemAvailable from /proc/meminfo.
type meminfo struct{ path string }

func (m meminfo) Available() (int64, error) {
	f, err := os.Open(m.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse MemAvailable: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemAvailable in " + m.path)
}

// cgroupMemory is what the node's cgroup still allows, or the machine's
// available memory when that is smaller (or the cgroup has no limit).
type cgroupMemory struct {
	max, current string
	machine      MemorySource
}

func (c cgroupMemory) Available() (int64, error) {
	avail, err := c.machine.Available()
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(c.max)
	if err != nil {
		return avail, nil
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil { // "max": no limit
		return avail, nil
	}
	cur, err := readInt(c.current)
	if err != nil {
		return avail, nil
	}
	return min(avail, max(0, limit-cur)), nil
}
