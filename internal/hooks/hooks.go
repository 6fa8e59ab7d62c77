// Package hooks is what runs inside a push.
//
// Git runs its hooks as programs. Sluice pins them (core.hooksPath, written
// by gitcmd) to sluice-hook, a tiny program next to the sluice binary, or
// without it to scripts that exec `sluice hook NAME ARGS…`; both run
// hookclient.Run (see that package for why the hook is its own small
// binary: start-up cost, three hooks per push). The hook process knows
// nothing about the push: it reads its input, collects push options and the
// quarantine directory from the environment, and forwards everything as one
// JSON request over a unix socket to the Server in the node that started
// git. That server holds the request's context (repository, principal,
// transport) under a random token it put into git's environment at
// Register, so a hook cannot be run on behalf of a request it does not
// belong to, and the node answers with an exit code and a message that git
// relays to the user as "remote: …".
//
// What each hook does:
//
//   - pre-receive refuses ref names that git check-ref-format would reject
//     or that have a path component beginning with '-', bounds push
//     options, then asks the Policy (branch permissions) with the objects
//     still in quarantine. Nothing has moved yet; a rejection names the rule
//     and the ref.
//   - reference-transaction "prepared" records the transaction in the
//     database (store.BeginRefTxn, which bumps the refs generation) before
//     git moves any ref; if that fails the hook exits non-zero and git
//     aborts the update, so no ref ever moves without its record.
//     "committed" and "aborted" end the record (bumping the generation
//     again) and, for committed, tell the OnRefsChanged listeners. Readers
//     that cache anything computed from refs (the pack cache) key it on the
//     generation and refuse to cache while a transaction is pending, so
//     they can never serve a pack from before a push.
//   - when the request ends (done), the refs its committed transactions
//     moved go to the OnPushed listeners, which enqueue follow-up work
//     (housekeeping, rescope, webhooks); nothing slow runs inside the push.
//     This is post-receive's job, done without post-receive: one process
//     fewer per push.
//
// Git may run several reference transactions in one push: one per ref
// without --atomic, and in git 2.39 a nested one for packed-refs when a
// packed ref is deleted, which reports the same lines. The server therefore
// keeps, per token, a stack of open transaction ids for each distinct input
// and pairs every committed/aborted with the latest prepared of identical
// input.
//
// Whatever git leaves open (it was killed between prepared and committed,
// or the database was away when committed ran), and whatever a node that
// died left open, is reconciled against the refs on disk; see reconcile.go.
// What a git killed before prepared leaves (ref locks, its quarantine) is
// found through the record every registration writes; see leftovers.go.
package hooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/hookclient"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// serverTimeout bounds one hook call in the server: shorter than
// hookclient.ClientTimeout, so the hook prints the server's own error.
const serverTimeout = 50 * time.Second

// Defaults for Config's limits. Git itself does not bound push options;
// these follow GitLab's practice of a few dozen short options.
const (
	DefaultMaxPushOptions     = 32
	DefaultMaxPushOptionBytes = 1024
)

// maxSocketPath keeps the socket path under the 108-byte sun_path limit of
// Linux (104 on BSDs) with a margin.
const maxSocketPath = 100

