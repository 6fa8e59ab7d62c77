// Package sshd is Sluice's built-in SSH server: git over SSH as Bitbucket
// serves it (ssh://git@HOST:7999/PROJ/repo.git), with no OpenSSH install.
//
// It is a thin transport. It authenticates a connection by public key,
// parses exactly one exec request per session against a fixed grammar, and
// hands the session's streams to hosting.Service.Serve — the same runner,
// Authorize, rate limit, tickets and operation log line as smart HTTP. It
// never runs git itself and never gives a user string to a shell.
//
// # Identity
//
// x/crypto/ssh calls PublicKeyCallback for every key a client offers,
// including keys it never proves it holds (CVE-2024-45337). The callback
// therefore decides nothing about identity: it only says whether a key is
// registered, and returns the key inside ssh.Permissions. After the
// handshake the principal is resolved (auth.Service.PublicKey) from the
// Permissions of the established connection, which x/crypto sets from the
// key whose signature it verified — never from state the callback left
// behind.
//
// Unknown keys are refused at the public-key step, so a client with
// several keys (an agent) goes on to offer the one Sluice knows. When none
// is left, OpenSSH falls back to keyboard-interactive, which fails with an
// authentication banner saying that no offered key is registered — the
// one thing such a user needs to know, and nothing a client could not
// learn already (whether a public key is registered is what the
// public-key query answers anyway). OpenSSH prints banners at its default
// log level; with BatchMode=yes it skips keyboard-interactive and the
// client sees only its own "Permission denied (publickey,…)". Anonymous
// read of public repositories is an HTTP feature only. A known key
// without access to a repository, and a repository that does not exist,
// both answer "repository not found or access denied".
//
// When a key cannot be looked up at all (the database is down), the
// public-key step accepts it with Permissions that name no one and say
// why; every command of that session then answers that the service is
// temporarily unavailable, with exit status 75 (EX_TEMPFAIL), instead of
// a denial the user would try to fix by changing keys or permissions.
//
// # Exit statuses
//
// 0 on success; git's own status when git failed (it has explained itself
// on stderr); 75 (EX_TEMPFAIL) when the server is unavailable or
// throttling and the same command may succeed later; 1 for every other
// refusal.
//
// # Requests
//
// Sessions accept "env" for GIT_PROTOCOL only (validated; every other
// variable — LD_PRELOAD, GIT_CONFIG_*, GIT_SSH_COMMAND — is refused and
// has no effect) and one "exec". Shells, ptys, X11, agent forwarding,
// subsystems, port forwarding and every other channel type are refused.
//
// # Connection hygiene
//
// Connections that have not authenticated yet are bounded in total and
// per source address (the PROXY header's when the peer is a trusted
// proxy; an IPv6 /64 is one source). The slot is taken at accept, before
// any byte is read, so a flood of idle TCP connections costs no key
// exchange, and over either bound a connection is closed at once. The
// per-source bound is what keeps everyone else getting in: without it, a
// hundred idle connections from one host took every slot until the
// handshake deadline freed them. Deadlines are short where a machine is
// waiting (HandshakeTimeout, to the end of the key exchange) and longer
// where a person may be (AuthTimeout, for typing a key's passphrase).
// Sessions per connection are bounded; a connection with no channel
// traffic for IdleTimeout is closed; keepalive@openssh.com requests detect
// dead peers (three unanswered ones close the connection). Shutdown stops
// accepting, lets running git operations finish, then closes every
// connection.
//
// Behind a TCP load balancer the PROXY protocol (v1 or v2) gives the real
// client address; it is read only from TrustedProxies, and a PROXY header
// from anyone else is refused.
package sshd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Config tunes the server. Zero values take the defaults named on each
// field; a negative IdleTimeout or KeepAlive disables that check.
type Config struct {
	// Addr is the listen address for ListenAndServe.
	Addr string
	// IdleTimeout closes a connection whose channels moved no data for
	// this long (default 10 minutes).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the time from accept to the end of the key
	// exchange, PROXY header included (default 10 seconds): it is how long
	// a connection that never speaks holds its unauthenticated slot.
	HandshakeTimeout time.Duration
	// AuthTimeout bounds the time from accept to authenticated (default
	// 60 seconds; never less than HandshakeTimeout). It is longer than the
	// handshake's because OpenSSH asks for a key's passphrase after the
	// key exchange, and a person types it.
	AuthTimeout time.Duration
	// MaxSessions bounds the open sessions of one connection (default
	// 10, OpenSSH's MaxSessions).
	MaxSessions int
	// MaxUnauthenticated bounds concurrent connections that have not
	// finished authenticating (default 100, OpenSSH's MaxStartups).
	MaxUnauthenticated int
	// MaxUnauthenticatedPerSource bounds them per source address — the
	// PROXY protocol's when the peer is a trusted proxy; an IPv6 /64
	// counts as one address (default 20, so that one address cannot take
	// more than a fifth of the default total).
	MaxUnauthenticatedPerSource int
	// KeepAlive is the interval of keepalive@openssh.com requests
	// (default 30 seconds); three unanswered in a row close the
	// connection.
	KeepAlive time.Duration
	// ProxyProtocol reads a PROXY protocol v1/v2 header from connections
	// whose peer is in TrustedProxies.
	ProxyProtocol bool
	// TrustedProxies are the networks of proxies (config's
	// TrustedProxyNets, parsed once for every transport).
	TrustedProxies []netip.Prefix
	// ReadOnly, when set, says whether the database is unavailable;
	// pushes are then refused with a clear message (readonly.go).
	ReadOnly func(context.Context) bool
}

