package testbed

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/haproxy"
	"github.com/sluice-scm/sluice/internal/pgserver"
	"github.com/sluice-scm/sluice/internal/store"
)

// A test cluster: a PostgreSQL of its own, one repository directory shared
// by every node (standing in for NFS), n sluice nodes and HAProxy in front.
//
// Nodes run as subprocesses of the built binary (Binary), not in-process:
// Kill is then a real SIGKILL of the node's process group, git children
// included — no deferred function runs, no socket is closed politely, the
// registry row stays behind — which is what the crash scenarios must
// exercise. Each node keeps its ports across Restart, so HAProxy's fixed
// server list finds it again. HAProxy (internal/haproxy, shared with the
// performance lab) checks GET /readyz every 200 ms and takes a node out
// after two failures, back in after two successes; it retries a refused
// connection on another node.
//
// The cluster's PostgreSQL is not the test package's shared one: the
// outage scenario stops and restarts it (HaltPostgres, ResumePostgres).

// ClusterOptions adjust NewCluster.
type ClusterOptions struct {
	// SSH starts every node's SSH server behind HAProxy's TCP frontend
	// (PROXY protocol v2 from HAProxy, as in deploy/haproxy.cfg).
	SSH bool
	// Config is extra TOML appended to every node's configuration.
	Config string
}

// Cluster is a running test cluster.
type Cluster struct {
	t             testing.TB
	bin           string
	dir           string
	pg            *pgserver.Server
	DatabaseURL   string
	Repositories  string
	AdminPassword string
	Nodes         []*ClusterNode
	lb            *haproxy.Proxy
	opts          ClusterOptions
	sshEnv        []string
}

// ClusterNode is one node process.
type ClusterNode struct {
	ID       string
	HTTPAddr string
	SSHAddr  string // "" without SSH
	dir      string
	config   string
	logPath  string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
}

// URL is the node's own HTTP URL, bypassing HAProxy.
func (n *ClusterNode) URL() string { return "http://" + n.HTTPAddr }

// ConfigPath is the node's TOML configuration (for admin CLI commands).
func (n *ClusterNode) ConfigPath() string { return n.config }

// NewCluster starts PostgreSQL, n nodes and HAProxy, and waits until
// HAProxy routes to every node. Everything stops when the test ends.
func NewCluster(t testing.TB, n int, opts ClusterOptions) *Cluster {
	t.Helper()
	skipShort(t)
	if _, err := os.Stat(haproxy.Binary); err != nil {
		t.Fatalf("haproxy is required for cluster tests (apt-get install haproxy): %v", err)
	}
	c := &Cluster{t: t, bin: Binary(t), dir: t.TempDir(), AdminPassword: "admin-password-for-cluster-tests", opts: opts}
	pg, err := pgserver.Start(pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.pg = pg
	t.Cleanup(func() { pg.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.DatabaseURL, err = pg.CreateDatabase(ctx, "sluice"); err != nil {
		t.Fatal(err)
	}
	c.Repositories = filepath.Join(c.dir, "shared-repos")

	for i := range n {
		node := &ClusterNode{ID: fmt.Sprintf("node-%d", i+1), dir: filepath.Join(c.dir, fmt.Sprintf("node-%d", i+1))}
		node.HTTPAddr = freeAddr(t)
		if opts.SSH {
			node.SSHAddr = freeAddr(t)
		}
		if err := os.MkdirAll(node.dir, 0o750); err != nil {
			t.Fatal(err)
		}
		node.config = filepath.Join(node.dir, "node.toml")
		node.logPath = filepath.Join(node.dir, "node.log")
		if err := os.WriteFile(node.config, []byte(c.nodeConfig(node)), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, node)
	}
	t.Cleanup(c.stopAll)
	// The first node migrates alone; the others then start together.
	c.start(0)
	c.WaitReady(0)
	for i := 1; i < n; i++ {
		c.start(i)
	}
	for i := 1; i < n; i++ {
		c.WaitReady(i)
	}
	c.startHAProxy()
	c.WaitRouted(n)
	return c
}

func (c *Cluster) nodeConfig(n *ClusterNode) string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "[data]\ndir = %s\n\n", q(filepath.Join(n.dir, "data")))
	fmt.Fprintf(&b, "[server]\nhttp_addr = %s\nssh_addr = %s\nshutdown_timeout = \"5s\"\n", q(n.HTTPAddr), q(n.SSHAddr))
	if c.opts.SSH {
		b.WriteString("proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1/32\"]\n")
	}
	fmt.Fprintf(&b, "\n[database]\nurl = %s\n\n", q(c.DatabaseURL))
	fmt.Fprintf(&b, "[storage]\nrepositories = %s\n\n", q(c.Repositories))
	fmt.Fprintf(&b, "[cache]\ndir = %s\n\n", q(filepath.Join(n.dir, "cache")))
	// Clone storms come from one user: per-user rate limits are not what
	// these scenarios measure.
	b.WriteString("[throttle]\nrate_limit = false\n\n")
	fmt.Fprintf(&b, "[node]\nid = %s\n\n", q(n.ID))
	b.WriteString(c.opts.Config)
	return b.String()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "serve", "--config", n.config)
	if err := os.MkdirAll(n.holdDir(), 0o750); err != nil {
		logf.Close()
		c.t.Fatal(err)
	}
	// SLUICETEST_PHASE_HOLD_DIR: the test-only fault hook (HoldPhase).
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_PASSWORD="+c.AdminPassword, "SLUICE_CONFIG=",
		"SLUICETEST_PHASE_HOLD_DIR="+n.holdDir())
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: Kill takes the node's git children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
}