// Config configures a Server.
type Config struct {
	// SocketDir is where the unix socket is created; empty, or a directory
	// whose path would make the socket path too long, means a fresh
	// temporary directory.
	SocketDir string
	// NodeID identifies this node in ref transaction records, so Reconcile
	// ends only what this node left behind. Required.
	NodeID string
	// MaxPushOptions and MaxPushOptionBytes bound push options (0: the
	// defaults above).
	MaxPushOptions     int
	MaxPushOptionBytes int
	// RepoPath maps a repository id to its directory (repo.Manager.Path).
	// When set, the quarantine paths a pre-receive forwards must lie inside
	// that repository's objects directory.
	RepoPath func(repoID int64) string

	// Instance identifies this process start (cluster.NewInstance, the
	// one the node registry carries); empty means a random one. It is
	// recorded with every transaction, so a transaction whose process is
	// gone can be told from one still in flight.
	Instance string
	// Refs reads refs on disk and removes dead ref locks (repo.Manager).
	// Without it the reconciler cannot tell what became of a transaction
	// and ends it as not committed, announcing every ref it names.
	Refs RefDisk
	// ProcessLive reports whether the process start that recorded a
	// transaction may still run (cluster.Registry.ProcessLive). Without
	// it only this node's own transactions are reconciled.
	ProcessLive func(ctx context.Context, nodeID, instance string) (bool, error)
	// AbandonAfter is how old another node's transaction must be, its
	// process gone, before it is reconciled (0: DefaultAbandonAfter).
	AbandonAfter time.Duration
	// ReconcileInterval runs the reconciler in the background this often;
	// 0 runs it only when Reconcile is called.
	ReconcileInterval time.Duration
	// TestPhaseHook, for tests only, runs inside every reference-
	// transaction call after the prepared phase recorded its transaction
	// and before a committed or aborted phase ends it, with the phase's
	// name: blocking in it holds git inside that phase, with its ref
	// locks taken, so a test can kill git there. It also runs as
	// "preparing" in the prepared phase before the transaction is
	// recorded (ref locks taken, nothing recorded), and as "pre-receive"
	// at the start of pre-receive (the pushed objects in quarantine). An
	// error ends the call at once, recording nothing more, as a node
	// dying there would.
	TestPhaseHook func(phase string, repoID int64) error
}

// Request is the context of one git process that may change refs.
//
// Every ref move in a Sluice repository runs git's reference-transaction
// hook (hooks are pinned by gitcmd), and the hook refuses a git process
// that was not registered here. A registration says who moves the refs: a
// user (Principal), whose moves are judged by the Policy, or the server
// itself (System), whose moves are not. So no code path can move a ref
// without the branch-permission judgement by forgetting to call it: a push
// is judged in pre-receive, with its objects in quarantine, and any other
// move (REST, web, a merge) in the transaction's "prepared" phase, before
// git takes the refs' new values.
type Request struct {
	RepoID    int64
	Principal *auth.Principal
	Transport string // "http", "ssh", "web", "api", …
	// System marks server-managed moves that no user asked for: pull
	// request refs, fork and mirror sync, repair, housekeeping. They are
	// not judged but are recorded (the refs generation moves) like any
	// other. Only server code sets it; a request with neither System nor
	// a Principal may move no ref.
	System bool
	// ViaPullRequest marks the merge of a pull request (and the deletion
	// of its source branch that may follow), which pull-request-only
	// branch permissions allow.
	ViaPullRequest bool
	// PreservesRefs marks a command that rewrites how refs are stored but
	// never what they point to (pack-refs: a ref is added to packed-refs,
	// then its loose file removed). Its transactions are not recorded and
	// do not move the refs generation, so housekeeping does not invalidate
	// every cached answer for the repository. Only server code sets it.
	PreservesRefs bool
}

// Policy decides whether a user's ref moves may proceed. For a push it runs
// in pre-receive with the pushed objects still in quarantine;
// quarantineEnv holds the KEY=VALUE variables (GIT_QUARANTINE_PATH,
// GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES) a git command
// needs to read them. For every other move by a user (REST, web, merges) it
// runs in the reference-transaction's prepared phase with quarantineEnv
// nil: the objects are in the repository already. A problem.Error's
// message is shown to the user and should name the rule and the ref; any
// other error is reported as an internal error.
type Policy interface {
	CheckPush(ctx context.Context, req Request, updates []RefUpdate, quarantineEnv []string) error
}

// Server answers hook calls for the git processes of this node.
type Server struct {
	cfg     Config
	st      store.Store
	logger  *slog.Logger
	metrics *metrics

	ln         net.Listener
	socketPath string
	tempDir    string // removed at Close when we created it

	ctx    context.Context // cancelled at Close; parent of every call
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pushWG sync.WaitGroup // OnPushed listeners still running

	mu            sync.Mutex
	regs          map[string]*registration
	policy        Policy
	onRefsChanged []func(repoID int64, updates []RefUpdate)
	onPushed      []func(req Request, updates []RefUpdate)
	closed        bool
	// orphans are this process's transactions whose git has exited but
	// whose end could not be recorded (the database was down); the
	// reconciler finishes them.
	orphans map[int64]orphan
	// endedRuns are this process's git runs whose git has exited but
	// whose record could not be deleted; the reconciler deletes them.
	endedRuns map[int64]bool
	// soon asks the background reconciler for an early pass.
	soon chan struct{}
	// started is when this process's server started: an earlier process
	// of this node was dead by then.
	started time.Time
}

