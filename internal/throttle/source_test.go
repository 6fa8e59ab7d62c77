package throttle

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		line      string
		ppid      int
		ticks     int64
		wantError bool
	}{
		{"42 (git) S 7 42 42 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0 5 0 0", 7, 110, false},
		// A command name with spaces and parentheses.
		{"42 (a) b (c) R 9 42 42 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 5 0 0", 9, 10, false},
		{"42 (git) S 7 42", 0, 0, true},
		{"garbage", 0, 0, true},
	}
	for _, tt := range tests {
		ppid, ticks, err := parseStat([]byte(tt.line))
		if (err != nil) != tt.wantError || ppid != tt.ppid || ticks != tt.ticks {
			t.Errorf("parseStat(%q) = %d, %d, %v", tt.line, ppid, ticks, err)
		}
	}
}

func TestProcessTreeCountsReapedChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	src := &processTree{proc: "/proc", pid: os.Getpid()}
	before, err := src.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// A child that burns some CPU and is reaped: its time must show up
	// through our cutime/cstime.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after, err := src.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// Clock ticks are 10 ms; allow two ticks of rounding.
	if after-before < child-20*time.Millisecond {
		t.Fatalf("usage grew %v, child used %v", after-before, child)
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDetectSources(t *testing.T) {
	defer func(p, c string) { procRoot, cgroupRoot = p, c }(procRoot, cgroupRoot)
	meminfo := "MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n"
	tests := []struct {
		name       string
		cores      float64
		files      map[string]string
		source     string
		wantCores  float64
		usage      time.Duration
		pressure   bool
		noPressure bool
	}{
		{
			name: "cgroup v2 own cgroup with quota",
			files: map[string]string{
				"proc/self/cgroup":               "0::/sluice/node1\n",
				"proc/meminfo":                   meminfo,
				"cg/sluice/node1/cpu.max":        "150000 100000\n",
				"cg/sluice/node1/cpu.stat":       "usage_usec 2500000\nuser_usec 2000000\n",
				"cg/sluice/node1/cpu.pressure":   "some avg10=12.50 avg60=1.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
				"cg/sluice/node1/memory.max":     "max\n",
				"cg/sluice/node1/memory.current": "1000\n",
				"proc/pressure/cpu":              "some avg10=99.00 avg60=0 avg300=0 total=0\n",
			},
			source: "cgroup2:/sluice/node1", wantCores: 1.5, usage: 2500 * time.Millisecond, pressure: true,
		},
		{
			name: "cgroup v2 root is the machine",
			files: map[string]string{
				"proc/self/cgroup": "0::/\n",
				"proc/meminfo":     meminfo,
				"cg/cpu.stat":      "usage_usec 1\n",
			},
			source: "process-tree", wantCores: float64(runtime.NumCPU()),
		},
		{
			name: "cgroup v1 own cgroup",
			files: map[string]string{
				"proc/self/cgroup":                    "4:memory:/n1\n2:cpu,cpuacct:/n1\n",
				"proc/meminfo":                        meminfo,
				"cg/cpu,cpuacct/n1/cpuacct.usage":     "3000000000\n",
				"cg/cpu,cpuacct/n1/cpu.cfs_quota_us":  "-1\n",
				"cg/cpu,cpuacct/n1/cpu.cfs_period_us": "100000\n",
			},
			source: "cgroup1:/n1", wantCores: float64(runtime.NumCPU()), usage: 3 * time.Second,
		},
		{
			name: "cgroup v1 root is the machine",
			files: map[string]string{
				"proc/self/cgroup":         "2:cpuacct:/\n1:cpu:/\n",
				"proc/meminfo":             meminfo,
				"cg/cpuacct/cpuacct.usage": "1\n",
			},
			source: "process-tree", wantCores: float64(runtime.NumCPU()),
		},
		{
			// The lab's capped nodes: cpu mounted apart from cpuacct, the
			// node in a cpu cgroup with a quota but in cpuacct's root.
			name: "cgroup v1 separate cpu mount caps the process tree",
			files: map[string]string{
				"proc/self/cgroup":                   "3:cpuacct:/\n2:cpu:/sluice-n1\n",
				"proc/meminfo":                       meminfo,
				"cg/cpuacct/cpuacct.usage":           "1\n",
				"cg/cpu/sluice-n1/cpu.cfs_quota_us":  "50000\n",
				"cg/cpu/sluice-n1/cpu.cfs_period_us": "100000\n",
			},
			source: "process-tree", wantCores: 0.5,
		},
		{
			name: "cgroup v1 own cpuacct cgroup, quota in a separate cpu mount",
			files: map[string]string{
				"proc/self/cgroup":            "3:cpuacct:/n1\n2:cpu:/n1\n",
				"proc/meminfo":                meminfo,
				"cg/cpuacct/n1/cpuacct.usage": "2000000000\n",
				"cg/cpu/n1/cpu.cfs_quota_us":  "150000\n",
				"cg/cpu/n1/cpu.cfs_period_us": "100000\n",
			},
			source: "cgroup1:/n1", wantCores: 1.5, usage: 2 * time.Second,
		},
		{
			name:  "configured cores use the process tree",
			cores: 3,
			files: map[string]string{
				"proc/self/cgroup":         "0::/sluice/node1\n",
				"proc/meminfo":             meminfo,
				"cg/sluice/node1/cpu.max":  "max 100000\n",
				"cg/sluice/node1/cpu.stat": "usage_usec 1\n",
			},
			source: "process-tree", wantCores: 3,
		},
		{
			// A node told its share of a machine must not be pinned by
			// other tenants' load: machine-wide pressure is ignored.
			name:  "configured cores ignore machine pressure",
			cores: 1,
			files: map[string]string{
				"proc/self/cgroup":  "0::/\n",
				"proc/meminfo":      meminfo,
				"proc/pressure/cpu": "some avg10=99.00 avg60=0 avg300=0 total=0\n",
			},
			source: "process-tree", wantCores: 1, noPressure: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tt.files)
			procRoot, cgroupRoot = filepath.Join(root, "proc"), filepath.Join(root, "cg")
			s := DetectSources(tt.cores)
			if s.CPU.Name() != tt.source || s.Cores != tt.wantCores {
				t.Fatalf("source %s cores %v, want %s %v", s.CPU.Name(), s.Cores, tt.source, tt.wantCores)
			}
			if tt.usage > 0 {
				if u, err := s.CPU.Usage(); err != nil || u != tt.usage {
					t.Fatalf("usage %v, %v; want %v", u, err, tt.usage)
				}
			}
			if tt.noPressure && s.Pressure != nil {
				t.Fatalf("pressure source %v for a node with configured cores", s.Pressure)
			}
			if tt.pressure {
				p, err := s.Pressure.Pressure()
				if err != nil || p != 0.125 || !s.Pressure.Own() {
					t.Fatalf("pressure %v own %v: %v", p, s.Pressure.Own(), err)
				}
			}
			if avail, err := s.Memory.Available(); err != nil || avail != 4000000<<10 {
				t.Fatalf("memory %v, %v", avail, err)
			}
		})
	}
}

// A configured core count sizes git's threads, rounded up; none means
// at least one thread.
func TestPackThreads(t *testing.T) {
	for cores, want := range map[float64]int{1: 1, 1.5: 2, 2: 2, 0.5: 1, 12: 12} {
		if got := PackThreads(cores); got != want {
			t.Errorf("PackThreads(%g) = %d, want %d", cores, got, want)
		}
	}
	if got := PackThreads(0); got < 1 {
		t.Errorf("PackThreads(0) = %d, want at least 1", got)
	}
}
