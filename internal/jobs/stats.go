package jobs

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// Queue statistics for the admin pages. They are read from River's
// river_job table rather than from this process's Prometheus histograms:
// the table is shared by every node, so any node's admin page shows the
// whole cluster's queue, and exact percentiles come from the rows instead
// of histogram buckets a factor of four wide.
//
// Timings are over the jobs finalized (completed or discarded) in the last
// StatsWindow: queue wait is attempted_at − scheduled_at (scheduled_at is
// the insert, delay or retry time, as for sluice_jobs_queue_wait_seconds)
// and run time finalized_at − attempted_at, both of the last attempt. Time
// arithmetic and the window are done in SQL, by the database's clock, so
// the result does not depend on how a driver parses timestamp text.

// StatsWindow is how far back Stats looks for finished jobs: long enough
// to include an hourly periodic job, short enough to describe the queue
// as it is now.
const StatsWindow = time.Hour

// statsMaxRows bounds the finished rows one Stats call reads (most recent
// first), so that the admin page costs the same on a queue that finishes a
// million jobs an hour; 10,000 samples pin a p95 down well.
const statsMaxRows = 10_000

// KindStats is one job kind's queue and its recent timings.
type KindStats struct {
	Kind string
	// Jobs by River state now. Discarded counts the discarded jobs River
	// still retains (its cleaner removes them after a week).
	Available, Scheduled, Running, Retryable, Discarded int
	// Finished is how many jobs were finalized within StatsWindow (capped
	// by the sample bound); the timings below are over them and are zero
	// when it is.
	Finished          int
	WaitMean, WaitP95 time.Duration
	RunMean, RunP95   time.Duration
}

// Stats returns the statistics of every kind that has jobs in the table or
// a handler on this node, sorted by kind.
func (q *Queue) Stats(ctx context.Context) ([]KindStats, error) {
	byKind := map[string]*KindStats{}
	get := func(kind string) *KindStats {
		k := byKind[kind]
		if k == nil {
			k = &KindStats{Kind: kind}
			byKind[kind] = k
		}
		return k
	}
	q.mu.Lock()
	for kind := range q.handlers {
		get(kind)
	}
	q.mu.Unlock()

	if err := q.countStates(ctx, get); err != nil {
		return nil, err
	}
	samples, err := q.finishedSamples(ctx)
	if err != nil {
		return nil, err
	}
	for kind, s := range samples {
		k := get(kind)
		k.Finished = len(s.wait)
		k.WaitMean, k.WaitP95 = meanP95(s.wait)
		k.RunMean, k.RunP95 = meanP95(s.run)
	}

	out := make([]KindStats, 0, len(byKind))
	for _, k := range byKind {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b KindStats) int { return cmp.Compare(a.Kind, b.Kind) })
	return out, nil
}

// countStates counts the jobs of each kind in the states the page shows.
// The states are literals: on PostgreSQL the column is an enum, which a
// text parameter would not compare with.
func (q *Queue) countStates(ctx context.Context, get func(string) *KindStats) error {
	rows, err := q.db.SQL().QueryContext(ctx, `SELECT kind, state, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'running', 'retryable', 'discarded')
		GROUP BY kind, state`)
	if err != nil {
		return fmt.Errorf("job stats: count: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var n int
		if err := rows.Scan(&kind, &state, &n); err != nil {
			return fmt.Errorf("job stats: count: %w", err)
		}
		k := get(kind)
		switch state {
		case "available":
			k.Available = n
		case "scheduled":
			k.Scheduled = n
		case "running":
			k.Running = n
		case "retryable":
			k.Retryable = n
		case "discarded":
			k.Discarded = n
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("job stats: count: %w", err)
	}
	return nil
}

type samples struct{ wait, run []float64 }

// finishedSamples reads the wait and run seconds of the jobs finalized in
// the window, per kind.
func (q *Queue) finishedSamples(ctx context.Context) (map[string]*samples, error) {
	var query string
	if q.db.Dialect() == "postgres" {
		query = fmt.Sprintf(`SELECT kind,
			EXTRACT(EPOCH FROM (attempted_at - scheduled_at))::float8,
			EXTRACT(EPOCH FROM (finalized_at - attempted_at))::float8
			FROM river_job
			WHERE state IN ('completed', 'discarded') AND attempted_at IS NOT NULL
			AND finalized_at >= now() - make_interval(secs => %d)
			ORDER BY finalized_at DESC LIMIT %d`, int(StatsWindow.Seconds()), statsMaxRows)
	} else {
		// julianday parses every format River's SQLite driver writes
		// (with or without sub-seconds and a zone suffix); a day is
		// 86,400 s.
		query = fmt.Sprintf(`SELECT kind,
			(julianday(attempted_at) - julianday(scheduled_at)) * 86400.0,
			(julianday(finalized_at) - julianday(attempted_at)) * 86400.0
			FROM river_job
			WHERE state IN ('completed', 'discarded') AND attempted_at IS NOT NULL
			AND julianday(finalized_at) >= julianday('now', '-%d seconds')
			ORDER BY julianday(finalized_at) DESC LIMIT %d`, int(StatsWindow.Seconds()), statsMaxRows)
	}
	rows, err := q.db.SQL().QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("job stats: timings: %w", err)
	}
	defer rows.Close()
	out := map[string]*samples{}
	for rows.Next() {
		var kind string
		var wait, run *float64
		if err := rows.Scan(&kind, &wait, &run); err != nil {
			return nil, fmt.Errorf("job stats: timings: %w", err)
		}
		if wait == nil || run == nil {
			continue // a timestamp SQLite could not parse
		}
		s := out[kind]
		if s == nil {
			s = &samples{}
			out[kind] = s
		}
		// A delay computed on a node whose clock runs ahead of the
		// database's can make a wait slightly negative.
		s.wait = append(s.wait, max(0, *wait))
		s.run = append(s.run, max(0, *run))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("job stats: timings: %w", err)
	}
	return out, nil
}

// meanP95 is the mean and the nearest-rank 95th percentile of seconds.
func meanP95(seconds []float64) (mean, p95 time.Duration) {
	if len(seconds) == 0 {
		return 0, 0
	}
	s := slices.Clone(seconds)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	rank := int(math.Ceil(0.95*float64(len(s)))) - 1
	return secs(sum / float64(len(s))), secs(s[rank])
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