// registration is one registered request and its open ref transactions.
type registration struct {
	req Request
	// run is the id of the request's git run record (store.GitRun), 0
	// when it could not be written.
	run int64

	mu sync.Mutex
	// open maps a transaction's hook input to the ids of the transactions
	// prepared with that input and not yet ended, latest last.
	open map[string][]int64
	// unended holds the transactions whose EndRefTxn failed, by id, with
	// their input; unregistering reconciles them.
	unended map[int64]string
	// pushed collects the committed updates, one per ref, in first-seen
	// order, for the OnPushed listeners.
	pushed []RefUpdate
	// judged holds the updates pre-receive let through ("old new ref"),
	// which the prepared phase need not judge again.
	judged map[string]bool
}

// addPushed merges updates into r.pushed: git may report one ref in more
// than one transaction (a deleted packed ref appears in the loose and the
// packed one), and the listeners want the ref's first old and last new value.
func (r *registration) addPushed(updates []RefUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range updates {
		i := slices.IndexFunc(r.pushed, func(p RefUpdate) bool { return p.Ref == u.Ref })
		if i < 0 {
			r.pushed = append(r.pushed, u)
			continue
		}
		r.pushed[i].New = u.New
	}
}

type metrics struct {
	calls      *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	reconciled *prometheus.CounterVec
	deadLocks  prometheus.Counter
	leftovers  *prometheus.CounterVec
}

// NewServer listens on a fresh unix socket and serves hook calls until
// Close.
func NewServer(cfg Config, st store.Store, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("hooks: node id is required")
	}
	if cfg.MaxPushOptions <= 0 {
		cfg.MaxPushOptions = DefaultMaxPushOptions
	}
	if cfg.MaxPushOptionBytes <= 0 {
		cfg.MaxPushOptionBytes = DefaultMaxPushOptionBytes
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_hooks_calls_total",
			Help: "Hook calls by hook and outcome (ok, rejected, error, refused).",
		}, []string{"hook", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_hooks_duration_seconds",
			Help:    "Time the server spent answering a hook call.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"hook"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_hooks_reconciled_total",
			Help: "Ref transactions no live process could finish, reconciled against the refs on disk, by outcome (committed, aborted).",
		}, []string{"outcome"}),
		deadLocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_hooks_dead_ref_locks_removed_total",
			Help: "Ref lock files left by a dead git process that the reconciler removed.",
		}),
		leftovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_hooks_dead_leftovers_removed_total",
			Help: "Ref locks and push quarantines that git processes dead before recording their transaction left, removed by the reconciler, by kind (lock, quarantine).",
		}, []string{"kind"}),
	}
	if cfg.Instance == "" {
		cfg.Instance = randomHex(8)
	}
	if cfg.AbandonAfter <= 0 {
		cfg.AbandonAfter = DefaultAbandonAfter
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.calls, m.duration, m.reconciled, m.deadLocks, m.leftovers} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register hooks metrics: %w", err)
			}
		}
	}

	s := &Server{
		cfg:       cfg,
		st:        st,
		logger:    logger.With("component", "hooks"),
		metrics:   m,
		regs:      make(map[string]*registration),
		orphans:   make(map[int64]orphan),
		endedRuns: make(map[int64]bool),
		started:   time.Now(),
		soon:      make(chan struct{}, 1),
	}
	removeDeadSockets(cfg.SocketDir)
	if err := s.listen(); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.serve()
	if cfg.ReconcileInterval > 0 {
		s.wg.Add(1)
		go s.reconcileLoop(cfg.ReconcileInterval)
	}
	return s, nil
}

