// Package throttle keeps a node responsive at any load: it limits how many
// git processes run at once (hosting tickets), queues the rest fairly with
// a bounded length and wait, and rate-limits each principal. Its git-facing
// API is Admit (a Ticket, a progress callback) and RateLimit, which hosting,
// the runner that calls it, adapts to; it wraps the REST API in the same
// rate limit.
//
// # Tickets
//
// Every git operation that runs git — a push, a fetch the pack cache could
// not answer — takes a ticket (hosting calls Admit only then; cache hits,
// REST and web requests never do). With strategy "fixed" the limit is
// throttle.fixed (0: two per core). With "adaptive" it moves between
// min_per_core×cores and max_per_core×cores (Bitbucket's 1 and 12) to hold
// CPU utilisation near target_cpu (0.75).
//
// What "CPU" means matters when several nodes share a machine: each must
// see its own load, not its neighbours'. DetectSources chooses: when
// throttle.cores is set, the CPU time of the node's process tree
// (/proc/self/stat and every descendant's, including what reaped children
// left in cutime/cstime) divided by that many cores; otherwise the node's
// own cgroup (v2 cpu.stat usage_usec, v1 cpuacct.usage) with its CPU quota
// as the core count, when the node has a cgroup of its own; otherwise the
// process tree against the CPUs the process may use. A root cgroup is the
// whole machine and is never used.
//
// The same core count sizes git's pack.threads when it is below the CPUs
// git counts (PackThreads, passed to gitcmd by the app). A ticket is meant
// to be one git operation's worth of CPU; git's default thread count is
// the machine's CPUs, so on a node given fewer cores one pack-objects
// alone could spend the node's whole
// CFS quota early in each period and stall every process of the node —
// REST included — until the next, whatever the ticket limit.
//
// # The control law
//
// Every interval (2 s) the controller measures utilisation u over the
// interval and the time-averaged tickets in use n, and sets the limit L:
//
//   - u > target+band (band 0.05): proportional decrease,
//     L ← max(L/2, ⌊n·target/u⌋), and at least by one;
//   - u < target−band, and some request had to queue: increase to
//     ⌊n·(target+band)/u⌋, the largest count the linear model u ∝ n keeps
//     inside the band, by at most step (a quarter ticket per core, at
//     least one) per interval; never while CPU pressure is high. Without
//     a queue the limit is not what holds u down, so it stays;
//   - otherwise (inside the band) L stays.
//
// L is then clamped to [min, max], and a memory backstop may lower the
// effective limit further (below).
//
// Below the floor: the git group's share. A ticket is a whole git
// process, and on a small node one pack-objects can keep every core busy
// by itself: at L = min, u can stay above the band and no count holds it.
// When the node has a git cgroup (GitGroup: the heavy git processes in a
// child cgroup of the node's own) the controller then caps that group's
// CPU at a share s of the node's cores, a continuous actuator:
//
//   - entering (L = min, s = 1, u > target+band): s ← target;
//   - then every interval: s ← max(0.2, s + ½·(target − u)), held while
//     |target − u| ≤ band/2; s reaching 1 lifts the cap, and only then
//     does the ticket law above act again (one actuator at a time).
//
// With git using its cap, u = b + k·s (b the node's own work, k ≥ 1 its
// overhead per unit of git, such as proxying the pack), so the error
// shrinks by a factor of |1 − k/2| each interval: monotonically for
// k < 2, without crossing the target. When git uses less than its cap
// (s above git's demand), lowering s changes nothing until the cap binds,
// and raising it is harmless; either way u moves toward the target or
// not at all. The floor of 0.2 keeps queued work moving when the node's
// own work alone is above target. The group's weight (cpu.shares 256, a
// quarter of one of the node's threads) also gives the node's request
// handlers the CPU first at any share, and its quota keeps git from
// spending the node's whole CFS quota, after which every process of the
// node — REST handlers included — would wait for the next period.
//
// Why it is stable. (1) It is bounded: L never leaves [min, max]. (2) The
// dead band absorbs measurement noise: fluctuations of u smaller than 0.05
// change nothing, so steady load at the target holds the limit constant.
// (3) Neither step overshoots. Model utilisation as u = b + c·n, with b ≥ 0
// the CPU spent outside tickets (REST, cache hits, the Go runtime). The
// decrease aims at n·target/u, which exceeds the true set point
// (target−b)/c by b·(u−target)/(c·u) ≥ 0 when u > target, so it lands at or
// above the target, never below; the increase aims at n·(target+band)/u,
// which for the same reason lands at or below target+band. Each step
// therefore moves u into the band or monotonically toward it: there is no
// overshoot to be corrected the other way, so no limit cycle, even with
// tickets so coarse (two cores, half a core each) that no count puts u
// inside the band — the increase guard then simply refuses the step that
// would leave it. (4) The decrease is capped at halving and the increase
// at step per interval, so a sample skewed by operations starting or ending
// mid-interval moves L by a bounded amount that the next sample corrects;
// the interval (2 s) is long against the CPU measurement's granularity
// (10 ms ticks) and short against a clone (seconds to minutes), and a raised
// limit admits queued work at once, so the effect of a change shows within
// one or two intervals.
//
// PSI (cpu "some avg10") adds a guard: above 0.8 the limit never grows.
// Only the node's own PSI (its v2 cgroup's cpu.pressure) also shrinks it,
// by a quarter; the machine's /proc/pressure/cpu includes other nodes.
//
// Memory backstop: each running or queued operation is estimated at 1.5 ×
// min(repository size, 700 MB) (Bitbucket's sizing rule); the effective
// limit is at most the tickets in use plus what the available memory
// (MemAvailable, or the cgroup's limit minus usage) less a 256 MiB reserve
// holds of the mean estimate — never below one.
//
// # Queueing
//
// A request that finds no free ticket waits in its principal's FIFO queue
// (user; access key; anonymous callers by IP). Tickets go round-robin
// across principals, so a CI agent with 100 queued clones delays a
// developer's one by at most one clone per other waiting principal. The
// queue is bounded in length (queue_max, default 1000; beyond it: refused at
// once, "server busy: queue full") and in wait (queue_wait, default 5 min,
// Bitbucket's; then "waited Ns for capacity; try again later"). Both
// refusals are problem.Unavailable with a Retry-After, which githttp
// renders as a 503 with a text body on GET info/refs or an ERR pkt-line in a
// 200 POST, and sshd as error text and a non-zero exit. While a request
// waits, progress receives "sluice: waiting for capacity, N ahead of you"
// at once and every 5 s; hosting forwards it where the protocol has a side
// channel.
//
// # Rate limiting
//
// A token bucket per principal (user; anonymous callers by IP), by default
// 60 requests with 5 per second refilled (Bitbucket's numbers), charged by
// every git operation over HTTP and SSH (RateLimit, called by hosting) and
// every REST request (Middleware). A refusal is problem.Throttled with
// Retry-After and a Limited cause: 429 with X-RateLimit-Limit and
// X-RateLimit-Remaining on HTTP (SetHeaders), the ERR form inside a git
// POST. Exemptions give a user, a group's members or one access token
// their own bucket, or none. The settings live in the database
// (SettingRateLimits) and are edited at run time through the admin REST
// API; the node that stores them publishes the change on the cluster's
// event bus and every node Reloads at once, and each also polls the
// setting every 5 s, for a node that missed the event.
// Buckets live in an LRU map bounded at 100,000 entries, and buckets that
// have refilled completely are dropped at each poll.
//
// # Visibility
//
// Metrics sluice_throttle_tickets_{limit,in_use,queued},
// sluice_throttle_queue_wait_seconds, sluice_throttle_rejections_total
// {reason}, sluice_throttle_rate_limited_total{class},
// sluice_throttle_cpu_utilization_ratio and, with a git group,
// sluice_throttle_git_cpu_share; State for the admin endpoint; one log
// line per refusal.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Defaults for Options fields left zero.
const (
	defaultInterval      = 2 * time.Second
	defaultPollInterval  = 5 * time.Second
	defaultProgressEvery = 5 * time.Second
	// defaultMaxBuckets bounds the bucket map: some 100 bytes each, so
	// 10 MB at worst, reached only by a flood from that many addresses.
	defaultMaxBuckets = 100_000
	// pressureHigh: above this PSI share the limit does not grow.
	pressureHigh = 0.8
	// Bitbucket's memory sizing rule: 1.5 × min(repository size, 700 MB)
	// per concurrent clone.
	memFactor   = 1.5
	memRepoCap  = 700 << 20
	memFallback = 64 << 20 // a repository whose size is unknown
)