// WaitReady waits until node i answers /readyz with 200.
func (c *Cluster) WaitReady(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	deadline := time.Now().Add(60 * time.Second)
	for {
		n.mu.Lock()
		exited := n.exited
		n.mu.Unlock()
		select {
		case <-exited:
			c.t.Fatalf("%s exited during start:\n%s", n.ID, tailFile(n.logPath, 3000))
		default:
		}
		if status(n.URL()+"/readyz") == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready within 60s:\n%s", n.ID, tailFile(n.logPath, 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func status(u string) int {
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(u)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Kill sends SIGKILL to node i and to every process descended from it,
// and waits for the node to die. The node's own process group is not
// enough: gitcmd starts each git in a process group of its own (so that a
// timeout kills its whole tree), and a crash must take those too, as a
// machine's would. The tree is frozen first (SIGSTOP), so that nothing
// forks between being listed and being killed.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGSTOP)
	tree := map[int]bool{pid: true}
	// Each round stops the children of what the last one found; a tree
	// deeper than this bound is no node's (node → git → hook → git).
	for range 16 {
		grown := false
		for p, parent := range processParents() {
			if tree[parent] && !tree[p] {
				syscall.Kill(p, syscall.SIGSTOP)
				tree[p], grown = true, true
			}
		}
		if !grown {
			break
		}
	}
	for p := range tree {
		syscall.Kill(p, syscall.SIGKILL)
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
}

// processParents maps every process's pid to its parent's (Linux /proc).
func processParents() map[int]int {
	entries, _ := os.ReadDir("/proc")
	parents := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …"; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			parents[pid] = ppid
		}
	}
	return parents
}

// HoldPhase makes node i hold the next reference-transaction call in
// phase ("prepared", "committed" or "aborted") for repository repoID, with
// git inside it and its ref locks taken, for up to a minute (the node's
// test-only hook, see internal/app's testPhaseHold). WaitHeld says when
// it is held; the test then kills the node.
func (c *Cluster) HoldPhase(i int, phase string, repoID int64) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.Nodes[i].holdDir(), fmt.Sprintf("%s-%d", phase, repoID)), nil, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// WaitHeld waits up to limit until node i holds a call HoldPhase asked
// for, and reports whether it does.
func (c *Cluster) WaitHeld(i int, phase string, repoID int64, limit time.Duration) bool {
	held := filepath.Join(c.Nodes[i].holdDir(), fmt.Sprintf("held-%s-%d", phase, repoID))
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(held); err == nil {
			os.Remove(held)
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (n *ClusterNode) holdDir() string { return filepath.Join(n.dir, "hold") }

// Stop stops node i cleanly (SIGTERM) and waits for it.
func (c *Cluster) Stop(i int) {
	n := c.Nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// Restart starts node i again on its old ports and waits until it is
// ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Stop(i)
	c.start(i)
	c.WaitReady(i)
}

// Start starts node i again after Kill or Stop, without waiting (then
// WaitReady).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.start(i)
}

func (c *Cluster) stopAll() {
	if c.lb != nil {
		c.lb.Stop()
	}
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop(i) }()
	}
	wg.Wait()
	if c.t.Failed() {
		for _, n := range c.Nodes {
			c.t.Logf("--- %s log (tail) ---\n%s", n.ID, tailFile(n.logPath, 4000))
		}
	}
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// HaltPostgres stops the cluster's PostgreSQL; ResumePostgres starts it
// again with its data and port.
func (c *Cluster) HaltPostgres() {
	c.t.Helper()
	if err := c.pg.Halt(); err != nil {
		c.t.Fatal(err)
	}
}

