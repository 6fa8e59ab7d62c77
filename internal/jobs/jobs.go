// Package jobs is Sluice's background work: housekeeping, pull request
// rescope, diff precompute, webhooks. It runs on River (v0.49), in the same
// database as the metadata: riversqlite on SQLite, riverpgxv5 on
// PostgreSQL, so a single node needs nothing more and a cluster shares one
// queue. River's own schema is migrated at New, under a PostgreSQL advisory
// lock so nodes starting together do it one after the other.
//
// Kinds without Go types. River wants one Go type per job kind, its Kind()
// naming the kind and its JSON being the job's args. Sluice's callers think
// in (kind string, payload) instead, and Handle takes a function of the raw
// payload. Rather than one River kind for everything (which would hide the
// real kind from River's tables, its uniqueness and its UI) or a Go type
// per kind (which every caller would have to declare), this package uses
// one args type, rawArgs, whose Kind() returns a kind held in the value and
// whose JSON is the payload itself, and registers one worker per kind with
// river.AddWorkerArgs, which takes the kind from a value rather than a type.
// River's rows therefore hold the true kind and the caller's JSON unchanged;
// ByArgs uniqueness hashes exactly the payload. Payloads must be JSON
// objects, as River requires of args.
//
// A job whose kind no handler knows (say, enqueued by a newer node during a
// rolling upgrade) is not dropped: River records an error on it and retries
// it with backoff until a node that knows the kind picks it up, or the
// attempts run out and it is discarded, visibly. Enqueue refuses a kind
// with no handler here, which catches typos at the call site.
//
// Metrics. sluice_jobs_queue_wait_seconds measures from a job's scheduled
// time (insert, delay or retry) to the moment a worker starts it, so a
// stalled or undersized worker pool shows up as wait even when every run is
// fast; sluice_jobs_run_seconds measures the handler alone, by outcome;
// sluice_jobs_enqueued_total counts inserted jobs (a unique duplicate that
// was skipped is not counted).
//
// Periodic jobs keep their schedule in the database, not in memory.
// River's own periodic jobs live in its elected leader's memory and start
// counting from zero at every leader change, so an hourly job in a cluster
// whose leadership moved more often than hourly never ran. Here the
// job_schedules table holds each periodic job's next run, by the
// database's clock; every node looks, and a node enqueues a run only by
// moving next_run_at forward from a due value in the transaction that
// inserts the job. Exactly one node enqueues each run, whichever node it
// is, and a restart, a leader change or a node's death forgets nothing.
// A job registered for the first time runs one interval after its first
// start; an interval shortened by a new release takes effect at once.
//
// Rescue. A job whose node died stays `running` in River's table until
// River's rescuer (its leader, RescueStuckJobsAfter) gives up on it, and a
// unique job (one housekeeping per repository) blocks its successors all
// that time. Each River client id is "<node id>_<incarnation>" (the
// incarnation is the process start in nanoseconds), which River records in
// attempted_by, so the node that ran a job is known. A node puts back in
// the queue, at once, every running job attempted by an earlier
// incarnation of itself when it starts (before it works anything), and
// every RescueInterval it does the same for running jobs of nodes that
// Config.LiveNodes (the cluster registry) no longer lists as live, once the
// attempt is older than RescueGrace (a node starts working jobs a moment
// before it registers). With Config.SoleWorker (SQLite, whose server lock
// admits one server) every running job not attempted by this process is
// an orphan. A rescued job becomes available again with an error naming
// the reason, or is discarded if it has no attempts left; the update is
// conditional on the job still being in that attempt, so two nodes
// rescuing at once never put back a job a third has since started.
// sluice_jobs_rescued_total counts them. River's rescuer remains the
// backstop for a handler that ignores its context: it retries a job
// running longer than the largest kind timeout plus rescueMargin.
package jobs

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/sluice-scm/sluice/internal/store"
)

// migrateLockKey is the pg_advisory_xact_lock key held while River's
// migrations run: the first 8 bytes of sha256("sluice/jobs/migrate"),
// fixed forever so nodes of different versions agree on it.
const migrateLockKey int64 = 0x2b3c3e3c5bd22fb9

