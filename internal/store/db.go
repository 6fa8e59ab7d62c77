package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/sluice-scm/sluice/internal/problem"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// migrateLockKey is the pg_advisory_lock key held while migrations run, so
// that nodes starting together migrate one after the other. It is the
// first 8 bytes of sha256("sluice/store/migrate") read as a big-endian
// int64, fixed forever: nodes of different versions must agree on it.
const migrateLockKey int64 = -0x323b49dd9618f2c8

// busyTimeout bounds how long an SQLite writer waits for another one (the
// admin CLI while a server runs, or concurrent pushes) before giving up
// with Unavailable. Ten seconds outlasts any single write transaction here.
const busyTimeout = 10 * time.Second

// pgConnectTimeout bounds opening one PostgreSQL connection unless the URL
// sets connect_timeout: long enough for a cross-zone TLS handshake, short
// enough that a git client sees a 503 instead of waiting on a dead host.
const pgConnectTimeout = 5 * time.Second

// DefaultAcquireTimeout bounds how long a query waits for a PostgreSQL
// connection (config database.acquire_timeout). Without a bound a request
// waited as long as its own context allowed: git requests, whose context
// lasts git.timeout, waited about 600 s on a pool held by slow queries. A
// query on a healthy pool gets a connection in microseconds; waiting
// longer than a few seconds only stacks requests up behind a database
// that cannot keep up, so they fail with a 503 instead.
const DefaultAcquireTimeout = 5 * time.Second

// DB is the Store implementation for both dialects.
type DB struct {
	db      *sql.DB
	pool    *pgxpool.Pool // nil on SQLite
	dialect string
	logger  *slog.Logger
	stmts   *stmtCache // nil on PostgreSQL
	// suspectAt is when connections were last found possibly dead (unix
	// ns; PostgreSQL only): a pooled connection last used before it is
	// pinged before its next use.
	suspectAt atomic.Int64
}

var _ Store = (*DB)(nil)

// Option tunes Open.
type Option func(*options)

type options struct {
	maxOpenConns   int
	acquireTimeout time.Duration
}

// WithMaxOpenConns bounds the connection pool (config database.max_open_conns).
func WithMaxOpenConns(n int) Option {
	return func(o *options) { o.maxOpenConns = n }
}

// WithAcquireTimeout bounds how long a query waits for a pooled PostgreSQL
// connection (config database.acquire_timeout); past it the query fails
// with Unavailable. Zero or less keeps DefaultAcquireTimeout. SQLite needs
// none: its wait is bounded by the busy timeout.
func WithAcquireTimeout(d time.Duration) Option {
	return func(o *options) { o.acquireTimeout = d }
}

// Open connects to url (sqlite:///abs/path/sluice.db or postgres://…) and
// migrates the schema to the newest version this binary knows.
func Open(ctx context.Context, rawURL string, logger *slog.Logger, opts ...Option) (*DB, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	o := options{maxOpenConns: 20}
	for _, f := range opts {
		f(&o)
	}
	if o.maxOpenConns < 1 {
		o.maxOpenConns = 1
	}
	if o.acquireTimeout <= 0 {
		o.acquireTimeout = DefaultAcquireTimeout
	}
	logger = logger.With("component", "store")
	var (
		d   *DB
		err error
	)
	switch {
	case strings.HasPrefix(rawURL, "sqlite://"):
		d, err = openSQLite(strings.TrimPrefix(rawURL, "sqlite://"), o)
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		d, err = openPostgres(ctx, rawURL, o)
	default:
		return nil, problem.New(problem.Invalid, "database url must start with sqlite:// or postgres://")
	}
	if err != nil {
		return nil, err
	}
	d.logger = logger
	if err := d.Ping(ctx); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func openSQLite(path string, o options) (*DB, error) {
	if path == "" || !filepath.IsAbs(path) {
		return nil, problem.New(problem.Invalid, "sqlite database path %q must be absolute", path)
	}
	// The driver splits the DSN at the first '?'. A plain path (not a
	// file: URI) is otherwise taken literally, '%' and '#' included.
	if strings.Contains(path, "?") {
		return nil, problem.New(problem.Invalid, "sqlite database path %q must not contain '?'", path)
	}
	// The file holds password and token hashes: create it private. SQLite
	// gives its -wal and -shm files the same mode.
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create database directory: %w", err)
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, problem.Wrap(problem.Unavailable, err, "database unavailable")
	}
	// Pragmas go in the DSN so that every pooled connection gets them, not
	// only the first. synchronous=FULL because an acknowledged push must
	// survive a power loss; NORMAL in WAL mode may lose the last commits.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	// Write transactions take the write lock at BEGIN: a deferred
	// transaction that reads first and writes later fails with SQLITE_BUSY
	// without waiting when another writer got in between.
	q.Set("_txlock", "immediate")
	q.Set("_time_format", "sqlite")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	// SQLite has one writer at a time anyway; more connections only help
	// readers, which WAL lets run beside the writer.
	n := min(o.maxOpenConns, max(4, 2*runtime.NumCPU()))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return &DB{db: db, dialect: "sqlite", stmts: &stmtCache{}}, nil
}

