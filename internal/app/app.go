// Package app wires Sluice together.
//
// New builds every component in dependency order — store, auth, git runner,
// repositories, hooks, jobs, the hosting service, then the transports —
// passing each its dependencies explicitly. Nothing is global: several nodes
// can run inside one test process, each with its own Prometheus registry.
// Close tears the components down in reverse order.
package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/api"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/githttp"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/packcache"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/sshd"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// Version is set at build time with -ldflags.
var Version = "dev"

// JobHousekeeping is the job kind that repacks a repository after pushes.
const JobHousekeeping = "housekeeping"

// housekeepingDelay lets a burst of pushes (a CI pipeline, a developer's
// series) settle before the repository is looked at.
const housekeepingDelay = 30 * time.Second

// housekeepingSlack is what one housekeeping run needs beside its repack:
// removing stale leftovers, pack-refs and the commit-graph take seconds
// even on large repositories; ten minutes is generous for all of them.
const housekeepingSlack = 10 * time.Minute

// housekeepingTimeout bounds one housekeeping job (and one cluster sweep,
// which housekeeps repositories one after the other, so that a run always
// has room for the largest one; what a cut sweep leaves, the next hourly
// run finds again). The long step is the repack, a git process bounded by
// git.timeout (default an hour); the job gets that plus housekeepingSlack,
// and follows git.timeout when an administrator raises it for huge
// repositories. The largest kind timeout also sets River's rescue of
// stuck jobs (internal/jobs), so it is not made longer than needed.
// git.timeout = 0 (git unbounded) leaves the queue's default hour as the
// base.
func housekeepingTimeout(cfg config.Config) time.Duration {
	base := cfg.Git.Timeout.Duration
	if base <= 0 {
		base = jobs.DefaultJobTimeout
	}
	return base + housekeepingSlack
}

// App is one Sluice node (or, for the admin CLI, the components it needs).
type App struct {
	Config   config.Config
	Logger   *slog.Logger
	Registry *prometheus.Registry
	DB       *store.DB
	Store    store.Store
	Auth     *auth.Service
	Accounts *accounts.Service
	Git      *gitcmd.Runner
	Repos    *repo.Manager
	Hooks    *hooks.Server
	Jobs     *jobs.Queue
	Hosting  *hosting.Service
	Cache    *packcache.Cache // nil when both cache kinds are off
	Throttle *throttle.Throttle
	Handler  http.Handler
	Pulls    *pull.Service
	Webhooks *webhook.Service
	// BranchPerms is the branch permissions, judged by the push policy.
	BranchPerms *branchperm.Service
	// Notify is the notifications (inbox and e-mail) of pull request events.
	Notify *notify.Service
	// SSH is nil when server.ssh_addr is empty.
	SSH *sshd.Server
	// ready answers /readyz and whether writes are refused (readiness.go).
	ready *readiness

	httpLn  net.Listener
	sshLn   net.Listener
	cluster *clusterParts // nil for the admin CLI
	closers []func() error
	once    sync.Once

	// instance is this process start's id (cluster.NewInstance).
	instance string
	// nodeID is this node's one identity: the registry registers it, the
	// job queue records it on the jobs it runs (and rescue compares the
	// two), the hooks record it on ref transactions.
	nodeID string

	// baseURL and sshBaseURL are what users are shown (clone URLs,
	// links): the configured ones, or, when those were derived from the
	// listen addresses, derived again from the bound ones (Listen).
	baseURL, sshBaseURL string
}

// Options adjust New for the admin CLI and for tests.
type Options struct {
	// Admin builds only what the admin CLI needs: no job workers start.
	Admin bool
	// Stdout receives the one-time admin password on first start.
	Stdout io.Writer
}