const (
	defaultIdleTimeout      = 10 * time.Minute
	defaultHandshakeTimeout = 10 * time.Second
	defaultAuthTimeout      = 60 * time.Second
	defaultMaxSessions      = 10
	defaultMaxUnauth        = 100
	defaultMaxUnauthSource  = 20
	defaultKeepAlive        = 30 * time.Second
	// keepAliveMisses is how many unanswered keepalives end a connection;
	// OpenSSH's ServerAliveCountMax default.
	keepAliveMisses = 3
)

// ErrServerClosed is what Serve returns after Shutdown.
var ErrServerClosed = errors.New("ssh server closed")

// msgDenied is the one answer to an unknown key, another user's key, a
// missing repository and one the caller may not read.
const msgDenied = "repository not found or access denied"

// msgNoKey is the authentication banner for a client none of whose keys is
// registered.
const msgNoKey = "sluice: none of the SSH keys this client offered is registered. " +
	"Add your public key to your Sluice account (or have an administrator add it), " +
	"and check which keys ssh offers with ssh -v."

// msgUnavailable answers every command of a connection whose key could not
// be checked because the database is unreachable.
const msgUnavailable = "sluice is temporarily unavailable: it cannot check SSH keys right now; try again shortly"

// Exit statuses. Git prints our stderr and fails either way; the status is
// for scripts that call ssh directly and want to know whether retrying can
// help.
const (
	exitFailed = 1
	// exitTempFail is sysexits.h's EX_TEMPFAIL: the server is unavailable
	// or throttling, and the same command may succeed later.
	exitTempFail = 75
)

// msgNoShell answers shell requests.
const msgNoShell = "sluice does not provide shell access"

// Permission extensions set by the authentication callbacks.
const (
	extKey          = "sluice-key"           // the wire-format public key
	extKeyFP        = "sluice-key-fp"        // its SHA-256 fingerprint
	extLookupFailed = "sluice-lookup-failed" // nobody: the key could not be looked up ("unavailable" or "internal")
)

