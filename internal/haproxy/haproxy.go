// Package haproxy runs Debian's HAProxy in front of local Sluice nodes,
// shaped like deploy/haproxy.cfg: HTTP balanced per request with GET
// /readyz health checks, and SSH balanced per connection in TCP mode with
// the PROXY protocol v2 header and its health taken from the node's HTTP
// readiness. The cluster test harness (internal/testbed) and the
// performance lab (internal/e3) both provision clusters with it, so the
// configuration the tests prove is the one the measurements use.
//
// "Routed" means HAProxy itself has marked every server UP, read from its
// stats socket ("show stat"), not inferred from a few requests getting
// through: a measurement that starts while one of three nodes is still
// held out by its rise count would measure two nodes.
package haproxy

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Binary is Debian's haproxy.
const Binary = "/usr/sbin/haproxy"

// Backend names in the rendered configuration.
const (
	HTTPBackend = "sluice_http"
	SSHBackend  = "sluice_ssh"
)

// Node is one backend server.
type Node struct {
	// Name is the server name in HAProxy ("node-1").
	Name string
	// HTTPAddr is the node's host:port for HTTP.
	HTTPAddr string
	// SSHAddr is its SSH host:port; "" when it serves no SSH.
	SSHAddr string
}

// Config is what Render turns into haproxy.cfg. Zero values take the
// defaults documented per field.
type Config struct {
	// HTTPAddr is the HTTP frontend's bind address (host:port).
	HTTPAddr string
	// SSHAddr is the SSH frontend's bind address; "" renders no SSH
	// frontend. Every node then needs an SSHAddr.
	SSHAddr string
	Nodes   []Node
	// Balance is the HTTP algorithm; default "leastconn" as in
	// deploy/haproxy.cfg (SSH is always leastconn: connections are long).
	Balance string
	// CheckInterval is the health check period; default 1s. Fall and Rise
	// are how many failed or passed checks take a server out or back in;
	// default 2 each.
	CheckInterval time.Duration
	Fall, Rise    int
	// Timeout bounds client and server inactivity; default 10m, as a
	// clone of a large repository may stall that long between bytes.
	Timeout time.Duration
	// MaxConn is the global connection limit; default 4000.
	MaxConn int
	// StatsSocket is the admin socket's path; Start fills it in.
	StatsSocket string
}

func (c Config) withDefaults() Config {
	if c.Balance == "" {
		c.Balance = "leastconn"
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = time.Second
	}
	if c.Fall <= 0 {
		c.Fall = 2
	}
	if c.Rise <= 0 {
		c.Rise = 2
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.MaxConn <= 0 {
		c.MaxConn = 4000
	}
	return c
}

// Validate checks the parts Render relies on.
func (c Config) Validate() error {
	if c.HTTPAddr == "" {
		return errors.New("haproxy: no http bind address")
	}
	if len(c.Nodes) == 0 {
		return errors.New("haproxy: no nodes")
	}
	for _, n := range c.Nodes {
		if n.Name == "" || strings.ContainsAny(n.Name, " \t\n#") {
			return fmt.Errorf("haproxy: invalid server name %q", n.Name)
		}
		if _, _, err := net.SplitHostPort(n.HTTPAddr); err != nil {
			return fmt.Errorf("haproxy: node %s: http address %q: %w", n.Name, n.HTTPAddr, err)
		}
		if c.SSHAddr != "" {
			if _, _, err := net.SplitHostPort(n.SSHAddr); err != nil {
				return fmt.Errorf("haproxy: node %s: ssh address %q: %w", n.Name, n.SSHAddr, err)
			}
		}
	}
	return nil
}

// ms renders a duration in HAProxy's millisecond syntax.
func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// Render returns the configuration text.
func (c Config) Render() string {
	c = c.withDefaults()
	var b strings.Builder
	b.WriteString("global\n")
	fmt.Fprintf(&b, "    maxconn %d\n", c.MaxConn)
	if c.StatsSocket != "" {
		fmt.Fprintf(&b, "    stats socket %s mode 600 level admin\n", c.StatsSocket)
	}
	fmt.Fprintf(&b, `
defaults
    log stdout format raw local0 warning
    timeout connect 5s
    timeout client %[1]s
    timeout server %[1]s
    timeout check 2s
    # A refused connection (node just died) is retried on another node.
    retries 3
    option redispatch

frontend %[2]s
    mode http
    bind %[3]s
    option forwardfor
    default_backend %[2]s

backend %[2]s
    mode http
    balance %[4]s
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter %[5]s fall %[6]d rise %[7]d
`, ms(c.Timeout), HTTPBackend, c.HTTPAddr, c.Balance, ms(c.CheckInterval), c.Fall, c.Rise)
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "    server %s %s check\n", n.Name, n.HTTPAddr)
	}
	if c.SSHAddr != "" {
		fmt.Fprintf(&b, `
frontend %[1]s
    mode tcp
    bind %[2]s
    default_backend %[1]s

backend %[1]s
    mode tcp
    balance leastconn
    # Health of SSH follows the node's HTTP readiness (the database check).
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter %[3]s fall %[4]d rise %[5]d send-proxy-v2
`, SSHBackend, c.SSHAddr, ms(c.CheckInterval), c.Fall, c.Rise)
		for _, n := range c.Nodes {
			_, port, _ := net.SplitHostPort(n.HTTPAddr)
			fmt.Fprintf(&b, "    server %s %s check port %s\n", n.Name, n.SSHAddr, port)
		}
	}
	return b.String()
}

