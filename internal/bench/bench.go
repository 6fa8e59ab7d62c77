// Package bench is the harness behind `make bench`: it measures Sluice
// against the reference deployment of git over HTTP — nginx, fcgiwrap and
// `git http-backend` — on the same machine, in the same run, with the same
// generated repository and the same load client, and reports the ratios.
//
// Ratios, not absolute numbers, are the result: a laptop and a CI runner
// disagree on ops/hour but agree, within noise, on how much more CPU one
// server spends per clone than another. Both servers are measured one after
// the other, never at once, so neither steals the other's cores.
//
// Server CPU is what each operation costs the server's whole process tree:
// nginx master and workers, fcgiwrap and every http-backend, upload-pack,
// pack-objects it forks; or sluice and every git and hook process it runs.
// Each server is started inside its own cpuacct cgroup when the machine
// allows it, which charges every process however short-lived; otherwise,
// and as a cross-check, TreeCPU sums the process tree from /proc including
// the reaped children's cumulative times. Readings are taken with the
// server idle before and after a workload, so that no process is caught
// half-reaped.
//
// The load client (internal/loadgen) runs on the same machine and competes
// for its cores, equally for both servers; it stores nothing, and verifies
// every pack's trailing checksum — except in the clone storm, where each
// distinct request's first pack is checksummed and every later one must
// match it byte for byte (length, object count, trailer, CRC-32C), because
// SHA-1 of every pack would make the client, not the servers, the
// bottleneck (see docs/benchmarks.md).
package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// Measurement is one workload run against one server.
type Measurement struct {
	Server   string
	Workload string
	Report   loadgen.Report
	// CPU is what the server spent during the run.
	CPU CPU
}

// CPUPerOp is the server CPU per successful operation.
func (m Measurement) CPUPerOp() time.Duration {
	if m.Report.Ops == 0 {
		return 0
	}
	return m.CPU.Best() / time.Duration(m.Report.Ops)
}

// settle is how long the harness waits after a workload before reading
// the meters: long enough for git processes whose output the client has
// already read to exit and be reaped.
const settle = time.Second

// Measure runs spec against srv and charges the server's CPU to it.
func Measure(ctx context.Context, srv *Server, workload string, spec loadgen.Spec) (Measurement, error) {
	m := Measurement{Server: srv.Name, Workload: workload}
	time.Sleep(settle)
	before, err := srv.CPU()
	if err != nil {
		return m, fmt.Errorf("read cpu: %w", err)
	}
	m.Report = loadgen.Run(ctx, spec)
	time.Sleep(settle)
	after, err := srv.CPU()
	if err != nil {
		return m, fmt.Errorf("read cpu: %w", err)
	}
	m.CPU = after.Sub(before)
	return m, nil
}

// Machine describes where a benchmark ran.
type Machine struct {
	CPUs     int
	CPUModel string
	Kernel   string
	Git      string
	Nginx    string
	Go       string
	Date     time.Time
	// LoadBefore and LoadAfter are /proc/loadavg's first three fields
	// when the run started and ended.
	LoadBefore, LoadAfter string
}

// LoadAverage returns the 1, 5 and 15 minute load averages, or "".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], ", ")
}

// DescribeMachine collects the Machine facts; missing ones stay empty.
func DescribeMachine(git, nginx string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command(git, "version").Output(); err == nil {
		m.Git = strings.TrimSpace(string(out))
	}
	// nginx prints its version on stderr.
	if out, err := exec.Command(nginx, "-v").CombinedOutput(); err == nil {
		m.Nginx = strings.TrimSpace(strings.TrimPrefix(string(out), "nginx version: "))
	}
	return m
}