// Server is the SSH server.
type Server struct {
	cfg      Config
	svc      *hosting.Service
	authn    *auth.Service
	st       store.Store
	logger   *slog.Logger
	hostKeys []ssh.Signer
	trusted  []netip.Prefix
	gate     *gate
	refused  quietLog
	m        metrics

	// ctx ends when Shutdown gives up waiting: running git processes are
	// killed through it.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closing   bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	connWG    sync.WaitGroup
	// ops counts running git operations; Add happens under mu while not
	// closing, so it never races with Shutdown's Wait.
	ops sync.WaitGroup
}

type metrics struct {
	total        prometheus.Counter
	active       prometheus.Gauge
	authFailures *prometheus.CounterVec
}

// New builds a server. It loads the cluster's host keys from st, creating
// them on the first start of the first node.
func New(cfg Config, svc *hosting.Service, authn *auth.Service, st store.Store, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if svc == nil || authn == nil || st == nil {
		return nil, errors.New("sshd: hosting, auth and store are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "sshd")
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = defaultMaxSessions
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = defaultAuthTimeout
	}
	cfg.AuthTimeout = max(cfg.AuthTimeout, cfg.HandshakeTimeout)
	if cfg.MaxUnauthenticated <= 0 {
		cfg.MaxUnauthenticated = defaultMaxUnauth
	}
	if cfg.MaxUnauthenticatedPerSource <= 0 {
		cfg.MaxUnauthenticatedPerSource = defaultMaxUnauthSource
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = defaultKeepAlive
	}
	// Generating an RSA key takes a moment; bound the whole load so a
	// database that hangs fails the start instead of stalling it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys, generated, err := loadHostKeys(ctx, st)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       cfg,
		svc:       svc,
		authn:     authn,
		st:        st,
		logger:    logger,
		hostKeys:  keys,
		trusted:   cfg.TrustedProxies,
		gate:      newGate(cfg.MaxUnauthenticated, cfg.MaxUnauthenticatedPerSource),
		refused:   quietLog{every: 10 * time.Second},
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		m: metrics{
			total: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "sluice_ssh_connections_total",
				Help: "SSH connections accepted.",
			}),
			active: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "sluice_ssh_connections_active",
				Help: "SSH connections open now.",
			}),
			authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "sluice_ssh_auth_failures_total",
				Help: "SSH connections that did not authenticate as a principal, by reason.",
			}, []string{"reason"}),
		},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if reg != nil {
		s.m.total = register(reg, s.m.total)
		s.m.active = register(reg, s.m.active)
		s.m.authFailures = register(reg, s.m.authFailures)
	}
	var fps []string
	for _, k := range keys {
		fps = append(fps, ssh.FingerprintSHA256(k.PublicKey()))
	}
	logger.Info("ssh host keys ready", "generated", generated, "fingerprints", strings.Join(fps, " "))
	return s, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("register metric: %v", err))
	}
	return c
}

// HostKeys returns the public host keys the server presents.
func (s *Server) HostKeys() []ssh.PublicKey {
	var out []ssh.PublicKey
	for _, k := range s.hostKeys {
		out = append(out, k.PublicKey())
	}
	return out
}