func (s *Server) listen() error {
	name := "hooks-" + randomHex(6) + ".sock"
	dir := s.cfg.SocketDir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create hook socket dir: %w", err)
		}
	}
	if dir == "" || len(filepath.Join(dir, name)) >= maxSocketPath {
		tmp, err := os.MkdirTemp("", "sluice-hooks-")
		if err != nil {
			return fmt.Errorf("create hook socket dir: %w", err)
		}
		dir, s.tempDir = tmp, tmp
	}
	s.socketPath = filepath.Join(dir, name)
	if len(s.socketPath) >= maxSocketPath {
		s.removeTemp()
		return fmt.Errorf("hook socket path %q too long", s.socketPath)
	}
	ln, err := net.Listen("unix", s.socketPath)
	if err != nil {
		s.removeTemp()
		return fmt.Errorf("listen on hook socket: %w", err)
	}
	// Only this user's processes (git, run by this server) may connect;
	// the token is the second lock.
	if err := os.Chmod(s.socketPath, 0o600); err != nil {
		ln.Close()
		s.removeTemp()
		return fmt.Errorf("chmod hook socket: %w", err)
	}
	s.ln = ln
	return nil
}

func (s *Server) removeTemp() {
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
	}
}

// SocketPath is where the server listens.
func (s *Server) SocketPath() string { return s.socketPath }

// Close stops accepting calls, cancels the ones in flight, waits for them and
// removes the socket.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// Cancel first, so the accept loop sees a closed server, not an error.
	s.cancel()
	err := s.ln.Close()
	s.wg.Wait()
	s.pushWG.Wait()
	os.Remove(s.socketPath)
	s.removeTemp()
	return err
}

// SetPolicy installs the push policy run in pre-receive (nil: none).
func (s *Server) SetPolicy(p Policy) {
	s.mu.Lock()
	s.policy = p
	s.mu.Unlock()
}

// OnRefsChanged registers fn to run after every committed ref transaction.
// It runs inside the hook call, so it must be quick (publish an event,
// enqueue a job).
func (s *Server) OnRefsChanged(fn func(repoID int64, updates []RefUpdate)) {
	s.mu.Lock()
	s.onRefsChanged = append(s.onRefsChanged, fn)
	s.mu.Unlock()
}

// OnPushed registers fn to run when a request whose git process committed
// ref transactions ends (its done is called), after git has reported the
// push to the client, with one update per ref (first old value, last new
// value). Listeners run in the background. Same rule: quick, enqueue the
// slow work.
func (s *Server) OnPushed(fn func(req Request, updates []RefUpdate)) {
	s.mu.Lock()
	s.onPushed = append(s.onPushed, fn)
	s.mu.Unlock()
}

// Register makes req known to the server and returns the environment to add
// to the git process that serves it. done unregisters it and ends any ref
// transaction git left open; call it after git has exited. Register
// records the git process (store.GitRun, see leftovers.go) before git
// starts; when the database cannot take that record, every hook call of
// the request is refused, so that git moves no ref and keeps no pack.
func (s *Server) Register(req Request) (env []string, done func()) {
	token := randomHex(32)
	r := &registration{req: req, open: make(map[string][]int64), unended: make(map[int64]string)}
	s.recordRun(r)
	s.mu.Lock()
	s.regs[token] = r
	s.mu.Unlock()
	var once sync.Once
	done = func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.regs, token)
			s.mu.Unlock()
			s.endLeftovers(r)
			s.notifyPushed(r)
			s.endRun(r)
		})
	}
	return []string{hookclient.EnvSocket + "=" + s.socketPath, hookclient.EnvToken + "=" + token}, done
}

