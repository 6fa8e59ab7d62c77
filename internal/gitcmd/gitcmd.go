// Package gitcmd is the only package in Sluice that executes git.
//
// Everything that could let a user steer git lives here, once:
//
//   - argv is built from a Cmd whose parts have fixed roles. The subcommand
//     comes from an allow-list. Flags are options the server chose and must
//     look like options. Args are user-influenced values (revisions, ref
//     names, patterns): they may not begin with '-' and may not hold NUL, CR
//     or LF, and where git 2.39 honours it they go after --end-of-options, so
//     neither layer alone has to be perfect. Paths go after "--", and
//     GIT_LITERAL_PATHSPECS turns off pathspec magic so a file called
//     ":(top)" is just a file. The table of which subcommands honour
//     --end-of-options is checked against the real git binary by a test.
//
//   - the environment is built from an allow-list, not inherited: a process
//     sees PATH, a server-owned HOME with its own global config, C locale, and
//     only the variables a caller may pass on purpose (GIT_PROTOCOL after
//     validation, the SLUICE_HOOK_* variables the hook client needs, the
//     quarantine variables pre-receive checks need, and commit identity).
//     LD_PRELOAD, GIT_DIR, GIT_CONFIG_* and friends from the server's own
//     environment never reach git.
//
//   - configuration is server-owned: GIT_CONFIG_NOSYSTEM ignores /etc/gitconfig
//     and GIT_CONFIG_GLOBAL points at HomeDir/.gitconfig, which New rewrites
//     on every start (see globalConfig for why each key is there). Hooks are
//     pinned with core.hooksPath to symlinks to sluice-hook (or, without it,
//     scripts that exec `sluice hook`), so a hook file inside a repository
//     is never run. Every object a push or a fetch brings in is checked
//     (transfer.fsckObjects), and every malformed-tree class, mode 100666
//     included, is an error rather than a warning (fsckTreeErrors).
//
//   - every process runs in its own process group, is bounded by
//     Config.Timeout and its context, and on cancellation gets SIGTERM and,
//     after a grace period, SIGKILL for the whole group, so a pack-objects
//     child of upload-pack dies with its parent. The heavy commands (those
//     that serve clones and pushes, and housekeeping's) run at Config.Nice
//     and are handed to Config.Confine as they start, which the throttle
//     uses to move them into its git cgroup.
//
//   - the interactive commands (see bounded: what browse, diff, blame,
//     archive, merges, pull request diffs and the diff precompute job run)
//     are bounded where a hostile repository could make them unbounded: a
//     wall clock (Config.ReadTimeout, far below the clone timeout), an
//     address-space limit (Config.ReadMemoryLimit, RLIMIT_AS) with git's
//     pack windows and delta cache sized below it, and
//     core.bigFileThreshold (Config.MaxDiffBlobSize), which makes git show
//     a bigger blob as binary instead of loading it into a diff. Running
//     out of either bound is a problem.TooLarge naming the setting, so a
//     caller answers 413 with the reason, never 500. The limit works
//     without cgroups: the process is started as /bin/sh running
//     `ulimit -v N; exec git …`, so the limit is in force before git's
//     first instruction and the shell is replaced by git (same pid, same
//     process group, git's exit status). That costs one small exec (about
//     a millisecond) per command. The alternatives were worse: Go's os/exec
//     cannot set rlimits between fork and exec; prlimit(2) on the child
//     after Start races git's own start-up (a busy node can deschedule the
//     parent for longer than git takes to map a pack and inflate a blob,
//     and the limit must hold from the first allocation to be a bound at
//     all); util-linux's prlimit binary is the same idea with one more
//     dependency and its own option parsing in front of git's argv; and a
//     re-exec of the sluice binary costs a Go runtime start-up per command.
//     Clones and pushes keep Config.Timeout and no memory bound: their cost
//     grows with the repository by design, and the throttle bounds them.
//
// Every started process is counted in sluice_git_processes_started_total
// {command}; tests use that counter to prove that a pack-cache hit starts no
// git at all.
package gitcmd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Runner.
type Config struct {
	// Binary is the git executable, looked up in PATH if not absolute.
	// Default "git".
	Binary string
	// HomeDir is a server-owned directory; New creates it and writes the
	// global git config and the hook scripts into it.
	HomeDir string
	// HookBinary is the absolute path of the sluice executable that the hook
	// scripts exec as `sluice hook NAME`.
	HookBinary string
	// HookHelper, when set, is the absolute path of the sluice-hook
	// executable (cmd/sluice-hook): each hook is then a symlink to it
	// instead of a script running HookBinary, which saves a shell and the
	// big binary's start-up on every hook, three times per push.
	HookHelper string
	// MaxInputSize becomes receive.maxInputSize, the largest pack a push may
	// send; zero leaves git's default (unlimited).
	MaxInputSize int64
	// Timeout bounds every process; zero means no bound beyond the context.
	Timeout time.Duration
	// PackThreads, when positive, is passed to every command as
	// `-c pack.threads=N` (pack-objects, index-pack, repack; children
	// inherit it). Git's default is the CPUs the process can see, which on
	// a node given a share of a machine (a CFS quota, throttle.cores) is
	// more than its share: one pack-objects then spends the node's whole
	// quota early in each period and the kernel stalls every process of
	// the node, REST requests included, until the next one. A command-line
	// setting, not the global config, because processes sharing a git
	// home (an admin command outside the server's cgroup) may see other
	// core counts.
	PackThreads int
	// Nice is the scheduling niceness (0..19) of the heavy commands that
	// serve clones and pushes and repack (see niced). Under a clone storm
	// the node's own work — REST requests, pack cache hits, the web UI —
	// then gets the CPU first and stays responsive while git takes the
	// rest; the CPU each operation costs is unchanged.
	Nice int
	// Confine, when set, is called with the pid of each heavy command
	// (see confined) right after it starts, before it has read its
	// request; the throttle moves it into the git cgroup, whose weight
	// and CPU cap it and its children (pack-objects) then share. An
	// error is logged and the command runs where it is.
	Confine func(pid int) error
	// ReadMemoryLimit is the address-space limit (RLIMIT_AS, bytes) of the
	// interactive commands (see bounded); zero means none.
	ReadMemoryLimit int64
	// ReadTimeout bounds each interactive command; zero means Timeout.
	ReadTimeout time.Duration
	// MaxDiffBlobSize becomes core.bigFileThreshold for the interactive
	// commands: bigger blobs are not diffed; zero leaves git's default.
	MaxDiffBlobSize int64
}