// New builds a node from cfg (already resolved and validated).
func New(ctx context.Context, cfg config.Config, logger *slog.Logger, opts Options) (a *App, err error) {
	a = &App{Config: cfg, Logger: logger, Registry: prometheus.NewRegistry()}
	// The error returns set a to nil: close what was built through a copy.
	built := a
	defer func() {
		if err != nil {
			built.Close()
		}
	}()
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	for _, dir := range []string{cfg.Data.Dir, cfg.Storage.Repositories, cfg.Cache.Dir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	nodeID := cfg.Node.ID
	// One id for this process start, shared by the node registry and the
	// ref transactions it records: the reconciler tells a dead process's
	// transactions from live ones by it.
	a.instance = newInstance()
	if nodeID == "" {
		host, _ := os.Hostname()
		nodeID = host + ":" + portOf(cfg.Server.HTTPAddr)
		if portOf(cfg.Server.HTTPAddr) == "0" {
			// Processes on random ports must not share an id: each would
			// take the others' ref transactions for its own earlier run's.
			nodeID += "/" + a.instance
		}
	}
	a.nodeID = nodeID

	a.DB, err = store.Open(ctx, cfg.Database.URL, logger,
		store.WithMaxOpenConns(cfg.Database.MaxOpenConns), store.WithAcquireTimeout(cfg.Database.AcquireTimeout.Duration))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	a.Store = a.DB
	a.closers = append(a.closers, a.DB.Close)

	a.Auth = auth.New(a.Store, logger, a.Registry)
	a.Auth.SetOutageGrace(cfg.Auth.OutageGrace.Duration)

	hookBinary := cfg.Git.HookBinary
	if hookBinary == "" {
		if hookBinary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own executable for git hooks: %w", err)
		}
	}
	hookHelper, err := findHookHelper(cfg.Git.HookHelper, hookBinary)
	if err != nil {
		return nil, err
	}
	if hookHelper == "" {
		logger.Info("git hooks run the sluice binary; install sluice-hook next to it (make build does) for cheaper pushes", "binary", hookBinary)
	}
	// The git cgroup exists before the first git process starts, so
	// that every heavy one lands in it; the throttle drives it.
	gitGroup := a.openGitGroup(opts.Admin)
	var confine func(int) error
	if gitGroup != nil {
		confine = gitGroup.Add
	}
	a.Git, err = gitcmd.New(gitcmd.Config{
		Binary:       cfg.Git.Binary,
		HomeDir:      gitHome(cfg, hookBinary+"\x00"+hookHelper),
		HookBinary:   hookBinary,
		HookHelper:   hookHelper,
		MaxInputSize: int64(cfg.Git.MaxInputSize),
		Timeout:      cfg.Git.Timeout.Duration,
		Nice:         cfg.Git.Nice,
		// As many threads per git process as the node has cores, when a
		// quota or throttle.cores makes that fewer than git would count;
		// otherwise git's default, and a repository's own pack.threads,
		// stand.
		PackThreads: packThreads(cfg.Throttle.Cores),
		Confine:     confine,
		// The bounds of browse, diff, blame, archive and merge work.
		ReadMemoryLimit: int64(cfg.Git.ReadMemoryLimit),
		ReadTimeout:     cfg.Git.ReadTimeout.Duration,
		MaxDiffBlobSize: int64(cfg.Git.MaxDiffBlobSize),
	}, a.Registry, logger)
	if err != nil {
		return nil, fmt.Errorf("git: %w", err)
	}
	a.Repos = repo.NewManager(cfg.Storage.Repositories, a.Git, logger)
	a.Repos.SetWantCheckTimeout(cfg.Git.WantCheckTimeout.Duration)
	a.Accounts = accounts.New(a.Store, a.Auth, a.Repos, logger)
	wantChecks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_git_want_checks_total",
		Help: "Protocol v2 fetches whose wants were checked, by outcome (tip: every want a visible tip, walked: proven by a walk, missing, unreachable, timeout, error).",
	}, []string{"outcome"})
	a.Registry.MustRegister(wantChecks)
	a.Repos.OnWantCheck(func(outcome string) { wantChecks.WithLabelValues(outcome).Inc() })

	a.Hooks, err = hooks.NewServer(hooks.Config{
		SocketDir:          filepath.Join(cfg.Data.Dir, "run"),
		NodeID:             nodeID,
		MaxPushOptions:     cfg.Git.MaxPushOptions,
		MaxPushOptionBytes: cfg.Git.MaxPushOptionBytes,
		RepoPath:           a.Repos.Path,
		Instance:           a.instance,
		Refs:               a.Repos,
		ProcessLive:        a.processLive,
		AbandonAfter:       cfg.Node.AbandonAfter.Duration,
		ReconcileInterval:  reconcileInterval(cfg, opts.Admin),
		TestPhaseHook:      testPhaseHold(),
	}, a.Store, logger, a.Registry)
	if err != nil {
		return nil, fmt.Errorf("hooks: %w", err)
	}
	a.closers = append(a.closers, a.Hooks.Close)
	// Housekeeping's pack-refs fires the reference-transaction hook, which
	// refuses callers it does not know; it is registered as a command that
	// preserves every ref's value, so the refs generation (and with it the
	// pack cache) is left alone.
	system := &auth.Principal{Name: "sluice"}
	a.Repos.SetHookEnv(func(repoID int64) ([]string, func()) {
		return a.Hooks.Register(hooks.Request{RepoID: repoID, Principal: system, Transport: "housekeeping", PreservesRefs: true, System: true})
	})

	// SQLite's server lock admits one server, so its queue has one worker
	// process; in a cluster the registry says whose running jobs are orphans.
	a.Jobs, err = jobs.New(a.DB, jobs.Config{NodeID: nodeID, SoleWorker: a.Store.Dialect() == "sqlite", LiveNodes: a.liveNodes}, logger, a.Registry)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	a.Jobs.Handle(JobHousekeeping, func(ctx context.Context, payload json.RawMessage) error {
		var args struct {
			RepoID int64 `json:"repo_id"`
		}
		if err := json.Unmarshal(payload, &args); err != nil {
			return fmt.Errorf("decode housekeeping args: %w", err)
		}
		_, err := a.Repos.HousekeepIfNeeded(ctx, args.RepoID)
		return err
	}, jobs.Timeout(housekeepingTimeout(cfg)))

	if err := a.newPulls(); err != nil {
		return nil, err
	}
	a.registerRefWork()

	if opts.Admin {
		return a, nil
	}
	if err := a.newCluster(); err != nil {
		return nil, err
	}

	if err := a.Hooks.Reconcile(ctx); err != nil {
		return nil, fmt.Errorf("reconcile ref transactions: %w", err)
	}
	if err := a.bootstrapAdmin(ctx, opts.Stdout); err != nil {
		return nil, err
	}

	var cache hosting.Cache
	if cfg.Cache.Packs || cfg.Cache.Refs {
		if a.Cache, err = a.newCache(); err != nil {
			return nil, fmt.Errorf("pack cache: %w", err)
		}
		a.closers = append(a.closers, a.Cache.Close)
		a.invalidateCacheOnRefMoves()
		cache = a.Cache
	}

	tc := cfg.Throttle
	a.Throttle, err = throttle.New(throttle.Config{
		Strategy: tc.Strategy, Fixed: tc.Fixed,
		MinPerCore: tc.MinPerCore, MaxPerCore: tc.MaxPerCore, TargetCPU: tc.TargetCPU, Cores: tc.Cores,
		QueueMax: tc.QueueMax, QueueWait: tc.QueueWait.Duration,
		RateLimit: tc.RateLimit, RateBucket: tc.RateBucket, RateRefill: tc.RateRefill,
	}, throttle.Options{
		Store:      a.Store,
		Auth:       a.Auth,
		Logger:     logger,
		Registerer: a.Registry,
		RepoPath:   a.Repos.Path,
		GitGroup:   gitGroup,
		OnRateLimitsChanged: func() {
			if a.cluster != nil {
				a.PublishSettingChanged(throttle.SettingRateLimits)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("throttle: %w", err)
	}
	a.Throttle.Start(ctx)
	a.closers = append(a.closers, a.Throttle.Close)

	// During an outage the node serves what its pack cache holds to the
	// principals the grace knows (hosting's outage.go), so it is read-only
	// rather than unavailable.
	cachedReads := a.Cache != nil && cfg.Auth.OutageGrace.Duration > 0
	a.ready = newReadiness(a.DB.Ping, cachedReads, logger.With("component", "readiness"))
	a.Hosting = hosting.New(hosting.Deps{
		Store:      a.Store,
		Auth:       a.Auth,
		Repos:      a.Repos,
		Git:        a.Git,
		Hooks:      a.Hooks,
		Logger:     logger,
		Registerer: a.Registry,
		Cache:      cache,
		Admission:  a.Throttle,
	})
	if cfg.Server.SSHAddr != "" {
		a.SSH, err = sshd.New(sshd.Config{
			Addr:               cfg.Server.SSHAddr,
			IdleTimeout:        cfg.Server.SSHIdleTimeout.Duration,
			MaxSessions:        cfg.Server.SSHMaxSessions,
			MaxUnauthenticated: cfg.Server.SSHMaxUnauthenticated,
			ProxyProtocol:      cfg.Server.ProxyProtocol,
			TrustedProxies:     cfg.TrustedProxyNets(),
			HandshakeTimeout:   cfg.Server.SSHHandshakeTimeout.Duration,
			AuthTimeout:        cfg.Server.SSHAuthTimeout.Duration,
			ReadOnly:           a.ready.ReadOnly,

			MaxUnauthenticatedPerSource: cfg.Server.SSHMaxUnauthenticatedPerSource,
		}, a.Hosting, a.Auth, a.Store, logger, a.Registry)
		if err != nil {
			return nil, fmt.Errorf("ssh server: %w", err)
		}
	}
	a.Handler = a.routes()
	return a, nil
}

// newCache opens the SCM cache in cache.dir/scm.
func (a *App) newCache() (*packcache.Cache, error) {
	cfg := a.Config.Cache
	binary, err := exec.LookPath(a.Config.Git.Binary)
	if err != nil {
		return nil, fmt.Errorf("find git: %w", err)
	}
	identity, err := packcache.GitIdentity(binary, a.Git.HomeDir())
	if err != nil {
		return nil, err
	}
	pc := packcache.Config{
		Dir:            filepath.Join(cfg.Dir, "scm"),
		Packs:          cfg.Packs,
		Refs:           cfg.Refs,
		MaxBytes:       int64(cfg.MaxBytes),
		MinFreeBytes:   int64(cfg.MinFreeBytes),
		TTL:            cfg.TTL.Duration,
		MinOccurrences: cfg.MinOccurrences,
		GitIdentity:    identity,

		AbandonedTimeout:  cfg.AbandonedTimeout.Duration,
		AbandonedMaxBytes: int64(cfg.AbandonedMaxBytes),
	}
	if a.Config.Auth.OutageGrace.Duration > 0 {
		// Only an outage reads the digests, and only with a grace.
		pc.RefsDigest = a.Repos.RefsDigest
	}
	return packcache.New(pc, a.Store, a.Registry, a.Logger)
}

// openGitGroup opens the git cgroup the adaptive throttle drives, or
// returns nil (logged) when the node has none to offer: another strategy,
// throttle.git_cgroup off, an admin command, or no cgroup v1 cpu hierarchy
// of its own that it may write to.
func (a *App) openGitGroup(admin bool) *throttle.GitGroup {
	cfg := a.Config.Throttle
	if admin || cfg.Strategy != "adaptive" || !cfg.GitCgroup {
		return nil
	}
	g, err := throttle.OpenGitGroup(throttle.DetectSources(cfg.Cores).Cores)
	if err != nil {
		a.Logger.Info("no git cgroup; tickets alone hold the cpu target", "component", "throttle", "reason", err)
		return nil
	}
	a.Logger.Info("git processes run in their own cgroup", "component", "throttle", "cgroup", g.Dir())
	a.closers = append(a.closers, g.Close)
	return g
}

// packThreads is the pack.threads every git command gets, or 0 for none:
// the node's cores when they are fewer than the CPUs git itself counts.
func packThreads(cores float64) int {
	if n := throttle.PackThreads(cores); n < runtime.NumCPU() {
		return n
	}
	return 0
}

// findHookHelper returns the sluice-hook executable to install as the
// hooks: the configured one, which must exist, or the one next to the
// sluice binary, or "" when there is none.
func findHookHelper(configured, hookBinary string) (string, error) {
	if configured != "" {
		p, err := filepath.Abs(configured)
		if err == nil {
			_, err = os.Stat(p)
		}
		if err != nil {
			return "", fmt.Errorf("git.hook_helper: %w", err)
		}
		return p, nil
	}
	p := filepath.Join(filepath.Dir(hookBinary), "sluice-hook")
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p, nil
	}
	return "", nil
}

// gitHome is the server-owned git home (global config and hooks) for this
// process. It is keyed on what gitcmd writes into it — the hook programs
// and receive.maxInputSize — so processes sharing a data directory never
// rewrite each other's: `go run ./cmd/sluice admin …` runs a temporary
// binary that is gone when it exits, and a running server's hooks must not
// be pointed at it.
func gitHome(cfg config.Config, hookBinary string) string {
	sum := sha256.Sum256([]byte(hookBinary + "\x00" + strconv.FormatInt(int64(cfg.Git.MaxInputSize), 10)))
	return filepath.Join(cfg.Data.Dir, "git-home", hex.EncodeToString(sum[:6]))
}

func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return port
}