// endLeftovers finishes the transactions git prepared but never ended for
// r, and those whose end could not be recorded. git has exited, so the
// refs on disk say what happened to each (see reconcile.go); what the
// database cannot take now is left to the background reconciler.
func (s *Server) endLeftovers(r *registration) {
	r.mu.Lock()
	var left []store.RefTxn
	for input, ids := range r.open {
		for _, id := range ids {
			left = append(left, store.RefTxn{ID: id, RepoID: r.req.RepoID, Updates: input})
		}
	}
	for id, input := range r.unended {
		left = append(left, store.RefTxn{ID: id, RepoID: r.req.RepoID, Updates: input})
	}
	r.open, r.unended = map[string][]int64{}, map[int64]string{}
	r.mu.Unlock()
	if len(left) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	for _, t := range left {
		s.logger.Warn("ref transaction left open at the end of its request", "repo_id", r.req.RepoID, "txn_id", t.ID)
		if _, err := s.reconcileTxn(ctx, t, r.req); err != nil {
			s.logger.Error("reconcile ref transaction; the background reconciler retries",
				"repo_id", r.req.RepoID, "txn_id", t.ID, "err", err)
			s.mu.Lock()
			s.orphans[t.ID] = orphan{txn: t, req: r.req}
			s.mu.Unlock()
		}
	}
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() == nil {
				s.logger.Error("accept hook connection", "err", err)
			}
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(conn)
		}()
	}
}

func (s *Server) serveConn(conn net.Conn) {
	defer conn.Close()
	// Close must not wait out a caller that connected and went quiet.
	defer context.AfterFunc(s.ctx, func() { conn.Close() })()
	conn.SetDeadline(time.Now().Add(hookclient.ClientTimeout))
	var req hookclient.Request
	dec := json.NewDecoder(io.LimitReader(conn, hookclient.MaxWireRequest))
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return // a liveness probe (removeDeadSockets) sends nothing
		}
		s.logger.Warn("bad hook request", "err", err)
		s.metrics.calls.WithLabelValues("unknown", "error").Inc()
		return
	}
	hook := hookLabel(req.Hook)
	start := time.Now()
	resp, outcome := s.dispatch(&req)
	s.metrics.calls.WithLabelValues(hook, outcome).Inc()
	s.metrics.duration.WithLabelValues(hook).Observe(time.Since(start).Seconds())
	if err := json.NewEncoder(conn).Encode(resp); err != nil {
		s.logger.Warn("answer hook call", "hook", hook, "err", err)
	}
}

func hookLabel(name string) string {
	switch name {
	case "pre-receive", "reference-transaction":
		return name
	}
	return "unknown"
}

// Outcomes of a call, for the calls metric.
const (
	outcomeOK       = "ok"
	outcomeRejected = "rejected"
	outcomeError    = "error"
	outcomeRefused  = "refused"
)

func (s *Server) dispatch(req *hookclient.Request) (hookclient.Response, string) {
	s.mu.Lock()
	r := s.regs[req.Token]
	s.mu.Unlock()
	if r == nil {
		s.logger.Warn("hook call with an unknown token", "hook", hookLabel(req.Hook))
		return hookclient.Response{Code: 1, Message: "sluice: hook call refused: unknown request"}, outcomeRefused
	}
	if r.run == 0 {
		// Unrecorded, a git killed before it recorded a transaction
		// would leave locks and a quarantine no reconciler finds.
		return hookclient.Response{Code: 1, Message: "sluice: the push could not be recorded (database unavailable); nothing was changed, try again"}, outcomeError
	}
	ctx, cancel := context.WithTimeout(s.ctx, serverTimeout)
	defer cancel()
	log := s.logger.With("hook", req.Hook, "repo_id", r.req.RepoID)
	switch req.Hook {
	case "pre-receive":
		return s.preReceive(ctx, log, r, req)
	case "reference-transaction":
		return s.referenceTransaction(ctx, log, r, req)
	}
	log.Warn("unknown hook")
	return hookclient.Response{Code: 1, Message: fmt.Sprintf("sluice: unknown hook %q", req.Hook)}, outcomeError
}

