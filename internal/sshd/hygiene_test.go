package sshd_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/sshd"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// syncBuffer is a log sink the server's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHygiene runs the connection-hygiene scenarios, each against an SSH
// server of its own configuration built on one node's store, auth and
// hosting service.
func TestHygiene(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{})
	r := n.CreateRepo(t, "PROJ", "app")
	u := n.CreateUser(t, "alice", "alice-password")
	n.Grant(t, r, u.ID, store.PermRepoWrite)
	k := newKey(t)
	register(t, n, k, u.ID, 0, "")
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, func(sshd.Config) *hygiene)
	}{
		{"UnauthenticatedLimitAndHandshakeTimeout", testUnauthenticatedLimitAndHandshakeTimeout},
		{"MaxSessions", testMaxSessions},
		{"IdleTimeout", testIdleTimeout},
		{"KeepAliveDropsDeadPeer", testKeepAliveDropsDeadPeer},
		{"ShutdownDrains", testShutdownDrains},
		{"ProxyProtocol", testProxyProtocol},
		{"IdleFloodDoesNotLockOut", testIdleFloodDoesNotLockOut},
		{"ProxiedFloodCountsHeaderAddress", testProxiedFloodCountsHeaderAddress},
		{"SlowPassphraseOutlivesHandshakeTimeout", testSlowPassphraseOutlivesHandshakeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, func(cfg sshd.Config) *hygiene { return newHygiene(t, n, k, cfg) })
		})
	}
}

// hygiene is an SSH server built on a node's components with the
// configuration a test needs.
type hygiene struct {
	srv      *sshd.Server
	addr     string
	log      *syncBuffer
	key      *key
	done     chan error
	once     sync.Once
	serveErr error
}

func newHygiene(t *testing.T, n *testbed.Node, k *key, cfg sshd.Config) *hygiene {
	t.Helper()
	return newHygieneOn(t, n, k, cfg, n.Store(), n.App.Auth)
}