// Config is what an operator sets: the throttle section of the node's
// configuration, which the app translates. The package keeps no defaults
// for it, so the configuration's are the only ones.
type Config struct {
	// Strategy is "adaptive" (or empty) or "fixed".
	Strategy string
	// Fixed is the fixed strategy's ticket count; 0 is two per core.
	Fixed int
	// MinPerCore and MaxPerCore bound the adaptive limit; TargetCPU is the
	// utilisation (0..1) it holds.
	MinPerCore, MaxPerCore, TargetCPU float64
	// Cores is the node's CPU budget; 0 is what DetectSources finds.
	Cores float64
	// QueueMax bounds the queue's length, QueueWait a request's wait in it.
	QueueMax  int
	QueueWait time.Duration
	// RateLimit, RateBucket and RateRefill are the rate limits in force
	// until an administrator stores others (SettingRateLimits).
	RateLimit  bool
	RateBucket int
	RateRefill float64
}

// Options are the collaborators and the knobs tests turn.
type Options struct {
	Store      store.Store
	Auth       *auth.Service // for the REST middleware
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// RepoPath finds a repository's directory by id, for the memory
	// estimate; nil estimates every operation alike.
	RepoPath func(id int64) string
	// Sources override DetectSources (tests).
	Sources *Sources
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Interval is the controller's sampling interval; PollInterval how
	// often the rate-limit setting is re-read; ProgressEvery how often a
	// waiting request hears about it.
	Interval, PollInterval, ProgressEvery time.Duration
	// MaxBuckets bounds the rate-limit bucket map.
	MaxBuckets int
	// GitGroup is the cgroup heavy git processes run in (OpenGitGroup),
	// or nil. The adaptive controller caps its CPU share below the
	// ticket floor; the fixed strategy leaves it alone.
	GitGroup *GitGroup
	// OnRateLimitsChanged is called after SetRateLimits stored new
	// settings; the app publishes it on the cluster's event bus so other
	// nodes Reload at once instead of at their next poll.
	OnRateLimitsChanged func()
}