// DefaultJobTimeout bounds one run of a handler. River's own default (one
// minute) is too short for housekeeping a large repository; an hour is.
const DefaultJobTimeout = time.Hour

// Rescue defaults. RescueInterval is how often a node looks for jobs of
// dead nodes: one query over the few running rows, cheap enough every ten
// seconds, and short beside the half minute a node takes to count as gone.
// RescueGrace covers the moment between a node starting its workers and
// registering (and its clock's skew against the attempt time).
const (
	DefaultRescueInterval = 10 * time.Second
	DefaultRescueGrace    = 30 * time.Second
)

// rescueMargin is how long past its timeout a job may still be running
// before River's rescuer retries it elsewhere: a cancelled handler's git
// processes are killed within seconds, so five minutes means the handler
// ignored its context, not that it is finishing.
const rescueMargin = 5 * time.Minute

// Config configures a Queue.
type Config struct {
	// Workers is how many jobs this node runs at once (default 4).
	Workers int
	// NodeID names this node in River's client id (leader election).
	NodeID string
	// PollInterval is how often a node looks for new jobs when it is not
	// notified of them (always on SQLite). 0 means River's default (1s);
	// tests lower it.
	PollInterval time.Duration
	// RetryBackoff, when set, replaces River's default backoff (attempt⁴
	// seconds) between the attempts of a failed job.
	RetryBackoff func(attempt int) time.Duration
	// JobTimeout bounds one run of a kind registered without a Timeout
	// (0: DefaultJobTimeout).
	JobTimeout time.Duration
	// LiveNodes lists the ids of the nodes currently live (the cluster
	// registry); running jobs of any other node are rescued. nil: only
	// this node's earlier incarnations' jobs are.
	LiveNodes func(ctx context.Context) (map[string]bool, error)
	// SoleWorker says no other process works this database's jobs (the
	// SQLite server lock guarantees it): at Start every running job is an
	// orphan, whatever node id it was attempted under.
	SoleWorker bool
	// RescueInterval and RescueGrace: see the package doc (0: the
	// Default* constants; tests shorten them).
	RescueInterval time.Duration
	RescueGrace    time.Duration
}

// Handler does the work of one job. An error makes River retry the job
// with backoff; the payload is what Enqueue was given, as JSON.
type Handler func(ctx context.Context, payload json.RawMessage) error

// Queue is the node's job queue: it enqueues jobs and, once started, works
// them.
type Queue struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics
	db      *store.DB // River's tables live here; Stats reads them
	build   func(*river.Config) (*built, error)
	sql     scheduleSQL
	// incarnation tells this process's River client from an earlier one
	// of the same node (see the package doc).
	incarnation string

	mu       sync.Mutex
	workers  *river.Workers
	handlers map[string]bool
	timeouts map[string]time.Duration // kinds registered with Timeout
	periodic []periodicJob
	setupErr error  // first error from Handle or Periodic, reported by Start
	b        *built // built at the first Start or Enqueue; frozen after
	client   riverClient
	started  bool
	stopBg   context.CancelFunc // ends the schedule and rescue loops
	bg       sync.WaitGroup
}

// built is the River client and what this package needs beside it that
// depends on the driver's transaction type.
type built struct {
	client riverClient
	exec   riverdriver.Executor
	// claimInsert runs claim (an UPDATE of job_schedules) and, only when
	// it changed a row, inserts the job, in one transaction.
	claimInsert func(ctx context.Context, claim string, claimArgs []any, args river.JobArgs, opts *river.InsertOpts) (bool, *rivertype.JobInsertResult, error)
}

// riverClient is what Queue uses of *river.Client[TTx], whatever TTx the
// driver has.
type riverClient interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	StopAndCancel(ctx context.Context) error
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobList(ctx context.Context, params *river.JobListParams) (*river.JobListResult, error)
}

type metrics struct {
	wait     *prometheus.HistogramVec
	run      *prometheus.HistogramVec
	enqueued *prometheus.CounterVec
	rescued  *prometheus.CounterVec
}

