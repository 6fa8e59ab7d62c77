package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is one system under test: the processes the harness started for
// it and where to reach its repositories.
type Server struct {
	Name string
	// base is http://HOST:PORT; repositories are at base + path.
	base  string
	user  string
	pass  string
	procs []*proc
}

// URL returns the clone URL of path ("/scm/KEY/slug.git") with the
// server's credentials.
func (s *Server) URL(path string) string {
	return "http://" + s.user + ":" + s.pass + "@" + s.base[len("http://"):] + path
}

// CPU is one reading of a server's CPU meters.
type CPU struct {
	// Tree is TreeCPU summed over the server's root processes.
	Tree time.Duration
	// Cgroup is the cgroup meter; valid when HasCgroup.
	Cgroup    time.Duration
	HasCgroup bool
}

// Best is the cgroup reading when there is one, which misses nothing, and
// the process-tree reading otherwise.
func (c CPU) Best() time.Duration {
	if c.HasCgroup {
		return c.Cgroup
	}
	return c.Tree
}

// Sub is the CPU spent between an earlier reading and c.
func (c CPU) Sub(earlier CPU) CPU {
	return CPU{Tree: c.Tree - earlier.Tree, Cgroup: c.Cgroup - earlier.Cgroup, HasCgroup: c.HasCgroup && earlier.HasCgroup}
}

// CPU reads every process's meters.
func (s *Server) CPU() (CPU, error) {
	total := CPU{HasCgroup: true}
	for _, p := range s.procs {
		t, err := TreeCPU(p.cmd.Process.Pid)
		if err != nil {
			return total, fmt.Errorf("%s: %w", p.name, err)
		}
		total.Tree += t
		if p.cg == nil {
			total.HasCgroup = false
			continue
		}
		u, err := p.cg.usage()
		if err != nil {
			return total, fmt.Errorf("%s: %w", p.name, err)
		}
		total.Cgroup += u
	}
	return total, nil
}

// Stop stops the processes in reverse start order.
func (s *Server) Stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		errs = append(errs, s.procs[i].stop())
	}
	return errors.Join(errs...)
}

// proc is one long-running process of a server.
type proc struct {
	name   string
	cmd    *exec.Cmd
	cg     *cgroup
	done   chan struct{}
	err    error
	logger *slog.Logger
}

// startProc starts argv with its output in logPath, inside a fresh cgroup
// when the machine allows one.
func startProc(name string, argv, env []string, logPath string, logger *slog.Logger) (*proc, error) {
	return startProcLimited(name, argv, env, logPath, 0, logger)
}

// startProcLimited is startProc with the process tree capped at cpuLimit
// cores (0: no cap). A cap needs a cgroup, so without one it fails.
func startProcLimited(name string, argv, env []string, logPath string, cpuLimit float64, logger *slog.Logger) (*proc, error) {
	p := &proc{name: name, done: make(chan struct{}), logger: logger}
	cg, err := newCgroup(fmt.Sprintf("sluice-bench-%d-%s", os.Getpid(), name), cpuLimit)
	if err != nil {
		if cpuLimit > 0 {
			return nil, fmt.Errorf("cap %s at %g cpus: %w", name, cpuLimit, err)
		}
		logger.Warn("no cgroup, measuring CPU from the process tree only", "process", name, "err", err)
	} else {
		p.cg = cg
		argv = cg.wrap(argv)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Its own process group, so that a Ctrl-C on the harness does not
	// reach the server before the harness stops it in order; and killed
	// if the harness dies (a test timeout) instead of left running.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		if p.cg != nil {
			p.cg.remove()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, then SIGKILL to the process group after a grace
// period, and removes the cgroup.
func (p *proc) stop() error {
	pgid := p.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.logger.Warn("process did not stop, killing it", "process", p.name)
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children that left the process group (none of ours do) would keep
	// the cgroup busy; kill whatever is left in it.
	if p.cg != nil {
		if b, err := os.ReadFile(p.cg.dir + "/cgroup.procs"); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := p.cg.remove(); err != nil {
			return fmt.Errorf("remove cgroup of %s: %w", p.name, err)
		}
	}
	return nil
}

// exited reports whether the process has ended, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// freePort returns a port that was free a moment ago. A server that has
// to be told its port (nginx, sluice) cannot be handed a listener, so
// there is a small window for a collision, which start-up then reports.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP polls url until it answers with one of the accepted statuses,
// the process exits, or ctx ends.
func waitHTTP(ctx context.Context, url string, p *proc, accept ...int) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited during start-up: %v", p.name, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			for _, s := range accept {
				if resp.StatusCode == s {
					return nil
				}
			}
			err = fmt.Errorf("http %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", p.name, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePort returns a 127.0.0.1 port that was free a moment ago (see
// freePort); exported for the performance lab.
func FreePort() (int, error) { return freePort() }

// Base is the server's http://HOST:PORT.
func (s *Server) Base() string { return s.base }

// Memory is the memory charged to the server's cgroups (page cache
// included, as the kernel counts it), or the summed resident set of its
// process trees when there is no memory cgroup.
func (s *Server) Memory() int64 {
	var total int64
	for _, p := range s.procs {
		if p.cg != nil {
			if n, ok := p.cg.memory(); ok {
				total += n
				continue
			}
		}
		total += treeRSS("/proc", p.cmd.Process.Pid)
	}
	return total
}

// Exited reports whether any of the server's processes has ended, with
// its error: a node that died under load must not be mistaken for an idle
// one.
func (s *Server) Exited() (bool, error) {
	for _, p := range s.procs {
		if done, err := p.exited(); done {
			return true, fmt.Errorf("%s exited: %v", p.name, err)
		}
	}
	return false, nil
}

// Process is one long-running process the harness started, exported so
// the performance lab can run helpers (HAProxy) the same way.
type Process struct{ p *proc }

// StartProcess starts argv with its output in logPath, in a cgroup of its
// own when the machine allows one, capped at cpuLimit cores when > 0.
func StartProcess(name string, argv, env []string, logPath string, cpuLimit float64, logger *slog.Logger) (*Process, error) {
	p, err := startProcLimited(name, argv, env, logPath, cpuLimit, logger)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// Server wraps the process as a one-process Server reachable at base.
func (p *Process) Server(base string) *Server {
	return &Server{Name: p.p.name, base: base, procs: []*proc{p.p}}
}

// WaitHTTP polls url until it answers with one of the accepted statuses,
// the process exits, or ctx ends.
func (p *Process) WaitHTTP(ctx context.Context, url string, accept ...int) error {
	return waitHTTP(ctx, url, p.p, accept...)
}