// ListenAndServe listens on cfg.Addr and serves until Shutdown.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Shutdown, and then returns
// ErrServerClosed. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var delay time.Duration
	for {
		raw, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: back off as
			// net/http does rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logger.Warn("accept failed; retrying", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := &conn{s: s, raw: raw, start: time.Now()}
		if !s.admit(c) {
			raw.Close()
			continue
		}
		c.touch()
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.pass.release()
			raw.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.connWG.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// admit gives c its unauthenticated slot, or refuses it. It runs in the
// accept loop, before any byte is read and before a goroutine is started,
// so refusing a flood costs next to nothing, and the slots go to
// connections in the order they were accepted.
func (s *Server) admit(c *conn) bool {
	remote := c.raw.RemoteAddr()
	p, ok := s.gate.enter()
	if !ok {
		s.m.total.Inc()
		s.refuse(remote, "too_many_unauthenticated", "too many unauthenticated connections", "server.ssh_max_unauthenticated", s.cfg.MaxUnauthenticated)
		return false
	}
	// A trusted proxy carries many clients; its connections count against
	// the address in their PROXY header instead, once serve has read it.
	c.behindProxy = s.cfg.ProxyProtocol && trusted(s.trusted, remote)
	if !c.behindProxy && !p.bind(remote) {
		p.release()
		s.m.total.Inc()
		s.refuse(remote, "too_many_unauthenticated_source", "too many unauthenticated connections from this address", "server.ssh_max_unauthenticated_per_source", s.cfg.MaxUnauthenticatedPerSource)
		return false
	}
	c.pass = p
	return true
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// beginOp registers a git operation unless the server is shutting down.
func (s *Server) beginOp(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.ops.Add(1)
	c.running.Add(1)
	return true
}

func (s *Server) endOp(c *conn) {
	s.mu.Lock()
	idle := c.running.Add(-1) == 0 && s.closing
	s.mu.Unlock()
	s.ops.Done()
	if idle {
		// Nothing else will run on this connection; during shutdown it
		// can go now rather than when the last operation elsewhere ends.
		c.raw.Close()
	}
}

// Shutdown stops accepting, closes connections with nothing running,
// waits for running git operations to finish (or ctx to end, which kills
// them), then closes every connection and waits for their goroutines.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		if c.running.Load() == 0 {
			c.raw.Close()
		}
	}
	s.mu.Unlock()

	drained := make(chan struct{})
	go func() {
		s.ops.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = ctx.Err()
		s.logger.Warn("shutdown timed out; cutting running git operations")
		s.cancel()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.raw.Close()
	}
	s.mu.Unlock()
	<-drained
	s.connWG.Wait()
	s.cancel()
	return err
}

// conn is one client connection.
type conn struct {
	s     *Server
	raw   net.Conn
	start time.Time

	// Set during the handshake (the callbacks run on serve's goroutine
	// before NewServerConn returns) and read after it.
	remote      string
	rejectedKey bool
	// pass is the connection's unauthenticated slot, taken in admit.
	pass        *pass
	behindProxy bool
	toldNoKey   bool

	// authErr is why the connection has no principal when the reason is
	// the server's (a database that is down), not the client's key.
	authErr error

	sconn       *ssh.ServerConn
	ctx         context.Context
	principal   *auth.Principal
	fingerprint string

	lastActive atomic.Int64 // unix nanoseconds of the last channel traffic
	running    atomic.Int32 // git operations running
	sessions   atomic.Int32 // open session channels
	opened     atomic.Int32 // sessions opened over the connection's life
	closeWhy   atomic.Pointer[string]
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// closeFor closes the connection, remembering the first reason given.
func (c *conn) closeFor(why string) {
	c.closeWhy.CompareAndSwap(nil, &why)
	c.raw.Close()
}

func (c *conn) serve() {
	s := c.s
	defer s.connWG.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	defer c.raw.Close()
	s.m.total.Inc()
	s.m.active.Inc()
	defer s.m.active.Dec()
	c.remote = c.raw.RemoteAddr().String()

	// The slot Serve took in admit is held until authentication
	// completes.
	defer c.pass.release()

	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	c.ctx = ctx

	_ = c.raw.SetDeadline(c.start.Add(s.cfg.HandshakeTimeout))
	nc, err := c.proxy(c.behindProxy)
	if err != nil {
		s.m.authFailures.WithLabelValues("proxy_header").Inc()
		s.logger.Warn("ssh connection refused: bad PROXY header", "remote_addr", c.remote, "err", err)
		return
	}
	c.remote = nc.RemoteAddr().String()
	if c.behindProxy && !c.pass.bind(nc.RemoteAddr()) {
		s.refuse(nc.RemoteAddr(), "too_many_unauthenticated_source", "too many unauthenticated connections from this address", "server.ssh_max_unauthenticated_per_source", s.cfg.MaxUnauthenticatedPerSource)
		return
	}

	sconn, chans, reqs, err := ssh.NewServerConn(nc, c.serverConfig())
	if err != nil {
		reason := "handshake"
		if c.rejectedKey {
			reason = "unknown_key"
		}
		s.m.authFailures.WithLabelValues(reason).Inc()
		s.logger.Info("ssh handshake failed", "remote_addr", c.remote, "reason", reason, "err", err,
			"duration_ms", time.Since(c.start).Milliseconds())
		return
	}
	c.pass.release()
	_ = c.raw.SetDeadline(time.Time{})
	c.sconn = sconn
	defer sconn.Close()
	auth := c.authenticate()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.globalRequests(reqs)
	}()
	go func() {
		defer wg.Done()
		c.monitor(stop, &wg)
	}()
	for nch := range chans {
		c.channel(nch, &wg)
	}
	close(stop)
	cancel()
	sconn.Close()
	wg.Wait()

	why := "closed"
	if p := c.closeWhy.Load(); p != nil {
		why = *p
	}
	s.logger.Info("ssh connection",
		"remote_addr", c.remote,
		"principal", principalName(c.principal),
		"key", c.fingerprint,
		"auth", auth,
		"client", clientVersion(sconn.ClientVersion()),
		"sessions", c.opened.Load(),
		"duration_ms", time.Since(c.start).Milliseconds(),
		"end", why)
}