// New migrates River's schema in db and returns a Queue using it. Register
// handlers and periodic jobs, then Start.
func New(db *store.DB, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Queue, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = DefaultJobTimeout
	}
	if cfg.RescueInterval <= 0 {
		cfg.RescueInterval = DefaultRescueInterval
	}
	if cfg.RescueGrace <= 0 {
		cfg.RescueGrace = DefaultRescueGrace
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "jobs")
	q := &Queue{
		cfg:         cfg,
		logger:      logger,
		db:          db,
		incarnation: strconv.FormatInt(time.Now().UnixNano(), 10),
		workers:     river.NewWorkers(),
		handlers:    map[string]bool{},
		timeouts:    map[string]time.Duration{},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch db.Dialect() {
	case "postgres":
		driver := riverpgxv5.New(db.Pgx())
		if err := migratePostgres(ctx, driver, db, logger); err != nil {
			return nil, err
		}
		q.sql = postgresSchedule
		q.build = func(rc *river.Config) (*built, error) {
			c, err := river.NewClient(driver, rc)
			if err != nil {
				return nil, err
			}
			return &built{client: c, exec: driver.GetExecutor(),
				claimInsert: func(ctx context.Context, claim string, cargs []any, args river.JobArgs, opts *river.InsertOpts) (bool, *rivertype.JobInsertResult, error) {
					tx, err := db.Pgx().Begin(ctx)
					if err != nil {
						return false, nil, err
					}
					defer tx.Rollback(ctx)
					tag, err := tx.Exec(ctx, claim, cargs...)
					if err != nil || tag.RowsAffected() == 0 {
						return false, nil, err
					}
					res, err := c.InsertTx(ctx, tx, args, opts)
					if err != nil {
						return false, nil, err
					}
					return true, res, tx.Commit(ctx)
				}}, nil
		}
	case "sqlite":
		driver := riversqlite.New(db.SQL())
		if err := migrateSQLite(ctx, driver, db.SQL(), logger); err != nil {
			return nil, err
		}
		// SQLite has no LISTEN/NOTIFY: River's SQLite listener emulates it
		// by polling a table every 50 ms, forever, twenty queries a second
		// on an idle node. One node on one database file gains nothing
		// from it that FetchPollInterval does not give.
		q.sql = sqliteSchedule
		q.build = func(rc *river.Config) (*built, error) {
			rc.PollOnly = true
			c, err := river.NewClient(driver, rc)
			if err != nil {
				return nil, err
			}
			return &built{client: c, exec: driver.GetExecutor(),
				claimInsert: func(ctx context.Context, claim string, cargs []any, args river.JobArgs, opts *river.InsertOpts) (bool, *rivertype.JobInsertResult, error) {
					tx, err := db.SQL().BeginTx(ctx, nil)
					if err != nil {
						return false, nil, err
					}
					defer tx.Rollback()
					r, err := tx.ExecContext(ctx, claim, cargs...)
					if err != nil {
						return false, nil, err
					}
					if n, err := r.RowsAffected(); err != nil || n == 0 {
						return false, nil, err
					}
					res, err := c.InsertTx(ctx, tx, args, opts)
					if err != nil {
						return false, nil, err
					}
					return true, res, tx.Commit()
				}}, nil
		}
	default:
		return nil, fmt.Errorf("jobs: unsupported database %q", db.Dialect())
	}

	q.metrics = &metrics{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_jobs_queue_wait_seconds",
			Help: "Time from a job's scheduled time to the start of its run.",
			// 10ms (a notified fetch) to ~45min of backlog (0.01·4⁹ s).
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"kind"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_jobs_run_seconds",
			Help:    "Time a job handler ran, by outcome (ok, error, panic).",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"kind", "outcome"}),
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_jobs_enqueued_total",
			Help: "Jobs inserted into the queue (unique duplicates excluded).",
		}, []string{"kind"}),
		rescued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_jobs_rescued_total",
			Help: "Running jobs of dead or restarted nodes put back in the queue (requeued) or, out of attempts, discarded.",
		}, []string{"kind", "outcome"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{q.metrics.wait, q.metrics.run, q.metrics.enqueued, q.metrics.rescued} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register jobs metrics: %w", err)
			}
		}
	}
	return q, nil
}