// Throttle is one node's admission control.
type Throttle struct {
	cfg    Config
	opts   Options
	logger *slog.Logger
	now    func() time.Time
	pool   *pool
	ctrl   *controller // nil for the fixed strategy
	rl     *rateLimiter
	m      *metrics
	idents *identityCache

	mu        sync.Mutex // guards ctrlState and sizes
	ctrlState controlState
	sizes     map[string]sizeEntry

	stop      chan struct{}
	done      chan struct{}
	started   bool
	closeOnce sync.Once
}

// New builds a Throttle. Start runs its controller and settings poll;
// Close stops them.
func New(cfg Config, opts Options) (*Throttle, error) {
	if opts.Store == nil {
		return nil, errors.New("throttle: no store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Interval <= 0 {
		opts.Interval = defaultInterval
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = defaultProgressEvery
	}
	if opts.MaxBuckets <= 0 {
		opts.MaxBuckets = defaultMaxBuckets
	}
	t := &Throttle{
		cfg:    cfg,
		opts:   opts,
		logger: opts.Logger.With("component", "throttle"),
		now:    opts.Now,
		sizes:  make(map[string]sizeEntry),
		idents: newIdentityCache(opts.Now),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	var start int
	switch cfg.Strategy {
	case "fixed":
		start = cfg.Fixed
		if start <= 0 {
			src := t.sources()
			start = max(1, int(math.Round(2*src.Cores)))
		}
	case "adaptive", "":
		src := t.sources()
		if src.Cores <= 0 {
			return nil, errors.New("throttle: no core count")
		}
		l := law{
			target:       cfg.TargetCPU,
			band:         0.05,
			min:          max(1, int(math.Round(cfg.MinPerCore*src.Cores))),
			max:          max(1, int(math.Round(cfg.MaxPerCore*src.Cores))),
			step:         max(1, int(math.Round(src.Cores/4))),
			pressureHigh: pressureHigh,
		}
		l.max = max(l.max, l.min)
		// Start at Bitbucket's sizing rule of thumb, 2 concurrent clones
		// per CPU, within the bounds, and let measurement move it: a node
		// that starts under a storm must not admit max tickets before its
		// first sample, nor crawl up from the floor when it is idle.
		start = max(l.min, min(l.max, int(math.Round(2*src.Cores))))
		t.ctrl = newController(l, src, start)
		if opts.GitGroup != nil {
			t.ctrl.cap = opts.GitGroup
		}
	default:
		return nil, fmt.Errorf("throttle: unknown strategy %q", cfg.Strategy)
	}
	queueMax := cfg.QueueMax
	t.pool = newPool(start, queueMax, opts.Now)
	t.rl = newRateLimiter(RateLimits{Enabled: cfg.RateLimit, Bucket: cfg.RateBucket, Refill: cfg.RateRefill},
		opts.MaxBuckets, opts.Now)
	m, err := newMetrics(opts.Registerer, t)
	if err != nil {
		return nil, err
	}
	t.m = m
	return t, nil
}

func (t *Throttle) sources() Sources {
	if t.opts.Sources != nil {
		return *t.opts.Sources
	}
	return DetectSources(t.cfg.Cores)
}

// Start loads the stored rate limits and runs the controller and the
// settings poll until Close.
func (t *Throttle) Start(ctx context.Context) {
	t.poll(ctx)
	t.started = true
	go t.loop()
	if t.ctrl != nil {
		t.logger.Info("adaptive throttling", "cpu_source", t.ctrl.src.CPU.Name(), "cores", t.ctrl.src.Cores,
			"min", t.ctrl.law.min, "max", t.ctrl.law.max, "target_cpu", t.ctrl.law.target)
	}
}

// Close stops the background loop. Operations holding tickets are not
// affected.
func (t *Throttle) Close() error {
	t.closeOnce.Do(func() {
		close(t.stop)
		if t.started {
			<-t.done
		}
	})
	return nil
}

func (t *Throttle) loop() {
	defer close(t.done)
	ctl := time.NewTicker(t.opts.Interval)
	defer ctl.Stop()
	poll := time.NewTicker(t.opts.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-ctl.C:
			t.Tick()
		case <-poll.C:
			ctx, cancel := context.WithTimeout(context.Background(), t.opts.PollInterval)
			t.poll(ctx)
			cancel()
			t.rl.sweep()
		}
	}
}

// Tick runs the controller once. The background loop calls it every
// interval; tests with a fake clock call it directly.
func (t *Throttle) Tick() {
	if t.ctrl == nil {
		return
	}
	avg, saturated := t.pool.window()
	ps := t.pool.state()
	perOp := int64(memFallback * memFactor)
	if ps.InUse > 0 && ps.MemInUse > 0 {
		perOp = ps.MemInUse / int64(ps.InUse)
	}
	prevShare := t.ctrl.last.GitShare
	st := t.ctrl.tick(t.now(), avg, saturated, ps.InUse, perOp)
	if st.Limit != ps.Limit {
		t.logger.Debug("ticket limit changed", "from", ps.Limit, "to", st.Limit, "reason", st.Reason,
			"cpu", round2(st.Util), "in_use", round2(st.InUse), "pressure", round2(st.Pressure))
	}
	if st.SourceError != "" {
		t.logger.Warn("cannot measure cpu; ticket limit unchanged", "error", st.SourceError)
	}
	if st.CapError != "" {
		t.logger.Warn("cannot cap git's cpu share", "error", st.CapError)
	}
	if st.GitShare != prevShare {
		t.logger.Debug("git cpu share changed", "from", round2(prevShare), "to", round2(st.GitShare), "reason", st.Reason,
			"cpu", round2(st.Util))
	}
	t.pool.setLimit(st.Limit)
	t.mu.Lock()
	t.ctrlState = st
	t.mu.Unlock()
	t.m.cpu.Set(st.Util)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// poll re-reads the stored rate limits and applies them when they changed.
// A stored document that does not parse is logged and ignored: the last
// good settings stay.
func (t *Throttle) poll(ctx context.Context) {
	raw, rl, ok, err := loadRateLimits(ctx, t.opts.Store)
	if err != nil {
		t.logger.Warn("cannot load rate limits; keeping the current ones", "error", err)
		return
	}
	if !ok {
		rl = RateLimits{Enabled: t.cfg.RateLimit, Bucket: t.cfg.RateBucket, Refill: t.cfg.RateRefill}
	}
	_, cur, _ := t.rl.current()
	hasGroups := false
	for _, e := range rl.Exemptions {
		hasGroups = hasGroups || e.Group != ""
	}
	// Group membership can change without the document changing, so a
	// document with group exemptions is resolved again every poll.
	if raw == cur && !hasGroups && t.started {
		return
	}
	members, err := resolveGroups(ctx, t.opts.Store, rl)
	if err != nil {
		t.logger.Warn("cannot resolve rate-limit groups; keeping the current ones", "error", err)
		return
	}
	if raw != cur {
		t.logger.Info("rate limits loaded", "enabled", rl.Enabled, "bucket", rl.Bucket, "refill", rl.Refill,
			"exemptions", len(rl.Exemptions), "stored", ok)
	}
	t.rl.apply(rl, members, raw, ok)
}

// RateLimits returns the rate-limit settings in force and whether they
// come from the database (false: the config file's defaults).
func (t *Throttle) RateLimits() (RateLimits, bool) {
	rl, _, stored := t.rl.current()
	if rl.Exemptions == nil {
		rl.Exemptions = []Exemption{}
	}
	return rl, stored
}

// SetRateLimits validates rl, checks that its users and groups exist,
// stores it and applies it on this node at once; other nodes pick it up
// at their next poll.
func (t *Throttle) SetRateLimits(ctx context.Context, rl RateLimits) error {
	if err := rl.Validate(); err != nil {
		return err
	}
	for _, e := range rl.Exemptions {
		switch {
		case e.User != "":
			if _, err := t.opts.Store.UserByName(ctx, e.User); err != nil {
				if problem.Is(err, problem.NotFound) {
					return problem.New(problem.Invalid, "exemption: no user %q", e.User)
				}
				return err
			}
		case e.Group != "":
			if _, err := t.opts.Store.GroupByName(ctx, e.Group); err != nil {
				if problem.Is(err, problem.NotFound) {
					return problem.New(problem.Invalid, "exemption: no group %q", e.Group)
				}
				return err
			}
		}
	}
	if rl.Exemptions == nil {
		rl.Exemptions = []Exemption{}
	}
	b, err := jsonMarshal(rl)
	if err != nil {
		return err
	}
	if err := t.opts.Store.PutSetting(ctx, SettingRateLimits, string(b)); err != nil {
		return fmt.Errorf("store rate limits: %w", err)
	}
	members, err := resolveGroups(ctx, t.opts.Store, rl)
	if err != nil {
		return err
	}
	t.rl.apply(rl, members, string(b), true)
	t.logger.Info("rate limits changed", "enabled", rl.Enabled, "bucket", rl.Bucket, "refill", rl.Refill,
		"exemptions", len(rl.Exemptions))
	if t.opts.OnRateLimitsChanged != nil {
		t.opts.OnRateLimitsChanged()
	}
	return nil
}

// Reload re-reads the stored rate-limit settings now. The event bus calls
// it when another node changed them; the periodic poll remains as the
// fallback for a node that missed the event.
func (t *Throttle) Reload(ctx context.Context) { t.poll(ctx) }

// Ticket describes the git operation that asks for a hosting ticket.
type Ticket struct {
	Principal *auth.Principal
	// RemoteAddr is the client's address: anonymous callers queue by it.
	RemoteAddr string
	// ProjectKey and Slug name the repository as the client wrote them;
	// its size sizes the memory estimate.
	ProjectKey, Slug string
	// Command and Transport label the log line of a refusal as hosting
	// labels the operation's own ("upload-pack", "upload-pack-advertisement",
	// "receive-pack", …; "http", "ssh").
	Command, Transport string
}

// Admit takes a hosting ticket for tk, queueing fairly when none is free;
// progress, when not nil, receives the queueing messages while it waits. The
// returned release gives the ticket back. A refusal is a problem error
// (Unavailable, with a RetryAfter).
func (t *Throttle) Admit(ctx context.Context, tk Ticket, progress func(msg string)) (func(), error) {
	p := tk.Principal
	key := principalKey(p, tk.RemoteAddr)
	var mem int64
	if t.ctrl != nil {
		mem = t.estimate(ctx, tk)
	}
	start := t.now()
	var report func(int)
	if progress != nil {
		report = func(ahead int) {
			progress(fmt.Sprintf("sluice: waiting for capacity, %d ahead of you", ahead))
		}
	}
	err := t.pool.acquire(ctx, key, mem, t.cfg.QueueWait, t.opts.ProgressEvery, report)
	waited := t.now().Sub(start)
	if err == nil || !errors.Is(err, errQueueFull) {
		t.m.wait.Observe(waited.Seconds())
	}
	if err != nil {
		return nil, t.refuse(err, tk, waited)
	}
	granted := t.now()
	var once sync.Once
	return func() {
		once.Do(func() { t.pool.release(mem, t.now().Sub(granted)) })
	}, nil
}

func (t *Throttle) refuse(err error, tk Ticket, waited time.Duration) error {
	var reason string
	var pe *problem.Error
	switch {
	case errors.Is(err, errQueueFull):
		reason = "queue_full"
		pe = problem.New(problem.Unavailable, "server busy: queue full")
	case errors.Is(err, errQueueTimeout):
		reason = "queue_timeout"
		pe = problem.New(problem.Unavailable, "waited %ds for capacity; try again later", max(1, int(math.Round(waited.Seconds()))))
	default:
		// The client went away while it waited: nobody to tell.
		return problem.Wrap(problem.Unavailable, err, "request canceled")
	}
	pe.RetryAfter = t.retryAfter()
	t.m.rejections.WithLabelValues(reason).Inc()
	ps := t.pool.state()
	t.logger.Info("git operation refused", "reason", reason, "principal", principalName(tk.Principal),
		"repo", tk.ProjectKey+"/"+tk.Slug, "command", tk.Command,
		"transport", tk.Transport, "remote_addr", tk.RemoteAddr, "waited_ms", waited.Milliseconds(),
		"limit", ps.Limit, "in_use", ps.InUse, "queued", ps.Queued, "retry_after", pe.RetryAfter)
	return pe
}

// retryAfter guesses when a ticket is likely free for a new request: the
// queue ahead drained at the current limit, at the average hold time.
func (t *Throttle) retryAfter() int {
	ps := t.pool.state()
	hold := ps.HoldAvg
	if hold <= 0 {
		hold = 10 * time.Second
	}
	secs := hold.Seconds() * float64(ps.Queued+1) / float64(max(1, ps.Limit))
	return max(1, min(300, int(math.Ceil(secs))))
}

// RateLimit charges one git operation to p (remote identifies an anonymous
// caller) and returns a Throttled problem when over budget.
func (t *Throttle) RateLimit(ctx context.Context, p *auth.Principal, remote string) error {
	return t.charge(p, remote, "git")
}

func (t *Throttle) charge(p *auth.Principal, remote, what string) error {
	d := t.rl.take(p, remote)
	if d.allowed {
		return nil
	}
	t.m.limited.WithLabelValues(d.class).Inc()
	t.logger.Info("request rate limited", "principal", principalName(p), "class", d.class, "request", what,
		"remote_addr", remote, "bucket", d.limit, "retry_after", d.retryAfter)
	return rateLimitError(d)
}

// principalKey names the queue a request waits in.
func principalKey(p *auth.Principal, remote string) string {
	switch {
	case p.IsAnonymous():
		return "ip:" + hostOf(remote)
	case p.ResourceToken != nil:
		return fmt.Sprintf("rt:%d", p.ResourceToken.ID)
	case p.UserID != 0:
		return fmt.Sprintf("u:%d", p.UserID)
	default:
		return fmt.Sprintf("k:%d", p.AccessKeyID)
	}
}

func principalName(p *auth.Principal) string {
	if p == nil {
		return "anonymous"
	}
	return p.String()
}

// sizeEntry caches a repository's memory estimate.
type sizeEntry struct {
	est     int64
	expires time.Time
}

// sizeTTL: repositories grow slowly against this; a minute keeps the
// lookup (one query and a directory listing) off most operations.
const sizeTTL = time.Minute

// estimate is tk's memory estimate by Bitbucket's rule.
func (t *Throttle) estimate(ctx context.Context, tk Ticket) int64 {
	fallback := int64(memFallback * memFactor)
	if t.opts.RepoPath == nil {
		return fallback
	}
	key := strings.ToUpper(tk.ProjectKey) + "/" + tk.Slug
	now := t.now()
	t.mu.Lock()
	e, ok := t.sizes[key]
	t.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.est
	}
	r, err := t.opts.Store.RepoBySlug(ctx, tk.ProjectKey, tk.Slug)
	if err != nil {
		return fallback
	}
	size := packSize(t.opts.RepoPath(r.ID))
	est := int64(memFactor * float64(min(size, memRepoCap)))
	est = max(est, 16<<20) // git's own footprint, even for an empty repository
	t.mu.Lock()
	if len(t.sizes) >= 10_000 {
		clear(t.sizes)
	}
	t.sizes[key] = sizeEntry{est: est, expires: now.Add(sizeTTL)}
	t.mu.Unlock()
	return est
}

// packSize is the size of a repository's packs, which is nearly all of it.
func packSize(dir string) int64 {
	entries, err := os.ReadDir(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pack") {
			continue
		}
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}

// State is the live state the admin endpoint shows.
type State struct {
	Strategy         string  `json:"strategy"`
	Limit            int     `json:"limit"`
	Min              int     `json:"min,omitempty"`
	Max              int     `json:"max,omitempty"`
	InUse            int     `json:"inUse"`
	Queued           int     `json:"queued"`
	QueuedPrincipals int     `json:"queuedPrincipals"`
	QueueMax         int     `json:"queueMax"`
	QueueWaitSeconds float64 `json:"queueWaitSeconds"`
	AvgHoldSeconds   float64 `json:"avgHoldSeconds"`
	// Controller is the adaptive controller's last sample; nil for the
	// fixed strategy.
	Controller *ControllerState `json:"controller,omitempty"`
	RateLimit  RateLimitState   `json:"rateLimit"`
}

// ControllerState is the adaptive controller's view.
type ControllerState struct {
	CPUSource      string  `json:"cpuSource"`
	Cores          float64 `json:"cores"`
	TargetCPU      float64 `json:"targetCpu"`
	CPU            float64 `json:"cpu"`
	AvgInUse       float64 `json:"avgInUse"`
	Pressure       float64 `json:"pressure"`
	PressureSource string  `json:"pressureSource,omitempty"`
	MemAvailable   int64   `json:"memAvailableBytes"`
	MemCap         int     `json:"memCap"`
	CPULimit       int     `json:"cpuLimit"`
	// GitCgroup and GitCPUShare describe the git group, when there is
	// one: its directory and its CPU cap as a share of Cores (1: none).
	GitCgroup   string    `json:"gitCgroup,omitempty"`
	GitCPUShare float64   `json:"gitCpuShare,omitempty"`
	Reason      string    `json:"reason"`
	SampledAt   time.Time `json:"sampledAt"`
	Error       string    `json:"error,omitempty"`
}

// RateLimitState summarises the rate limiter.
type RateLimitState struct {
	Enabled    bool    `json:"enabled"`
	Bucket     int     `json:"bucket"`
	Refill     float64 `json:"refill"`
	Exemptions int     `json:"exemptions"`
	Stored     bool    `json:"stored"`
	Buckets    int     `json:"buckets"`
}

// State returns the live state.
func (t *Throttle) State() State {
	ps := t.pool.state()
	rl, _, stored := t.rl.current()
	st := State{
		Strategy:         t.cfg.Strategy,
		Limit:            ps.Limit,
		InUse:            ps.InUse,
		Queued:           ps.Queued,
		QueuedPrincipals: ps.Principals,
		QueueMax:         t.cfg.QueueMax,
		QueueWaitSeconds: t.cfg.QueueWait.Seconds(),
		AvgHoldSeconds:   round2(ps.HoldAvg.Seconds()),
		RateLimit: RateLimitState{Enabled: rl.Enabled, Bucket: rl.Bucket, Refill: rl.Refill,
			Exemptions: len(rl.Exemptions), Stored: stored, Buckets: t.rl.size()},
	}
	if t.ctrl != nil {
		t.mu.Lock()
		cs := t.ctrlState
		t.mu.Unlock()
		st.Min, st.Max = t.ctrl.law.min, t.ctrl.law.max
		c := &ControllerState{
			CPUSource: t.ctrl.src.CPU.Name(), Cores: t.ctrl.src.Cores, TargetCPU: t.ctrl.law.target,
			CPU: round2(cs.Util), AvgInUse: round2(cs.InUse), Pressure: round2(cs.Pressure),
			MemAvailable: cs.MemAvail, MemCap: cs.MemCap, CPULimit: cs.CPULimit, Reason: cs.Reason,
			SampledAt: cs.At, Error: cs.SourceError,
		}
		if g := t.opts.GitGroup; g != nil {
			c.GitCgroup, c.GitCPUShare = g.Dir(), round2(g.Share())
		}
		if p := t.ctrl.src.Pressure; p != nil {
			c.PressureSource = "machine"
			if p.Own() {
				c.PressureSource = "cgroup"
			}
		}
		st.Controller = c
	}
	return st
}