// proxy reads the PROXY header when the peer is a trusted proxy, and
// refuses one from anyone else.
func (c *conn) proxy(fromTrusted bool) (net.Conn, error) {
	s := c.s
	if !s.cfg.ProxyProtocol {
		return c.raw, nil
	}
	br := bufio.NewReaderSize(c.raw, 512)
	pc := &proxiedConn{Conn: c.raw, r: br, remote: c.raw.RemoteAddr()}
	if !fromTrusted {
		if looksLikeProxyHeader(br) {
			return nil, errors.New("PROXY header from a peer not in trusted proxies")
		}
		return pc, nil
	}
	addr, err := readProxyHeader(br)
	switch {
	case errors.Is(err, errNotProxy):
		// A trusted proxy connecting on its own behalf.
		return pc, nil
	case err != nil:
		return nil, err
	case addr != nil:
		pc.remote = addr
	}
	return pc, nil
}

// refuse logs and counts a connection closed before its handshake because
// a bound on unauthenticated connections is reached. The log line is
// rate-limited: a flood would otherwise write one per connection.
func (s *Server) refuse(remote net.Addr, reason, why, key string, limit int) {
	s.m.authFailures.WithLabelValues(reason).Inc()
	if ok, left := s.refused.allow(time.Now()); ok {
		s.logger.Warn("ssh connection refused: "+why, "remote_addr", remote.String(), "limit", limit, "setting", key,
			"refused_unlogged", left)
	}
}

func (c *conn) serverConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		ServerVersion:               "SSH-2.0-Sluice",
		PublicKeyCallback:           c.publicKey,
		KeyboardInteractiveCallback: c.noKey,
		// Called once the key exchange is done: the client has shown it
		// speaks SSH, and from here it may wait on a person typing a
		// passphrase.
		PreAuthConnCallback: func(ssh.ServerPreAuthConn) {
			_ = c.raw.SetDeadline(c.start.Add(c.s.cfg.AuthTimeout))
		},
	}
	for _, k := range c.s.hostKeys {
		cfg.AddHostKey(k)
	}
	return cfg
}