func (s *Server) preReceive(ctx context.Context, log *slog.Logger, r *registration, req *hookclient.Request) (hookclient.Response, string) {
	if s.cfg.TestPhaseHook != nil {
		if err := s.cfg.TestPhaseHook("pre-receive", r.req.RepoID); err != nil {
			return hookclient.Response{Code: 1, Message: err.Error()}, outcomeError
		}
	}
	updates, err := ParseUpdates(req.Stdin)
	if err != nil {
		log.Error("parse pre-receive input", "err", err)
		return hookclient.Response{Code: 1, Message: "sluice: malformed hook input"}, outcomeError
	}
	var msgs []string
	for _, u := range updates {
		if err := CheckRefName(u.Ref); err != nil {
			msgs = append(msgs, "sluice: rejected by the ref name rule: "+problem.Message(err))
		}
	}
	if len(msgs) > 0 {
		return hookclient.Response{Code: 1, Message: strings.Join(msgs, "\n")}, outcomeRejected
	}
	if req.PushOptionCount > s.cfg.MaxPushOptions {
		return hookclient.Response{Code: 1, Message: fmt.Sprintf(
			"sluice: too many push options: %d (limit %d)", req.PushOptionCount, s.cfg.MaxPushOptions)}, outcomeRejected
	}
	for i, o := range req.PushOptions {
		if len(o) > s.cfg.MaxPushOptionBytes {
			return hookclient.Response{Code: 1, Message: fmt.Sprintf(
				"sluice: push option %d is %d bytes long (limit %d)", i+1, len(o), s.cfg.MaxPushOptionBytes)}, outcomeRejected
		}
	}
	s.mu.Lock()
	policy := s.policy
	s.mu.Unlock()
	if policy == nil {
		return hookclient.Response{}, outcomeOK
	}
	objects := ""
	if s.cfg.RepoPath != nil {
		objects = filepath.Join(s.cfg.RepoPath(r.req.RepoID), "objects")
	}
	qenv, err := quarantineEnv(req.Quarantine, objects)
	if err != nil {
		log.Error("bad quarantine environment", "err", err)
		return hookclient.Response{Code: 1, Message: "sluice: malformed hook environment"}, outcomeError
	}
	if err := policy.CheckPush(ctx, r.req, updates, qenv); err != nil {
		var pe *problem.Error
		if errors.As(err, &pe) && pe.Kind != problem.Internal {
			log.Info("push rejected by policy", "reason", pe.Message)
			return hookclient.Response{Code: 1, Message: "sluice: " + pe.Message}, outcomeRejected
		}
		log.Error("push policy", "err", err)
		return hookclient.Response{Code: 1, Message: "sluice: push policy could not be checked; try again"}, outcomeError
	}
	r.markJudged(updates)
	return hookclient.Response{}, outcomeOK
}

func updateKey(u RefUpdate) string { return u.Old + " " + u.New + " " + u.Ref }

func (r *registration) markJudged(updates []RefUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.judged == nil {
		r.judged = map[string]bool{}
	}
	for _, u := range updates {
		r.judged[updateKey(u)] = true
	}
}

// RefusedPrefix begins every line of a ref move the prepared phase refused
// on a branch permission, as git relays it on stderr; Refusal finds it.
const RefusedPrefix = "sluice: refused: "

// Refusal returns the reason the reference-transaction hook gave for
// refusing a user's ref move, from the stderr of the git command that
// tried it, and whether there was one.
func Refusal(stderr string) (string, bool) {
	var msgs []string
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if m, ok := strings.CutPrefix(line, RefusedPrefix); ok {
			msgs = append(msgs, m)
		}
	}
	return strings.Join(msgs, "; "), len(msgs) > 0
}

// judge runs the Policy over the updates of a prepared transaction that no
// pre-receive judged: a user's moves outside a push. System moves are not
// judged. Lines for HEAD (and other names outside refs/) are the log-only
// echo of the branch HEAD points at, which is judged under its own name.
func (s *Server) judge(ctx context.Context, log *slog.Logger, r *registration, updates []RefUpdate) (hookclient.Response, string, bool) {
	if r.req.System || r.req.PreservesRefs {
		return hookclient.Response{}, "", true
	}
	if r.req.Principal == nil {
		log.Error("ref move by a request with no actor; refusing it")
		return hookclient.Response{Code: 1, Message: "sluice: ref update refused: no actor"}, outcomeRefused, false
	}
	var todo []RefUpdate
	r.mu.Lock()
	for _, u := range updates {
		if strings.HasPrefix(u.Ref, "refs/") && !r.judged[updateKey(u)] {
			todo = append(todo, u)
		}
	}
	r.mu.Unlock()
	s.mu.Lock()
	policy := s.policy
	s.mu.Unlock()
	if len(todo) == 0 || policy == nil {
		return hookclient.Response{}, "", true
	}
	for _, u := range todo {
		if err := CheckRefName(u.Ref); err != nil {
			return hookclient.Response{Code: 1, Message: RefusedPrefix + problem.Message(err)}, outcomeRejected, false
		}
	}
	if err := policy.CheckPush(ctx, r.req, todo, nil); err != nil {
		var pe *problem.Error
		if errors.As(err, &pe) && pe.Kind != problem.Internal {
			log.Info("ref update rejected by policy", "reason", pe.Message, "transport", r.req.Transport)
			lines := strings.Split(pe.Message, "\nsluice: ")
			for i := range lines {
				lines[i] = RefusedPrefix + lines[i]
			}
			return hookclient.Response{Code: 1, Message: strings.Join(lines, "\n")}, outcomeRejected, false
		}
		log.Error("ref update policy", "err", err)
		return hookclient.Response{Code: 1, Message: "sluice: branch permissions could not be checked; nothing was changed, try again"}, outcomeError, false
	}
	r.markJudged(todo)
	return hookclient.Response{}, "", true
}