// Proxy is a running HAProxy.
type Proxy struct {
	cfg     Config
	sockDir string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	logPath string
	cfgPath string
}

// Start writes dir/haproxy.cfg, checks it with `haproxy -c` and starts
// HAProxy in the foreground (-db) with its log in dir/haproxy.log. HAProxy
// runs in a process group of its own (a ^C meant for the caller does not
// reach it before Stop) and is killed if the caller dies.
func Start(cfg Config, dir string) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(Binary); err != nil {
		return nil, fmt.Errorf("haproxy not installed (apt-get install haproxy): %w", err)
	}
	// The stats socket lives in a short directory of its own: a unix
	// socket path is limited to 108 bytes, and dir may be deep.
	sockDir, err := os.MkdirTemp("", "sluice-haproxy-")
	if err != nil {
		return nil, err
	}
	cfg.StatsSocket = filepath.Join(sockDir, "admin.sock")
	p := &Proxy{cfg: cfg.withDefaults(), sockDir: sockDir, done: make(chan struct{}),
		logPath: filepath.Join(dir, "haproxy.log"), cfgPath: filepath.Join(dir, "haproxy.cfg")}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(sockDir)
		}
	}()
	if err := os.WriteFile(p.cfgPath, []byte(cfg.Render()), 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.Command(Binary, "-c", "-f", p.cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c: %v: %s", err, strings.TrimSpace(string(out)))
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(Binary, "-db", "-f", p.cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	ok = true
	return p, nil
}

// URL is the HTTP frontend's base URL.
func (p *Proxy) URL() string { return "http://" + p.cfg.HTTPAddr }

// SSHAddr is the SSH frontend's host:port ("" without SSH).
func (p *Proxy) SSHAddr() string { return p.cfg.SSHAddr }

// LogTail returns the end of HAProxy's log, for error messages.
func (p *Proxy) LogTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// Pid is HAProxy's process id.
func (p *Proxy) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether HAProxy has ended, with its error.
func (p *Proxy) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop stops HAProxy (SIGTERM, SIGKILL after 5 s) and removes its socket.
func (p *Proxy) Stop() error {
	if done, _ := p.Exited(); !done {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	return os.RemoveAll(p.sockDir)
}

// ServerState is one backend server as HAProxy sees it.
type ServerState struct {
	Backend, Server string
	// Status is HAProxy's: "UP", "DOWN", "UP 1/2" (rising), "MAINT", …
	Status string
}

// Up is whether the server takes traffic and is not on its way out.
func (s ServerState) Up() bool { return s.Status == "UP" }

// Servers asks HAProxy's stats socket for every backend server's state.
func (p *Proxy) Servers(ctx context.Context) ([]ServerState, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", p.cfg.StatsSocket)
	if err != nil {
		return nil, fmt.Errorf("haproxy stats socket: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		return nil, fmt.Errorf("haproxy stats socket: %w", err)
	}
	return parseStat(bufio.NewReader(conn))
}

// parseStat reads "show stat" CSV: a "# pxname,svname,…" header line,
// then one row per frontend, server and backend.
func parseStat(r io.Reader) ([]ServerState, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("haproxy show stat: %w", err)
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(strings.TrimSpace(header[0]), "# ")
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	px, okPx := col["pxname"]
	sv, okSv := col["svname"]
	st, okSt := col["status"]
	if !okPx || !okSv || !okSt {
		return nil, fmt.Errorf("haproxy show stat: unexpected header %q", strings.Join(header, ","))
	}
	var out []ServerState
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("haproxy show stat: %w", err)
		}
		if len(rec) <= max(px, sv, st) || rec[sv] == "FRONTEND" || rec[sv] == "BACKEND" {
			continue
		}
		out = append(out, ServerState{Backend: rec[px], Server: rec[sv], Status: rec[st]})
	}
}

// WaitRouted waits until HAProxy has marked want servers UP in every
// backend it serves (HTTP, and SSH when configured), or ctx ends, or
// HAProxy exits.
func (p *Proxy) WaitRouted(ctx context.Context, want int) error {
	backends := []string{HTTPBackend}
	if p.cfg.SSHAddr != "" {
		backends = append(backends, SSHBackend)
	}
	var last string
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("haproxy exited: %v: %s", err, p.LogTail(2000))
		}
		states, err := p.Servers(ctx)
		if err == nil {
			up := map[string]int{}
			for _, s := range states {
				if s.Up() {
					up[s.Backend]++
				}
			}
			routed := true
			for _, b := range backends {
				routed = routed && up[b] >= want
			}
			if routed {
				return nil
			}
			last = fmt.Sprintf("servers %v", states)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy does not route to %d nodes: %w (last: %s)", want, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