// publicKey answers whether a key is registered. It runs for keys the
// client merely offers, so it records nothing about identity outside the
// returned Permissions (see the package comment).
//
// When the key cannot be looked up at all, the key is accepted with
// Permissions that name no one and carry the failure: refusing it would
// tell the client its key is unknown, and the session that follows answers
// every command with "temporarily unavailable" instead. When the database
// is unavailable the key is carried on as if found: authenticate then asks
// auth, whose outage grace knows the keys it authenticated recently and
// answers Unavailable for the others, with the same effect.
func (c *conn) publicKey(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	fp := ssh.FingerprintSHA256(key)
	_, err := c.s.st.SSHKeyByFingerprint(c.ctx, fp)
	switch {
	case problem.Is(err, problem.NotFound):
		c.rejectedKey = true
		return nil, errors.New("unknown public key")
	case err != nil && !problem.Is(err, problem.Unavailable):
		c.s.logger.Warn("ssh key lookup failed", "remote_addr", c.remote, "fingerprint", fp, "err", err)
		return &ssh.Permissions{Extensions: map[string]string{extLookupFailed: failureKind(err)}}, nil
	}
	return &ssh.Permissions{Extensions: map[string]string{
		extKey:   string(key.Marshal()),
		extKeyFP: fp,
	}}, nil
}

// noKey answers keyboard-interactive, which OpenSSH tries once every key
// it offered was refused: authentication fails, and the banner tells the
// client why, once per connection (OpenSSH retries the method).
func (c *conn) noKey(ssh.ConnMetadata, ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
	err := errors.New("no registered key")
	if c.toldNoKey {
		return nil, err
	}
	c.toldNoKey = true
	return nil, &ssh.BannerError{Err: err, Message: msgNoKey + "\n"}
}

// failureKind names what a failed lookup tells the user: a database that
// is down is worth retrying; anything else is an internal error.
func failureKind(err error) string {
	if problem.Is(err, problem.Unavailable) {
		return "unavailable"
	}
	return "internal"
}

// authFailure is the error every command of a session answers when the
// server could not tell who the client is.
func authFailure(kind string, cause error) error {
	if kind == "unavailable" {
		return problem.Wrap(problem.Unavailable, cause, msgUnavailable)
	}
	return problem.Wrap(problem.Internal, cause, "internal server error")
}

// authenticate resolves the principal from the connection's Permissions,
// which x/crypto/ssh took from the key that completed authentication. It
// returns the method for the log line.
func (c *conn) authenticate() string {
	s := c.s
	perms := c.sconn.Permissions
	if perms == nil {
		// Unreachable: every accepting callback returns Permissions.
		s.m.authFailures.WithLabelValues("error").Inc()
		c.authErr = authFailure("internal", errors.New("authenticated without permissions"))
		return "none"
	}
	if kind := perms.Extensions[extLookupFailed]; kind != "" {
		s.m.authFailures.WithLabelValues(kind).Inc()
		c.authErr = authFailure(kind, errors.New("key lookup failed"))
		return "publickey"
	}
	key, err := ssh.ParsePublicKey([]byte(perms.Extensions[extKey]))
	if err != nil || ssh.FingerprintSHA256(key) != perms.Extensions[extKeyFP] {
		s.m.authFailures.WithLabelValues("error").Inc()
		s.logger.Error("ssh permissions hold an unreadable key", "remote_addr", c.remote, "err", err)
		c.authErr = authFailure("internal", fmt.Errorf("unreadable key in permissions: %v", err))
		return "publickey"
	}
	c.fingerprint = perms.Extensions[extKeyFP]
	p, err := s.authn.PublicKey(c.ctx, key)
	if err != nil {
		reason := "rejected_key"
		if !problem.Is(err, problem.Unauthenticated) {
			reason = failureKind(err)
			c.authErr = authFailure(reason, err)
			s.logger.Warn("ssh key authentication failed", "remote_addr", c.remote, "fingerprint", c.fingerprint, "err", err)
		}
		s.m.authFailures.WithLabelValues(reason).Inc()
		return "publickey"
	}
	c.principal = p
	return "publickey"
}

// globalRequests refuses every global request: remote and local port
// forwarding (tcpip-forward, streamlocal-forward@openssh.com), and the
// client's own keepalives, which expect a reply of either kind.
func (c *conn) globalRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		if req.WantReply {
			_ = req.Reply(false, nil)
		}
	}
}