// quarantineEnv checks the variables the client forwarded: only the known
// names, absolute paths (a colon-separated list for alternates), no NUL or
// line breaks. They come from git, not from the user, but they are handed
// on to git commands, so they are checked like anything else that is.
//
// git spells them "repo.git/./objects" (receive-pack runs in the
// repository and joins "." with "objects"); gitcmd refuses any path that
// is not clean, so they are cleaned here, once, for every policy. When
// objects (the repository's objects directory) is known, every cleaned
// path must be it or lie below it: the quarantine is a subdirectory of
// it, and the alternate is the directory itself.
func quarantineEnv(vars []string, objects string) ([]string, error) {
	out := make([]string, 0, len(vars))
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		known := false
		for _, q := range hookclient.QuarantineVars {
			known = known || k == q
		}
		if !known {
			return nil, fmt.Errorf("unexpected variable %q", k)
		}
		if strings.ContainsAny(v, "\x00\r\n") {
			return nil, fmt.Errorf("%s holds a control character", k)
		}
		parts := strings.Split(v, ":")
		for i, p := range parts {
			if p == "" {
				continue
			}
			if !filepath.IsAbs(p) {
				return nil, fmt.Errorf("%s is not absolute", k)
			}
			p = filepath.Clean(p)
			if objects != "" && !within(objects, p) && !withinResolved(objects, p) {
				return nil, fmt.Errorf("%s is outside the repository's objects directory", k)
			}
			parts[i] = p
		}
		out = append(out, k+"="+strings.Join(parts, ":"))
	}
	return out, nil
}

// withinResolved is within with dir's symlinks resolved: git reports the
// directory it found, which is the real path when the repository root
// sits behind a symlink.
func withinResolved(dir, p string) bool {
	real, err := filepath.EvalSymlinks(dir)
	return err == nil && within(real, p)
}