// ResumePostgres restarts the PostgreSQL HaltPostgres stopped.
func (c *Cluster) ResumePostgres() {
	c.t.Helper()
	if err := c.pg.Resume(); err != nil {
		c.t.Fatal(err)
	}
}

// LB is HAProxy's HTTP URL.
func (c *Cluster) LB() string { return c.lb.URL() }

// LBSSH is HAProxy's SSH address (host:port); "" without SSH.
func (c *Cluster) LBSSH() string { return c.lb.SSHAddr() }

// startHAProxy puts HAProxy in front of the nodes (internal/haproxy, the
// shape of deploy/haproxy.cfg) with test timings: checks every 200 ms so a
// killed node leaves the rotation within half a second.
func (c *Cluster) startHAProxy() {
	c.t.Helper()
	cfg := haproxy.Config{HTTPAddr: freeAddr(c.t), Balance: "roundrobin", CheckInterval: 200 * time.Millisecond,
		Timeout: 120 * time.Second, MaxConn: 2000}
	if c.opts.SSH {
		cfg.SSHAddr = freeAddr(c.t)
	}
	for _, n := range c.Nodes {
		cfg.Nodes = append(cfg.Nodes, haproxy.Node{Name: n.ID, HTTPAddr: n.HTTPAddr, SSHAddr: n.SSHAddr})
	}
	lb, err := haproxy.Start(cfg, c.dir)
	if err != nil {
		c.t.Fatal(err)
	}
	c.lb = lb
}

// WaitRouted waits until HAProxy has marked want nodes up (from its stats
// socket) in every backend.
func (c *Cluster) WaitRouted(want int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.lb.WaitRouted(ctx, want); err != nil {
		c.t.Fatalf("%v\n%s", err, c.lb.LogTail(2000))
	}
}

// CloneURL is the HTTP clone URL of a repository through HAProxy, with
// the admin's credentials; base may be a node's URL instead.
func (c *Cluster) CloneURL(base, projectKey, slug string) string {
	u, _ := url.Parse(base + "/scm/" + strings.ToLower(projectKey) + "/" + slug + ".git")
	u.User = url.UserPassword("admin", c.AdminPassword)
	return u.String()
}

// SSHCloneURL is the SSH clone URL of a repository through HAProxy.
func (c *Cluster) SSHCloneURL(projectKey, slug string) string {
	return "ssh://git@" + c.LBSSH() + "/" + strings.ToLower(projectKey) + "/" + slug + ".git"
}

// REST calls the REST API through HAProxy as the admin and decodes the
// answer into out (may be nil). It returns the status.
func (c *Cluster) REST(method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.LB()+path, rd)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("admin", c.AdminPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s: %w: %s", method, path, err, b)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return resp.StatusCode, nil
}

// CreateRepo creates a project (if needed) and a repository through the
// REST API and returns the repository's slug.
func (c *Cluster) CreateRepo(t testing.TB, projectKey, name string) string {
	t.Helper()
	if code, err := c.REST("POST", "/rest/api/1.0/projects", map[string]any{"key": projectKey, "name": projectKey}, nil); err != nil && code != http.StatusConflict {
		t.Fatal(err)
	}
	var r struct {
		Slug string `json:"slug"`
	}
	if _, err := c.REST("POST", "/rest/api/1.0/projects/"+projectKey+"/repos", map[string]any{"name": name}, &r); err != nil {
		t.Fatal(err)
	}
	return r.Slug
}

// SSHEnv returns environment entries that make git use a fresh key of
// the admin's over SSH (the key is registered on first use).
func (c *Cluster) SSHEnv(t testing.TB) []string {
	t.Helper()
	if c.sshEnv != nil {
		return c.sshEnv
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(c.dir, "admin_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, c.DatabaseURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	admin, err := db.UserByName(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddSSHKey(ctx, &store.SSHKey{UserID: admin.ID, Label: "cluster-test",
		PublicKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))),
		Fingerprint: ssh.FingerprintSHA256(signer.PublicKey())}); err != nil {
		t.Fatal(err)
	}
	// Every node shares one host key (stored in the database), so the
	// known_hosts entry written on first contact holds for all of them.
	c.sshEnv = []string{"GIT_SSH_COMMAND=ssh -F /dev/null -i " + keyFile + " -o IdentitiesOnly=yes -o UserKnownHostsFile=" +
		filepath.Join(c.dir, "known_hosts") + " -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR"}
	return c.sshEnv
}

// Admin runs `sluice admin ARGS…` against node i's configuration and
// returns its stdout.
func (c *Cluster) Admin(t testing.TB, i int, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.bin, append(append([]string{"admin"}, args...), "--config", c.Nodes[i].config)...)
	cmd.Env = append(os.Environ(), "SLUICE_CONFIG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice admin %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