func openPostgres(ctx context.Context, rawURL string, o options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, problem.Wrap(problem.Invalid, err, "invalid postgres url")
	}
	// A server that does not answer (network partition, host down without
	// a reset) must fail requests fast with Unavailable rather than hang
	// them for the OS's TCP timeout; connect_timeout in the URL wins.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	// Migrations hold the advisory lock on one connection while goose
	// works on another, so the pool needs at least two (three for slack).
	o.maxOpenConns = max(o.maxOpenConns, 3)
	cfg.MaxConns = int32(o.maxOpenConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, problem.Wrap(problem.Unavailable, err, "database unavailable")
	}
	d := &DB{pool: pool, dialect: "postgres"}
	// database/sql keeps no idle connection of its own over a pgx pool
	// (stdlib.OpenDBFromPool does the same): every query takes one from
	// pgxpool, whose MaxConns is the only bound, so every wait for a
	// connection happens in Connect, where acquireConnector bounds it.
	// database/sql's own wait queue (SetMaxOpenConns) has no bound but
	// the caller's context, so it stays unlimited.
	d.db = sql.OpenDB(acquireConnector{
		Connector: stdlib.GetPoolConnector(pool, stdlib.OptionShouldPing(d.shouldPing)),
		timeout:   o.acquireTimeout,
	})
	d.db.SetMaxIdleConns(0)
	return d, nil
}

// acquireConnector bounds the wait for a pooled connection: a request
// that cannot get one within timeout fails with Unavailable (a 503, exit
// status 75 over SSH) rather than waiting on a database that is saturated
// or no longer answering.
type acquireConnector struct {
	driver.Connector
	timeout time.Duration
}

func (c acquireConnector) Connect(ctx context.Context) (driver.Conn, error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := c.Connector.Connect(actx)
	if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		e := problem.Wrap(problem.Unavailable, fmt.Errorf("acquire connection: %w", err),
			fmt.Sprintf("database unavailable: no connection free within %s (database.acquire_timeout)", c.timeout))
		e.RetryAfter = max(1, int(c.timeout/time.Second))
		return nil, e
	}
	return conn, err
}

// shouldPing decides whether a pooled connection is pinged before reuse:
// after a second idle (pgx's default), or when it was last used before
// ConnectionsSuspect. A connection that fails the ping is replaced, and
// database/sql retries the query on another, so the request never sees it.
func (d *DB) shouldPing(_ context.Context, p stdlib.ShouldPingParams) bool {
	return p.IdleDuration > time.Second || time.Duration(time.Now().UnixNano()-d.suspectAt.Load()) < p.IdleDuration
}

// ConnectionsSuspect says that the pooled connections may be dead: the
// server restarted, or terminated them. Idle ones are closed and each one
// in use is pinged before its next use. Without it, every connection the
// server terminated fails one request with "database unavailable" after
// the server is back. The event bus calls it when its own connection
// drops, and fail when a query meets connection trouble. A no-op on
// SQLite.
func (d *DB) ConnectionsSuspect() {
	if d.pool == nil {
		return
	}
	d.suspectAt.Store(time.Now().UnixNano())
	d.pool.Reset()
}

// SQL is the underlying database/sql handle (River's SQLite driver uses it).
func (d *DB) SQL() *sql.DB { return d.db }

// Pgx is the pgx pool on PostgreSQL (River's pgx driver uses it), nil on
// SQLite.
func (d *DB) Pgx() *pgxpool.Pool { return d.pool }

// Dialect is "sqlite" or "postgres".
func (d *DB) Dialect() string { return d.dialect }

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.db.PingContext(ctx); err != nil {
		return d.fail(err, "ping")
	}
	return nil
}