// newHygieneOn is newHygiene with the store and auth service of the
// test's choice (a store that fails, say) instead of the node's.
func newHygieneOn(t *testing.T, n *testbed.Node, k *key, cfg sshd.Config, st store.Store, authn *auth.Service) *hygiene {
	t.Helper()
	h := &hygiene{log: &syncBuffer{}, key: k, done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := sshd.New(cfg, n.App.Hosting, authn, st, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.srv, h.addr = srv, ln.Addr().String()
	go func() { h.done <- srv.Serve(ln) }()
	t.Cleanup(func() { h.shutdown(t, 5*time.Second) })
	return h
}

// shutdown shuts the server down and checks what Serve returned.
func (h *hygiene) shutdown(t *testing.T, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	h.once.Do(func() { h.serveErr = <-h.done })
	if h.serveErr != sshd.ErrServerClosed {
		t.Errorf("Serve returned %v, want ErrServerClosed", h.serveErr)
	}
	return err
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF, not a deadline
}

func testUnauthenticatedLimitAndHandshakeTimeout(t *testing.T, newHygiene func(sshd.Config) *hygiene) {
	h := newHygiene(sshd.Config{MaxUnauthenticated: 1, HandshakeTimeout: time.Second, KeepAlive: -1})
	first, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The server's banner means the first connection holds the only
	// unauthenticated slot.
	banner, err := bufio.NewReader(first).ReadString('\n')
	if err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Fatalf("banner %q, %v", banner, err)
	}
	start := time.Now()
	second, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if !closedWithin(second, 2*time.Second) {
		t.Error("a connection over the unauthenticated limit was not closed at once")
	}
	if time.Since(start) > time.Second/2 {
		t.Errorf("refusing took %s", time.Since(start))
	}
	// The silent first connection goes when the handshake time is up...
	if !closedWithin(first, 5*time.Second) {
		t.Error("a silent connection outlived the handshake timeout")
	}
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Errorf("silent connection closed after %s, before the 1s handshake timeout", el)
	}
	// ...and frees the slot for a real client (the client may see the
	// close a moment before the server gives the slot back).
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := goClient(t, h.addr, ssh.PublicKeys(h.key.signer))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the slot was freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testMaxSessions(t *testing.T, newHygiene func(sshd.Config) *hygiene) {
	h := newHygiene(sshd.Config{MaxSessions: 1})
	c, err := goClient(t, h.addr, ssh.PublicKeys(h.key.signer))
	if err != nil {
		t.Fatal(err)
	}
	s1, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if s2, err := c.NewSession(); err == nil {
		s2.Close()
		t.Fatal("a second session opened past MaxSessions=1")
	}
	s1.Close()
	// The slot comes back once the first session is gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := c.NewSession()
		if err == nil {
			s.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session after the first closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testIdleTimeout(t *testing.T, newHygiene func(sshd.Config) *hygiene) {
	// Keepalives run faster than the idle timeout and must not count as
	// activity.
	h := newHygiene(sshd.Config{IdleTimeout: 400 * time.Millisecond, KeepAlive: 100 * time.Millisecond})
	c, err := goClient(t, h.addr, ssh.PublicKeys(h.key.signer))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waited := make(chan struct{})
	go func() {
		c.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("idle connection still open after 5s")
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("closed after %s, before the idle timeout", el)
	}
	waitLog(t, h.log, "end=\"idle timeout\"")
}

func testKeepAliveDropsDeadPeer(t *testing.T, newHygiene func(sshd.Config) *hygiene) {
	h := newHygiene(sshd.Config{IdleTimeout: -1, KeepAlive: 100 * time.Millisecond})
	raw, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn, chans, reqs, err := ssh.NewClientConn(raw, h.addr, &ssh.ClientConfig{
		User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(h.key.signer)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go ssh.DiscardRequests(nil)
	go func() {
		for nc := range chans {
			_ = nc.Reject(ssh.Prohibited, "")
		}
	}()
	// A peer that reads keepalives but never answers them.
	go func() {
		for range reqs {
		}
	}()
	waited := make(chan struct{})
	go func() {
		conn.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("connection of a peer ignoring keepalives still open after 5s")
	}
	waitLog(t, h.log, "end=\"keepalive timeout\"")
}

// testShutdownDrains: Shutdown stops accepting at once but lets a running
// push finish before it returns.
func testShutdownDrains(t *testing.T, newHygiene func(sshd.Config) *hygiene) {
	h := newHygiene(sshd.Config{})
	c, err := goClient(t, h.addr, ssh.PublicKeys(h.key.signer))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdin, _ := s.StdinPipe()
	stdout, _ := s.StdoutPipe()
	if err := s.Start("git-receive-pack '/PROJ/app.git'"); err != nil {
		t.Fatal(err)
	}
	// receive-pack has advertised (an empty repository: a capabilities
	// line, then a flush) and now waits for commands.
	br := bufio.NewReader(stdout)
	adv := readUntilFlush(t, br)
	if !strings.Contains(adv, "report-status") {
		t.Fatalf("advertisement %q", adv)
	}

	shut := make(chan error, 1)
	go func() { shut <- h.shutdown(t, 10*time.Second) }()
	// New connections are refused while the push is still running.
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting during shutdown")
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a push was running", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The client finishes its (empty) push: a flush ends the commands.
	io.WriteString(stdin, "0000")
	stdin.Close()
	if err := s.Wait(); err != nil {
		t.Fatalf("push during shutdown: %v", err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the push finished")
	}
}

func readUntilFlush(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var out strings.Builder
	for {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			t.Fatalf("read pkt-line: %v (so far %q)", err, out.String())
		}
		if string(n[:]) == "0000" {
			return out.String()
		}
		var size int
		for _, c := range n {
			size <<= 4
			switch {
			case c >= '0' && c <= '9':
				size |= int(c - '0')
			case c >= 'a' && c <= 'f':
				size |= int(c-'a') + 10
			}
		}
		b := make([]byte, size-4)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatal(err)
		}
		out.Write(b)
	}
}

func testProxyProtocol(t *testing.T, newHygiene func(sshd.Config) *hygiene) {
	dialWithHeader := func(t *testing.T, h *hygiene, header string) (*ssh.Client, error) {
		raw, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(raw, header); err != nil {
			t.Fatal(err)
		}
		conn, chans, reqs, err := ssh.NewClientConn(raw, h.addr, &ssh.ClientConfig{
			User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(h.key.signer)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(),
			Timeout: 5 * time.Second,
		})
		if err != nil {
			raw.Close()
			return nil, err
		}
		c := ssh.NewClient(conn, chans, reqs)
		t.Cleanup(func() { c.Close() })
		return c, nil
	}
	t.Run("trusted", func(t *testing.T) {
		h := newHygiene(sshd.Config{ProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		c, err := dialWithHeader(t, h, "PROXY TCP4 203.0.113.7 127.0.0.1 5555 7999\r\n")
		if err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := run(t, c, "0000", "git-upload-pack '/PROJ/app.git'"); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		c.Close()
		waitLog(t, h.log, "remote_addr=203.0.113.7:5555")
		// A trusted proxy may also connect for itself, without a header.
		if c, err := goClient(t, h.addr, ssh.PublicKeys(h.key.signer)); err != nil {
			t.Errorf("trusted peer without a header: %v", err)
		} else {
			c.Close()
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		h := newHygiene(sshd.Config{ProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
		if _, err := dialWithHeader(t, h, "PROXY TCP4 203.0.113.7 127.0.0.1 5555 7999\r\n"); err == nil {
			t.Fatal("a PROXY header from an untrusted peer was accepted")
		}
		if _, err := dialWithHeader(t, h, "\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c"+"\xcb\x00\x71\x07\x7f\x00\x00\x01\x15\xb3\x1f\x3f"); err == nil {
			t.Fatal("a PROXY v2 header from an untrusted peer was accepted")
		}
		if strings.Contains(h.log.String(), "203.0.113.7") {
			t.Error("the untrusted header's address reached the log as the client's")
		}
		// Plain clients still connect.
		if c, err := goClient(t, h.addr, ssh.PublicKeys(h.key.signer)); err != nil {
			t.Errorf("plain client: %v", err)
		} else {
			c.Close()
		}
	})
}

// waitLog waits for the server to log want: the connection line is
// written after the client has seen the connection close.
func waitLog(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %q:\n%s", want, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