// niced lists the commands Config.Nice applies to: the ones whose CPU
// grows with repository size. Their children (pack-objects, index-pack)
// inherit the niceness.
var niced = map[string]bool{
	"upload-pack": true, "receive-pack": true, "upload-archive": true,
	"repack": true, "multi-pack-index write": true, "commit-graph write": true,
	"archive": true, "merge-tree": true,
}

// confined lists the commands Config.Confine applies to: the niced ones
// but merge-tree, whose result a user waits for when merging a pull
// request and which must not queue behind a clone storm's cap.
func confined(name string) bool { return niced[name] && name != "merge-tree" }

// HookNames are the hooks New installs under HomeDir/hooks.
// There is no post-receive: the hooks server learns that a push ended
// when the request does, which saves a process per push.
var HookNames = []string{"pre-receive", "reference-transaction"}

// killGrace is how long a cancelled process has between SIGTERM and
// SIGKILL. Git cleans up lock files and temporary packs on SIGTERM; a second
// is plenty for that and short enough that a cancelled request frees its
// ticket promptly.
const killGrace = time.Second

// Runner runs git processes. It is safe for concurrent use.
type Runner struct {
	binary   string
	homeDir  string
	hooksDir string
	timeout  time.Duration
	nice     int
	confine  func(pid int) error
	preArgs  []string // -c settings before the subcommand (PackThreads)
	read     readBounds
	// maxDiffBlob is Config.MaxDiffBlobSize.
	maxDiffBlob int64
	baseEnv     []string
	logger      *slog.Logger

	started  *prometheus.CounterVec
	running  prometheus.Gauge
	duration *prometheus.HistogramVec

	catfileMu    sync.Mutex
	catfiles     map[string][]*CatFile // idle batch processes per repository
	catfileIdle  time.Duration
	catfileTimer *time.Timer
	closed       bool
}