// within reports whether p is dir or below it; both are clean and absolute.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func (s *Server) referenceTransaction(ctx context.Context, log *slog.Logger, r *registration, req *hookclient.Request) (hookclient.Response, string) {
	if len(req.Args) != 1 {
		log.Error("reference-transaction called without a phase")
		return hookclient.Response{Code: 1, Message: "sluice: malformed hook call"}, outcomeError
	}
	phase, input := req.Args[0], string(req.Stdin)
	updates, err := ParseUpdates(req.Stdin)
	if err != nil {
		log.Error("parse reference-transaction input", "phase", phase, "err", err)
		return hookclient.Response{Code: 1, Message: "sluice: malformed hook input"}, outcomeError
	}
	if r.req.PreservesRefs {
		return hookclient.Response{}, outcomeOK
	}
	switch phase {
	case "prepared":
		if resp, outcome, ok := s.judge(ctx, log, r, updates); !ok {
			return resp, outcome
		}
		if s.cfg.TestPhaseHook != nil {
			if err := s.cfg.TestPhaseHook("preparing", r.req.RepoID); err != nil {
				return hookclient.Response{Code: 1, Message: err.Error()}, outcomeError
			}
		}
		id, err := s.st.BeginRefTxn(ctx, r.req.RepoID, s.cfg.NodeID, s.cfg.Instance, input)
		if err != nil {
			log.Error("record ref transaction; aborting the update", "err", err)
			return hookclient.Response{Code: 1, Message: "sluice: the ref update could not be recorded; nothing was changed, try again"}, outcomeError
		}
		r.mu.Lock()
		r.open[input] = append(r.open[input], id)
		r.mu.Unlock()
		if s.cfg.TestPhaseHook != nil {
			if err := s.cfg.TestPhaseHook(phase, r.req.RepoID); err != nil {
				return hookclient.Response{Code: 1, Message: err.Error()}, outcomeError
			}
		}
		return hookclient.Response{}, outcomeOK

	case "committed", "aborted":
		committed := phase == "committed"
		r.mu.Lock()
		ids := r.open[input]
		var id int64
		found := len(ids) > 0
		if found {
			id = ids[len(ids)-1]
			if len(ids) == 1 {
				delete(r.open, input)
			} else {
				r.open[input] = ids[:len(ids)-1]
			}
		}
		r.mu.Unlock()
		if s.cfg.TestPhaseHook != nil {
			if err := s.cfg.TestPhaseHook(phase, r.req.RepoID); err != nil {
				return hookclient.Response{Code: 1, Message: err.Error()}, outcomeError
			}
		}
		if !found {
			if !committed {
				// Git aborts transactions that failed before the
				// prepared hook ran (a lock was taken, say).
				return hookclient.Response{}, outcomeOK
			}
			// Refs moved without a prepared record; this should not
			// happen, but the generation must move all the same.
			log.Error("committed ref transaction without a prepared one")
			if err := s.st.BumpGeneration(ctx, r.req.RepoID); err != nil {
				log.Error("bump refs generation", "err", err)
				return hookclient.Response{Code: 1}, outcomeError
			}
			s.notifyRefsChanged(r.req.RepoID, updates)
			r.addPushed(updates)
			return hookclient.Response{}, outcomeOK
		}
		if err := s.st.EndRefTxn(ctx, id, committed); err != nil {
			// The record stays pending, which keeps caches from trusting
			// the generation; unregistering reconciles it, the background
			// reconciler if the database is still away then.
			log.Error("end ref transaction", "txn_id", id, "err", err)
			r.mu.Lock()
			r.unended[id] = input
			r.mu.Unlock()
			return hookclient.Response{Code: 1}, outcomeError
		}
		if committed && len(updates) > 0 {
			s.notifyRefsChanged(r.req.RepoID, updates)
			r.addPushed(updates)
		}
		return hookclient.Response{}, outcomeOK
	}
	// Phases a newer git may add are not ours to block.
	log.Warn("unknown reference-transaction phase", "phase", phase)
	return hookclient.Response{}, outcomeOK
}

// notifyPushed hands r's committed updates to the OnPushed listeners, in
// the background: done runs on the request's path.
func (s *Server) notifyPushed(r *registration) {
	r.mu.Lock()
	updates := r.pushed
	r.pushed = nil
	r.mu.Unlock()
	if len(updates) == 0 {
		return
	}
	s.pushWG.Add(1)
	go func() {
		defer s.pushWG.Done()
		s.firePushed(r.req, updates)
	}()
}

func (s *Server) firePushed(req Request, updates []RefUpdate) {
	s.mu.Lock()
	fns := slices.Clone(s.onPushed)
	s.mu.Unlock()
	for _, fn := range fns {
		s.safely("OnPushed", func() { fn(req, updates) })
	}
}

func (s *Server) notifyRefsChanged(repoID int64, updates []RefUpdate) {
	s.mu.Lock()
	fns := slices.Clone(s.onRefsChanged)
	s.mu.Unlock()
	for _, fn := range fns {
		s.safely("OnRefsChanged", func() { fn(repoID, updates) })
	}
}

// safely runs a listener so that its panic cannot take the push down with
// it: the refs have already moved.
func (s *Server) safely(what string, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			s.logger.Error("hook listener panicked", "listener", what, "panic", p)
		}
	}()
	fn()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go ≥ 1.24)
	return hex.EncodeToString(b)
}