// bootstrapAdmin creates the first administrator when there are no users:
// with SLUICE_ADMIN_PASSWORD if set, or a generated password printed once.
func (a *App) bootstrapAdmin(ctx context.Context, out io.Writer) error {
	n, err := a.Store.CountUsers(ctx)
	if err != nil {
		return fmt.Errorf("count users: %w", err)
	}
	if n > 0 {
		return nil
	}
	password := os.Getenv("SLUICE_ADMIN_PASSWORD")
	generated := password == ""
	if generated {
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		password = base64.RawURLEncoding.EncodeToString(b)
	}
	made, err := a.Accounts.BootstrapAdmin(ctx, password)
	if err != nil {
		return fmt.Errorf("create admin user: %w", err)
	}
	if !made {
		return nil // another node bootstrapped at the same moment
	}
	if generated && out != nil {
		fmt.Fprintf(out, "\nSluice created the administrator account.\n  username: admin\n  password: %s\nThis password is shown only once; change it after signing in.\n\n", password)
	}
	a.Logger.Info("created administrator account", "component", "app", "username", "admin", "password_generated", generated)
	return nil
}

// Listen binds the HTTP address. Separate from Serve so callers (tests)
// learn the address before serving and a bind failure is reported early.
func (a *App) Listen() error {
	ln, err := net.Listen("tcp", a.Config.Server.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (server.http_addr): %w", a.Config.Server.HTTPAddr, err)
	}
	a.httpLn = ln
	if a.SSH != nil {
		sln, err := net.Listen("tcp", a.Config.Server.SSHAddr)
		if err != nil {
			return fmt.Errorf("listen on %s (server.ssh_addr; set it empty to disable SSH): %w", a.Config.Server.SSHAddr, err)
		}
		a.sshLn = sln
	}
	a.baseURL, a.sshBaseURL = a.boundBaseURLs()
	return nil
}