// monitor sends keepalives and closes the connection when the peer stops
// answering them or when no channel data moved for IdleTimeout.
func (c *conn) monitor(stop <-chan struct{}, wg *sync.WaitGroup) {
	s := c.s
	var keepalive, idle <-chan time.Time
	if s.cfg.KeepAlive > 0 {
		t := time.NewTicker(s.cfg.KeepAlive)
		defer t.Stop()
		keepalive = t.C
	}
	if s.cfg.IdleTimeout > 0 {
		// Checking four times per timeout closes an idle connection at
		// most a quarter of the timeout late.
		t := time.NewTicker(max(s.cfg.IdleTimeout/4, time.Millisecond))
		defer t.Stop()
		idle = t.C
	}
	var missed atomic.Int32
	for {
		select {
		case <-stop:
			return
		case <-keepalive:
			if missed.Load() >= keepAliveMisses {
				c.closeFor("keepalive timeout")
				return
			}
			missed.Add(1)
			// SendRequest waits for the reply; x/crypto serializes
			// global requests, so unanswered ones queue behind the first
			// until the connection closes and releases them all.
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := c.sconn.SendRequest("keepalive@openssh.com", true, nil); err == nil {
					missed.Store(0)
				}
			}()
		case <-idle:
			if time.Since(time.Unix(0, c.lastActive.Load())) >= s.cfg.IdleTimeout {
				c.closeFor("idle timeout")
				return
			}
		}
	}
}

// channel accepts session channels and refuses everything else
// (direct-tcpip, x11, forwarded-tcpip, direct-streamlocal@openssh.com…).
func (c *conn) channel(nch ssh.NewChannel, wg *sync.WaitGroup) {
	s := c.s
	if nch.ChannelType() != "session" {
		_ = nch.Reject(ssh.Prohibited, "sluice does not allow port forwarding or "+nch.ChannelType()+" channels")
		return
	}
	if s.isClosing() {
		_ = nch.Reject(ssh.ResourceShortage, "server is shutting down")
		return
	}
	if int(c.sessions.Add(1)) > s.cfg.MaxSessions {
		c.sessions.Add(-1)
		_ = nch.Reject(ssh.ResourceShortage, fmt.Sprintf("at most %d sessions per connection", s.cfg.MaxSessions))
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		c.sessions.Add(-1)
		return
	}
	c.opened.Add(1)
	c.touch()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.sessions.Add(-1)
		c.session(ch, reqs)
		c.touch()
	}()
}

// session handles one session's requests: GIT_PROTOCOL, then one exec.
func (c *conn) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var protocol string
	started := false
	done := make(chan struct{})
	for req := range reqs {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			ok := ssh.Unmarshal(req.Payload, &kv) == nil && !started &&
				kv.Name == "GIT_PROTOCOL" && pktline.ValidProtocol(kv.Value)
			if ok {
				protocol = kv.Value
			}
			reply(req, ok)
		case "exec":
			var ex struct{ Command string }
			if started || ssh.Unmarshal(req.Payload, &ex) != nil {
				reply(req, false)
				continue
			}
			started = true
			// Accepted even when the command is wrong, so the client
			// prints our explanation instead of a bare "exec failed".
			reply(req, true)
			go func() {
				defer close(done)
				c.exec(ch, ex.Command, protocol)
			}()
		case "shell":
			if started {
				reply(req, false)
				continue
			}
			started = true
			// Accepted, then ended: refusing the request outright makes
			// OpenSSH print only "shell request failed" and drop ours.
			reply(req, true)
			fmt.Fprintln(ch.Stderr(), msgNoShell)
			exit(ch, 1)
			close(done)
		default:
			// pty-req, x11-req, auth-agent-req@openssh.com, subsystem,
			// signal, window-change…: none applies to git.
			reply(req, false)
		}
	}
	if started {
		<-done
	}
}

func reply(req *ssh.Request, ok bool) {
	if req.WantReply {
		_ = req.Reply(ok, nil)
	}
}