func migratePostgres(ctx context.Context, driver *riverpgxv5.Driver, db *store.DB, logger *slog.Logger) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	// River's migrations cannot share one transaction (one adds an enum
	// value that the next uses), so the lock is a session lock held on a
	// connection of its own while the migrator works on others.
	conn, err := db.Pgx().Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("migrate river: lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must happen even if ctx ended, or
		// the pooled connection would keep the lock.
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", migrateLockKey); err != nil {
			conn.Conn().Close(uctx)
		}
	}()
	return logMigrations(m.Migrate(ctx, rivermigrate.DirectionUp, nil))(logger)
}

func migrateSQLite(ctx context.Context, driver *riversqlite.Driver, db *sql.DB, logger *slog.Logger) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	// Each migration runs in its own transaction (River's recommendation:
	// some cannot share one); a crash between two leaves a consistent
	// earlier version that the next start continues from.
	return logMigrations(m.Migrate(ctx, rivermigrate.DirectionUp, nil))(logger)
}

func logMigrations(res *rivermigrate.MigrateResult, err error) func(*slog.Logger) error {
	return func(logger *slog.Logger) error {
		if err != nil {
			return fmt.Errorf("migrate river: %w", err)
		}
		for _, v := range res.Versions {
			logger.Info("river schema migrated", "version", v.Version, "duration", v.Duration)
		}
		return nil
	}
}

// kindPattern is River's own rule for kinds, checked here so a bad kind
// fails at Handle rather than at Start.
var kindPattern = regexp.MustCompile(`\A[\w][\w\-\[\]<>\/.·:+]+\z`)

// HandleOption changes how a kind's jobs are run.
type HandleOption func(*worker)

// Timeout bounds one run of the kind's jobs instead of Config.JobTimeout:
// the handler's context ends after d. Give a kind its real maximum: River's
// rescuer retries a job still running rescueMargin past the largest
// timeout of any kind, so one long kind keeps every other's stuck jobs
// waiting for it.
func Timeout(d time.Duration) HandleOption {
	return func(w *worker) { w.timeout = d }
}

// Handle registers fn for jobs of kind. Call it before Start or the first
// Enqueue; a bad or duplicate kind is reported by Start.
func (q *Queue) Handle(kind string, fn Handler, opts ...HandleOption) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := &worker{q: q, kind: kind, fn: fn}
	for _, o := range opts {
		o(w)
	}
	switch {
	case q.client != nil:
		q.fail(fmt.Errorf("jobs: handler for %q registered after the queue was built", kind))
	case !kindPattern.MatchString(kind):
		q.fail(fmt.Errorf("jobs: invalid kind %q", kind))
	case q.handlers[kind]:
		q.fail(fmt.Errorf("jobs: two handlers for %q", kind))
	case w.timeout < 0:
		q.fail(fmt.Errorf("jobs: %q: timeout must not be negative", kind))
	default:
		q.handlers[kind] = true
		if w.timeout > 0 {
			q.timeouts[kind] = w.timeout
		}
		river.AddWorkerArgs(q.workers, rawArgs{kind: kind}, w)
	}
}

// Periodic enqueues a job of kind with payload every interval, once per
// cluster (see the package doc: the schedule is in the database). The job
// is unique while pending, so a stalled queue does not pile them up. Call
// it before Start; errors are reported by Start.
func (q *Queue) Periodic(kind string, every time.Duration, payload any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	raw, err := encodePayload(payload)
	if err != nil {
		q.fail(fmt.Errorf("jobs: periodic %q: %w", kind, err))
		return
	}
	if q.client != nil {
		q.fail(fmt.Errorf("jobs: periodic %q registered after the queue was built", kind))
		return
	}
	if every <= 0 {
		q.fail(fmt.Errorf("jobs: periodic %q: interval must be positive", kind))
		return
	}
	for _, p := range q.periodic {
		if p.kind == kind {
			q.fail(fmt.Errorf("jobs: periodic %q registered twice", kind))
			return
		}
	}
	q.periodic = append(q.periodic, periodicJob{kind: kind, every: every, payload: raw})
}

func (q *Queue) fail(err error) {
	if q.setupErr == nil {
		q.setupErr = err
	}
}