// Close releases the connections.
func (d *DB) Close() error {
	d.stmts.close()
	err := d.db.Close()
	if d.pool != nil {
		d.pool.Close()
	}
	return err
}

// migrate runs the goose migrations of the dialect. On PostgreSQL a
// session-level advisory lock serialises nodes starting at the same time:
// the second waits, then finds nothing left to do.
func (d *DB) migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrations, "migrations/"+d.dialect)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	dialect := goose.DialectSQLite3
	if d.dialect == "postgres" {
		dialect = goose.DialectPostgres
	}
	p, err := goose.NewProvider(dialect, d.db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if d.dialect == "postgres" {
		conn, err := d.db.Conn(ctx)
		if err != nil {
			return d.fail(err, "migration lock")
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
			return d.fail(err, "migration lock")
		}
		defer func() {
			// A fresh context: the lock must go even if ctx is done. Closing
			// the connection would release it too, but it returns to the pool.
			uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := conn.ExecContext(uctx, "SELECT pg_advisory_unlock($1)", migrateLockKey); err != nil {
				d.logger.Warn("release migration lock", "err", err)
				// ErrBadConn makes database/sql drop the session (and
				// with it the lock) instead of pooling it.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	res, err := p.Up(ctx)
	if err != nil {
		return d.fail(err, "migrate")
	}
	for _, r := range res {
		d.logger.Info("migrated", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// q adapts a query written with ? placeholders to the dialect: PostgreSQL
// wants $1, $2, …. Queries here never hold a literal '?' outside quotes;
// quoted text is copied as is anyway.
func (d *DB) q(query string) string {
	if d.dialect != "postgres" {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	inQuote := false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			inQuote = !inQuote
			b.WriteByte(c)
		case c == '?' && !inQuote:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// stmtCache keeps SQLite statements prepared, by query text, for the life
// of the DB. Parsing and planning a statement cost more than running the
// small primary-key reads every request makes (authentication, repository
// lookup, permission check: about an eighth of a cached REST read's CPU
// before this cache), and the query texts are the package's constants, so
// the set is small and fixed. database/sql prepares a cached statement
// lazily on each pooled connection it runs on and resets it after each
// use (Rows.Close), so no read transaction outlives its query.
//
// PostgreSQL needs none of this: pgx already keeps a per-connection cache
// of prepared statements for every query it runs.
type stmtCache struct {
	m sync.Map // query text → *sql.Stmt
	n atomic.Int32
}

// maxStmts bounds the cache. The package has about 150 distinct query
// texts; queries whose text varies with their arguments (IN lists) go
// through queryDynamic and execDynamic instead, so the bound is a guard
// against a mistake, not a working limit. Past it queries run unprepared,
// as they would without the cache.
const maxStmts = 512

// get returns the prepared statement of query, preparing it on first use,
// or nil when it cannot be cached: the caller then runs the query
// unprepared, which also reports a bad query's error where it always was.
func (c *stmtCache) get(ctx context.Context, db *sql.DB, query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	if s, ok := c.m.Load(query); ok {
		return s.(*sql.Stmt)
	}
	if c.n.Load() >= maxStmts {
		return nil
	}
	s, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	if prev, loaded := c.m.LoadOrStore(query, s); loaded {
		// Another request prepared it first.
		s.Close()
		return prev.(*sql.Stmt)
	}
	c.n.Add(1)
	return s
}

func (c *stmtCache) close() {
	if c == nil {
		return
	}
	c.m.Range(func(k, v any) bool {
		v.(*sql.Stmt).Close()
		c.m.Delete(k)
		return true
	})
}

func (d *DB) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query = d.q(query)
	if s := d.stmts.get(ctx, d.db, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return d.db.ExecContext(ctx, query, args...)
}

func (d *DB) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query = d.q(query)
	if s := d.stmts.get(ctx, d.db, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return d.db.QueryContext(ctx, query, args...)
}

func (d *DB) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	query = d.q(query)
	if s := d.stmts.get(ctx, d.db, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return d.db.QueryRowContext(ctx, query, args...)
}

// execDynamic and queryDynamic run a query whose text is built from its
// arguments (an IN list as long as the input), unprepared: caching each
// length would fill the statement cache with texts used once.
func (d *DB) execDynamic(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.db.ExecContext(ctx, d.q(query), args...)
}

func (d *DB) queryDynamic(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return d.db.QueryContext(ctx, d.q(query), args...)
}

// tx runs fn in a transaction, committing when it returns nil.
func (d *DB) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