// boundBaseURLs returns the base URLs for the bound addresses. config's
// Resolve derives a base URL that was not set from the listen address,
// which names port 0 when the port is chosen at bind time (tests, the
// lab); such a derived URL takes the bound port. A base URL set
// explicitly (a proxy, a DNS name) is left alone.
func (a *App) boundBaseURLs() (httpURL, sshURL string) {
	srv := a.Config.Server
	httpURL, sshURL = srv.BaseURL, srv.SSHBaseURL
	if httpURL == "http://"+srv.HTTPAddr {
		httpURL = "http://" + withBoundPort(srv.HTTPAddr, a.httpLn)
	}
	if a.sshLn != nil && sshURL == "ssh://git@"+srv.SSHAddr {
		sshURL = "ssh://git@" + withBoundPort(srv.SSHAddr, a.sshLn)
	}
	return httpURL, sshURL
}

// withBoundPort is the configured address with the port ln is bound to;
// the configured host is kept (":7990" stays host-less, as configured).
func withBoundPort(configured string, ln net.Listener) string {
	host, _, err := net.SplitHostPort(configured)
	if err != nil {
		return configured
	}
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return configured
	}
	return net.JoinHostPort(host, port)
}

// BaseURL is how users reach this node over HTTP, without a trailing
// slash: server.base_url, or derived from the bound address.
func (a *App) BaseURL() string {
	if a.httpLn != nil {
		return strings.TrimRight(a.baseURL, "/")
	}
	return strings.TrimRight(a.Config.Server.BaseURL, "/")
}