// exit sends the exit status and closes the channel. The status is always
// sent: git reports a session that ends without one as a failure.
func exit(ch ssh.Channel, status uint32) {
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
	_ = ch.CloseWrite()
	_ = ch.Close()
}

// exec runs one command and sends its exit status.
func (c *conn) exec(ch ssh.Channel, line, protocol string) {
	s := c.s
	stderr := &activity{rw: ch.Stderr(), c: c}
	cmd, err := parseCommand(line)
	if err != nil {
		s.logger.Info("refused ssh command", "remote_addr", c.remote, "principal", principalName(c.principal),
			"command", truncate(line, 128))
		fmt.Fprintln(stderr, problem.Message(err))
		exit(ch, 1)
		return
	}
	if err := s.refuseWhileReadOnly(c.ctx, cmd.Service); err != nil {
		exit(ch, exitStatus(err, stderr))
		return
	}
	if c.principal == nil {
		if c.authErr != nil {
			s.logger.Info("ssh command refused: the key could not be checked", "remote_addr", c.remote,
				"service", cmd.Service, "repo", cmd.ProjectKey+"/"+cmd.Slug, "err", c.authErr)
			exit(ch, exitStatus(c.authErr, stderr))
			return
		}
		s.logger.Info("ssh command without a recognised key", "remote_addr", c.remote, "service", cmd.Service,
			"repo", cmd.ProjectKey+"/"+cmd.Slug)
		fmt.Fprintln(stderr, msgDenied)
		exit(ch, exitFailed)
		return
	}
	if !s.beginOp(c) {
		fmt.Fprintln(stderr, "server is shutting down; try again")
		exit(ch, 1)
		return
	}
	// Deferred, so it runs after the exit status is sent: during shutdown
	// endOp may close the connection.
	defer s.endOp(c)
	stream := &activity{rw: ch, c: c}
	err = s.svc.Serve(c.ctx, hosting.Op{
		Principal:  c.principal,
		ProjectKey: cmd.ProjectKey,
		Slug:       cmd.Slug,
		Service:    cmd.Service,
		Protocol:   protocol,
		Transport:  "ssh",
		RemoteAddr: c.remote,
		Stderr:     stderr,
	}, stream, stream)
	exit(ch, exitStatus(err, stderr))
}

// exitStatus writes what the user should read about err and returns the
// status for it.
func exitStatus(err error, stderr io.Writer) uint32 {
	if err == nil {
		return 0
	}
	var pe *problem.Error
	if errors.As(err, &pe) && pe.Kind != problem.Internal {
		switch pe.Kind {
		case problem.NotFound, problem.Unauthenticated:
			fmt.Fprintln(stderr, msgDenied)
		default:
			_ = pktline.WriteProblem(stderr, pktline.AsText, err)
		}
		if pe.Kind == problem.Unavailable || pe.Kind == problem.Throttled {
			return exitTempFail
		}
		return exitFailed
	}
	// git said why on stderr already; pass its status on.
	if code := gitcmd.ExitCode(err); code > 0 && code < 256 {
		return uint32(code)
	}
	_ = pktline.WriteProblem(stderr, pktline.AsText, err)
	return exitFailed
}

// activity counts channel traffic for the idle timeout.
type activity struct {
	rw interface {
		io.Reader
		io.Writer
	}
	c *conn
}

func (a *activity) Read(p []byte) (int, error) {
	n, err := a.rw.Read(p)
	if n > 0 {
		a.c.touch()
	}
	return n, err
}

func (a *activity) Write(p []byte) (int, error) {
	n, err := a.rw.Write(p)
	if n > 0 {
		a.c.touch()
	}
	return n, err
}

func principalName(p *auth.Principal) string {
	if p == nil {
		return ""
	}
	return p.String()
}

// clientVersion makes the client's version banner safe to log.
func clientVersion(b []byte) string {
	return truncate(string(b), 64)
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