// New prepares HomeDir (global config, hook scripts) and returns a Runner.
func New(cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Runner, error) {
	if cfg.Binary == "" {
		cfg.Binary = "git"
	}
	binary, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("find git: %w", err)
	}
	if binary, err = filepath.Abs(binary); err != nil {
		return nil, fmt.Errorf("find git: %w", err)
	}
	if cfg.HomeDir == "" || !filepath.IsAbs(cfg.HomeDir) {
		return nil, fmt.Errorf("git home directory must be an absolute path, got %q", cfg.HomeDir)
	}
	if err := checkHookBinary(cfg.HookBinary); err != nil {
		return nil, err
	}
	if cfg.HookHelper != "" {
		if err := checkHookBinary(cfg.HookHelper); err != nil {
			return nil, err
		}
	}
	home := filepath.Clean(cfg.HomeDir)
	r := &Runner{
		binary:      binary,
		homeDir:     home,
		hooksDir:    filepath.Join(home, "hooks"),
		timeout:     cfg.Timeout,
		nice:        min(max(cfg.Nice, 0), 19),
		confine:     cfg.Confine,
		logger:      logger.With("component", "gitcmd"),
		catfiles:    map[string][]*CatFile{},
		catfileIdle: catfileIdle,
		read:        newReadBounds(cfg),
		maxDiffBlob: max(cfg.MaxDiffBlobSize, 0),
	}
	if cfg.PackThreads > 0 {
		r.preArgs = []string{"-c", "pack.threads=" + strconv.Itoa(cfg.PackThreads)}
	}
	if err := r.writeHome(cfg); err != nil {
		return nil, err
	}
	r.baseEnv = baseEnv(home, os.Getenv("PATH"))

	r.started = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_git_processes_started_total",
		Help: "Git processes started, by subcommand.",
	}, []string{"command"})
	r.running = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_git_processes_running",
		Help: "Git processes currently running.",
	})
	r.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_git_process_duration_seconds",
		Help:    "Wall time of git processes, by subcommand.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1 ms … ~4.4 min
	}, []string{"command"})
	if reg != nil {
		for _, c := range []prometheus.Collector{r.started, r.running, r.duration} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register git metrics: %w", err)
			}
		}
	}
	return r, nil
}

// HomeDir is the server-owned directory holding the global config and hooks.
func (r *Runner) HomeDir() string { return r.homeDir }

// HooksDir is where core.hooksPath points.
func (r *Runner) HooksDir() string { return r.hooksDir }

// Started returns how many processes of the given subcommand (as in
// Cmd.Name) this Runner has started.
func (r *Runner) Started(command string) float64 {
	c, err := r.started.GetMetricWithLabelValues(command)
	if err != nil {
		return 0
	}
	return counterValue(c)
}

// Close stops the idle cat-file processes. Processes started with Start
// are the caller's to wait for.
func (r *Runner) Close() error {
	r.catfileMu.Lock()
	r.closed = true
	idle := r.catfiles
	r.catfiles = map[string][]*CatFile{}
	if r.catfileTimer != nil {
		r.catfileTimer.Stop()
	}
	r.catfileMu.Unlock()
	var errs []error
	for _, list := range idle {
		for _, c := range list {
			errs = append(errs, c.close())
		}
	}
	return errors.Join(errs...)
}