// SSHBaseURL is the SSH clone URL prefix, like BaseURL ("" without SSH).
func (a *App) SSHBaseURL() string {
	if a.httpLn != nil {
		return strings.TrimRight(a.sshBaseURL, "/")
	}
	return strings.TrimRight(a.Config.Server.SSHBaseURL, "/")
}

// SSHAddr is the bound SSH address, or "" when SSH is disabled.
func (a *App) SSHAddr() string {
	if a.SSH == nil {
		return ""
	}
	if a.sshLn == nil {
		return a.Config.Server.SSHAddr
	}
	return a.sshLn.Addr().String()
}

// HTTPAddr is the bound HTTP address.
func (a *App) HTTPAddr() string {
	if a.httpLn == nil {
		return a.Config.Server.HTTPAddr
	}
	return a.httpLn.Addr().String()
}

// Serve runs the node until ctx ends, then shuts down gracefully: it stops
// accepting, lets running git operations finish within
// server.shutdown_timeout, and stops the job workers.
func (a *App) Serve(ctx context.Context) error {
	if a.httpLn == nil {
		if err := a.Listen(); err != nil {
			return err
		}
	}
	if err := a.Jobs.Start(ctx); err != nil {
		return fmt.Errorf("start jobs: %w", err)
	}
	if err := a.startCluster(ctx); err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	srv := &http.Server{
		Handler:           a.Handler,
		ReadHeaderTimeout: a.Config.Server.ReadHeaderTimeout.Duration,
		IdleTimeout:       a.Config.Server.IdleTimeout.Duration,
		ErrorLog:          slog.NewLogLogger(a.Logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(a.httpLn) }()
	sshErrc := make(chan error, 1)
	if a.SSH != nil {
		go func() { sshErrc <- a.SSH.Serve(a.sshLn) }()
	}
	a.Logger.Info("sluice serving", "component", "app", "http_addr", a.HTTPAddr(), "ssh_addr", a.SSHAddr(), "version", Version,
		"database", a.Store.Dialect(), "repositories", a.Config.Storage.Repositories)

	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case err := <-sshErrc:
		return fmt.Errorf("ssh server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), a.Config.Server.ShutdownTimeout.Duration)
	defer cancel()
	var sshDone chan error
	if a.SSH != nil {
		// SSH and HTTP drain side by side, within one shutdown timeout.
		sshDone = make(chan error, 1)
		go func() { sshDone <- a.SSH.Shutdown(sctx) }()
	}
	err := srv.Shutdown(sctx)
	if sshDone != nil {
		if serr := <-sshDone; serr != nil && err == nil {
			err = serr
		}
	}
	if jerr := a.Jobs.Stop(sctx); jerr != nil && err == nil {
		err = jerr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		a.Logger.Warn("shutdown timed out; remaining operations were cut", "component", "app")
	}
	return nil
}

// Close releases every component, in reverse order of construction.
func (a *App) Close() error {
	var errs []error
	a.once.Do(func() {
		if a.httpLn != nil {
			a.httpLn.Close()
		}
		if a.sshLn != nil {
			a.sshLn.Close()
		}
		for i := len(a.closers) - 1; i >= 0; i-- {
			if err := a.closers[i](); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

func (a *App) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/scm/", githttp.New(a.Hosting, a.Auth, githttp.Config{
		MaxRequestBody: int64(a.Config.Server.MaxRequestBody),
		MaxPushBody:    int64(a.Config.Git.MaxInputSize),
		BodyTimeout:    a.Config.Server.BodyTimeout.Duration,
	}, a.Logger))
	var packCache api.PackCache
	if a.Cache != nil {
		packCache = a.Cache
	}
	// Built at the first request, after Listen: the clone links it
	// serves carry the bound address (BaseURL).
	restAPI := lazyHandler(func() http.Handler {
		return api.New(api.Deps{
			Store:       a.Store,
			Auth:        a.Auth,
			Accounts:    a.Accounts,
			Repos:       a.Repos,
			Git:         a.Git,
			Hooks:       a.Hooks,
			Logger:      a.Logger,
			BaseURL:     a.BaseURL(),
			SSHBaseURL:  a.SSHBaseURL(),
			Throttle:    a.Throttle,
			PackCache:   packCache,
			Pulls:       a.Pulls,
			Webhooks:    a.Webhooks,
			BranchPerms: a.BranchPerms,
			Notify:      a.Notify,
			Cluster:     clusterStatus{a},
		})
	})
	mux.Handle("/rest/", a.Throttle.Middleware(restAPI))
	mux.Handle("/", a.web())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /readyz", a.ready)
	a.debugRoutes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{Registry: a.Registry}))
	return newRequestLog(mux, a.Logger, a.Registry, a.Config.TrustedProxyNets())
}