// clientLocked builds the River client on first use. Handlers and periodic
// jobs are frozen from then on.
func (q *Queue) clientLocked() (riverClient, error) {
	if q.setupErr != nil {
		return nil, q.setupErr
	}
	if q.client != nil {
		return q.client, nil
	}
	for _, p := range q.periodic {
		if !q.handlers[p.kind] {
			return nil, fmt.Errorf("jobs: periodic %q has no handler", p.kind)
		}
	}
	longest := q.cfg.JobTimeout
	for _, d := range q.timeouts {
		longest = max(longest, d)
	}
	rc := &river.Config{
		ID:                   q.clientID(),
		Logger:               q.logger,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: q.cfg.Workers}},
		Workers:              q.workers,
		FetchPollInterval:    q.cfg.PollInterval,
		JobTimeout:           q.cfg.JobTimeout,
		RescueStuckJobsAfter: longest + rescueMargin,
	}
	if q.cfg.PollInterval > 0 && q.cfg.PollInterval < river.FetchCooldownDefault {
		rc.FetchCooldown = q.cfg.PollInterval
	}
	if q.cfg.RetryBackoff != nil {
		rc.RetryPolicy = backoffPolicy(q.cfg.RetryBackoff)
	}
	b, err := q.build(rc)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	q.b, q.client = b, b.client
	return b.client, nil
}

// clientID is this process's River client id, "<node id>_<incarnation>";
// parseClientID reads it back from attempted_by.
func (q *Queue) clientID() string {
	return cmp.Or(q.cfg.NodeID, "sluice") + "_" + q.incarnation
}

// parseClientID splits a River client id at its last underscore: node ids
// may contain one, incarnations (decimal) never do. Ids of releases before
// the rescue had the same shape.
func parseClientID(id string) (node, incarnation string) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 {
		return id, ""
	}
	return id[:i], id[i+1:]
}

// Start starts working jobs. It fails if a Handle or Periodic call was
// invalid. Before working anything it puts back in the queue the jobs an
// earlier incarnation of this node left running (see the package doc).
func (q *Queue) Start(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, err := q.clientLocked()
	if err != nil {
		return err
	}
	if q.started {
		return errors.New("jobs: already started")
	}
	// A failed rescue is not fatal: the rescue loop tries again, and
	// River's rescuer is the backstop.
	if _, err := q.rescue(ctx, true); err != nil {
		q.logger.Warn("rescue jobs of an earlier incarnation", "err", err)
	}
	if err := q.ensureSchedules(ctx); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("jobs: start: %w", err)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	q.stopBg = cancel
	if len(q.periodic) > 0 {
		q.bg.Go(func() { q.scheduleLoop(bctx) })
	}
	q.bg.Go(func() { q.rescueLoop(bctx) })
	q.started = true
	return nil
}

