package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/riverqueue/river"
)

// The durable periodic schedule (see the package doc): job_schedules,
// migrated by internal/store, one row per periodic kind.

// scheduleRecheck bounds how long a node sleeps between looks at the
// schedule. A node sleeps until the earliest next run it read; a run that
// another node's release moved earlier (a shorter interval) is noticed
// within this. scheduleRetry is the pause after the database failed.
const (
	scheduleRecheck = time.Minute
	scheduleRetry   = 5 * time.Second
	// scheduleFloor keeps a node whose read found a run due but lost the
	// claim to another (whose transaction had not committed yet) from
	// spinning.
	scheduleFloor = 50 * time.Millisecond
)

type periodicJob struct {
	kind    string
	every   time.Duration
	payload json.RawMessage
}

// scheduleSQL is the dialect's statements on job_schedules. Each builds
// its arguments, since the placeholders differ. Times come from the
// database's clock only.
type scheduleSQL struct {
	// ensure adds a periodic job's row, due one interval from now, or
	// brings an existing row's next run forward to at most one interval
	// from now (the interval was shortened).
	ensure func(name string, every time.Duration) (string, []any)
	// claim moves a due row's next run one interval past now; it changes
	// no row when the run is not due (or another node just claimed it).
	claim func(name string, every time.Duration) (string, []any)
	// dueIn lists every row's name and seconds until its next run.
	dueIn string
}

var postgresSchedule = scheduleSQL{
	ensure: func(name string, every time.Duration) (string, []any) {
		return `INSERT INTO job_schedules (name, next_run_at)
			VALUES ($1, now() + $2 * interval '1 millisecond')
			ON CONFLICT (name) DO UPDATE SET next_run_at = excluded.next_run_at
			WHERE job_schedules.next_run_at > excluded.next_run_at`, []any{name, every.Milliseconds()}
	},
	claim: func(name string, every time.Duration) (string, []any) {
		return `UPDATE job_schedules
			SET last_run_at = now(), next_run_at = now() + $2 * interval '1 millisecond'
			WHERE name = $1 AND next_run_at <= now()`, []any{name, every.Milliseconds()}
	},
	dueIn: `SELECT name, EXTRACT(EPOCH FROM next_run_at - now())::float8 FROM job_schedules`,
}

// sqliteNow is the current time as SQLite stores it here (as in the nodes
// table): millisecond text, which compares in time order.
const sqliteNow = `strftime('%Y-%m-%d %H:%M:%f', 'now')`

var sqliteSchedule = scheduleSQL{
	ensure: func(name string, every time.Duration) (string, []any) {
		return `INSERT INTO job_schedules (name, next_run_at)
			VALUES (?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?))
			ON CONFLICT (name) DO UPDATE SET next_run_at = excluded.next_run_at
			WHERE job_schedules.next_run_at > excluded.next_run_at`, []any{name, sqliteModifier(every)}
	},
	claim: func(name string, every time.Duration) (string, []any) {
		return `UPDATE job_schedules
			SET last_run_at = ` + sqliteNow + `, next_run_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
			WHERE name = ? AND next_run_at <= ` + sqliteNow, []any{sqliteModifier(every), name}
	},
	dueIn: `SELECT name, (julianday(next_run_at) - julianday('now')) * 86400.0 FROM job_schedules`,
}

// sqliteModifier is d as a date modifier of SQLite's time functions.
func sqliteModifier(d time.Duration) string {
	return fmt.Sprintf("%+.3f seconds", d.Seconds())
}

// ensureSchedules gives every periodic job its row.
func (q *Queue) ensureSchedules(ctx context.Context) error {
	for _, p := range q.periodic {
		query, args := q.sql.ensure(p.kind, p.every)
		if _, err := q.db.SQL().ExecContext(ctx, query, args...); err != nil {
			return fmt.Errorf("jobs: schedule periodic %q: %w", p.kind, err)
		}
	}
	return nil
}

// scheduleLoop enqueues the periodic jobs that are due until ctx ends.
func (q *Queue) scheduleLoop(ctx context.Context) {
	failing := false
	for {
		wait, err := q.schedulePass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			// Log the first failure and the recovery, not every pass of
			// an outage.
			if !failing {
				q.logger.Warn("periodic schedule failed", "err", err)
			}
			failing, wait = true, scheduleRetry
		case err == nil && failing:
			q.logger.Info("periodic schedule recovered")
			failing = false
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// schedulePass claims and enqueues every due periodic job, then returns
// how long to sleep until the next one is due.
func (q *Queue) schedulePass(ctx context.Context) (time.Duration, error) {
	opts := &river.InsertOpts{}
	Unique()(opts)
	var firstErr error
	for _, p := range q.periodic {
		query, args := q.sql.claim(p.kind, p.every)
		claimed, res, err := q.b.claimInsert(ctx, query, args, rawArgs{kind: p.kind, payload: p.payload}, opts)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("enqueue periodic %q: %w", p.kind, err)
			}
			continue
		}
		if claimed && !res.UniqueSkippedAsDuplicate {
			q.metrics.enqueued.WithLabelValues(p.kind).Inc()
		}
	}
	if firstErr != nil {
		return 0, firstErr
	}
	rows, err := q.db.SQL().QueryContext(ctx, q.sql.dueIn)
	if err != nil {
		return 0, fmt.Errorf("read periodic schedule: %w", err)
	}
	defer rows.Close()
	due := map[string]float64{}
	for rows.Next() {
		var name string
		var secs float64
		if err := rows.Scan(&name, &secs); err != nil {
			return 0, fmt.Errorf("read periodic schedule: %w", err)
		}
		due[name] = secs
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read periodic schedule: %w", err)
	}
	wait := scheduleRecheck
	for _, p := range q.periodic {
		secs, ok := due[p.kind]
		if !ok {
			// The row went away (restored database): add it again.
			if err := q.ensureSchedules(ctx); err != nil {
				return 0, err
			}
			secs = p.every.Seconds()
		}
		wait = min(wait, time.Duration(math.Ceil(secs*1000))*time.Millisecond)
	}
	return max(wait, scheduleFloor), nil
}