// Stop stops fetching jobs and waits for the running ones to finish. If ctx
// ends first, the running jobs' contexts are cancelled and Stop waits a
// little longer for them to return, then gives up with ctx's error.
func (q *Queue) Stop(ctx context.Context) error {
	q.mu.Lock()
	c, started, stopBg := q.client, q.started, q.stopBg
	q.started, q.stopBg = false, nil
	q.mu.Unlock()
	if !started {
		return nil
	}
	stopBg()
	q.bg.Wait()
	err := c.Stop(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	q.logger.Warn("jobs still running at shutdown; cancelling them")
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := c.StopAndCancel(cctx); cerr != nil {
		q.logger.Error("stop jobs", "err", cerr)
	}
	return fmt.Errorf("jobs: stop: %w", err)
}

// EnqueueOption changes how a job is enqueued.
type EnqueueOption func(*river.InsertOpts)

// Unique makes the job unique by kind and payload among jobs not yet
// finished (pending, scheduled, available, running, retryable): enqueueing
// a second one is a no-op. "One pending housekeeping per repository" is
// Enqueue(ctx, "housekeeping", repoPayload, Unique()). Running is in the
// set because River requires it; work that must see a change made during a
// run should not be unique.
func Unique() EnqueueOption {
	return func(o *river.InsertOpts) {
		o.UniqueOpts = river.UniqueOpts{
			ByArgs: true,
			ByState: []rivertype.JobState{
				rivertype.JobStateAvailable,
				rivertype.JobStatePending,
				rivertype.JobStateRunning,
				rivertype.JobStateRetryable,
				rivertype.JobStateScheduled,
			},
		}
	}
}

// Delay schedules the job d from now instead of at once.
func Delay(d time.Duration) EnqueueOption {
	return func(o *river.InsertOpts) { o.ScheduledAt = time.Now().Add(d) }
}

// MaxAttempts bounds how often a failing job is tried before it is
// discarded (River's default is 25).
func MaxAttempts(n int) EnqueueOption {
	return func(o *river.InsertOpts) { o.MaxAttempts = n }
}

// Enqueue adds a job of kind with payload (marshalled to a JSON object).
// The kind must have a handler registered on this Queue.
func (q *Queue) Enqueue(ctx context.Context, kind string, payload any, opts ...EnqueueOption) error {
	_, err := q.enqueue(ctx, kind, payload, opts...)
	return err
}

func (q *Queue) enqueue(ctx context.Context, kind string, payload any, opts ...EnqueueOption) (*rivertype.JobInsertResult, error) {
	raw, err := encodePayload(payload)
	if err != nil {
		return nil, fmt.Errorf("enqueue %q: %w", kind, err)
	}
	q.mu.Lock()
	if !q.handlers[kind] {
		q.mu.Unlock()
		return nil, fmt.Errorf("enqueue %q: no handler for this kind", kind)
	}
	c, err := q.clientLocked()
	q.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ins := &river.InsertOpts{}
	for _, o := range opts {
		o(ins)
	}
	res, err := c.Insert(ctx, rawArgs{kind: kind, payload: raw}, ins)
	if err != nil {
		return nil, fmt.Errorf("enqueue %q: %w", kind, err)
	}
	if !res.UniqueSkippedAsDuplicate {
		q.metrics.enqueued.WithLabelValues(kind).Inc()
	}
	return res, nil
}

// encodePayload marshals payload, which must come out as a JSON object
// (River's uniqueness hashes object keys); nil is {}.
func encodePayload(payload any) (json.RawMessage, error) {
	if payload == nil {
		return json.RawMessage("{}"), nil
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("payload must encode to a JSON object")
	}
	return raw, nil
}

// rawArgs is the one River args type (see the package doc): its kind is a
// value and its JSON is the payload, verbatim.
type rawArgs struct {
	kind    string
	payload json.RawMessage
}

func (a rawArgs) Kind() string { return a.kind }

func (a rawArgs) MarshalJSON() ([]byte, error) {
	if len(a.payload) == 0 {
		return []byte("{}"), nil
	}
	return a.payload, nil
}

func (a *rawArgs) UnmarshalJSON(b []byte) error {
	a.payload = append(json.RawMessage(nil), b...)
	return nil
}

// worker runs one kind's handler and measures it.
type worker struct {
	river.WorkerDefaults[rawArgs]
	q       *Queue
	kind    string
	fn      Handler
	timeout time.Duration // 0: Config.JobTimeout
}

// Timeout is River's per-worker timeout; 0 leaves the client's.
func (w *worker) Timeout(*river.Job[rawArgs]) time.Duration { return w.timeout }

func (w *worker) Work(ctx context.Context, job *river.Job[rawArgs]) error {
	m := w.q.metrics
	start := time.Now()
	m.wait.WithLabelValues(w.kind).Observe(max(0, start.Sub(job.ScheduledAt).Seconds()))
	outcome := "panic" // unless fn returns
	defer func() {
		m.run.WithLabelValues(w.kind, outcome).Observe(time.Since(start).Seconds())
	}()
	err := w.fn(ctx, job.Args.payload)
	if err != nil {
		outcome = "error"
		w.q.logger.Warn("job failed", "kind", w.kind, "job_id", job.ID,
			"attempt", job.Attempt, "max_attempts", job.MaxAttempts, "err", err)
		return err
	}
	outcome = "ok"
	return nil
}

// backoffPolicy adapts Config.RetryBackoff to River.
type backoffPolicy func(attempt int) time.Duration

func (p backoffPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(p(job.Attempt))
}
