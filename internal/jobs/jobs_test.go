package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/goleak"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/pgtest"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// TestMain runs the tests against a PostgreSQL server and then fails the
// package if a goroutine they started is still running.
func TestMain(m *testing.M) { pgtest.Main(m, func() error { return goleak.Find() }) }

// eachDB runs fn against a fresh SQLite database and a fresh PostgreSQL
// database.
func eachDB(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db")))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, openDB(t, pgtest.URL(t)))
	})
}

func openDB(t *testing.T, url string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type testQueue struct {
	*Queue
	reg *prometheus.Registry
}

func newQueue(t *testing.T, db *store.DB, cfg Config) *testQueue {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.RetryBackoff == nil {
		cfg.RetryBackoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	reg := prometheus.NewRegistry()
	q, err := New(db, cfg, nil, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &testQueue{Queue: q, reg: reg}
}

func (q *testQueue) start(t *testing.T) {
	t.Helper()
	if err := q.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// jobs lists the jobs of kind in the database.
func (q *testQueue) jobs(t *testing.T, kind string) []*rivertype.JobRow {
	t.Helper()
	q.mu.Lock()
	c, err := q.clientLocked()
	q.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.JobList(context.Background(), river.NewJobListParams().Kinds(kind).First(1000))
	if err != nil {
		t.Fatalf("JobList: %v", err)
	}
	return res.Jobs
}

// waitFor polls cond until it holds or 15 s pass.

type payload struct {
	RepoID int64  `json:"repo_id"`
	Note   string `json:"note,omitempty"`
}

// recorder is a handler that records the payloads it was given.
type recorder struct {
	mu   sync.Mutex
	seen []payload
}

func (r *recorder) handle(_ context.Context, raw json.RawMessage) error {
	var p payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	r.mu.Lock()
	r.seen = append(r.seen, p)
	r.mu.Unlock()
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func TestEnqueueHandledOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		q := newQueue(t, db, Config{Workers: 3})
		var rec recorder
		q.Handle("housekeeping", rec.handle)
		q.start(t)
		ctx := context.Background()
		const n = 6
		for i := range n {
			if err := q.Enqueue(ctx, "housekeeping", payload{RepoID: int64(i + 1), Note: "ü\"x"}); err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
		}
		wait.For(t, "all jobs completed", 15*time.Second, func() bool { return completed(t, q, "housekeeping") == n })
		// A duplicate run would have been fetched before a job enqueued
		// after all of them: once that one is handled, a duplicate has had
		// its chance to show.
		if err := q.Enqueue(ctx, "housekeeping", payload{RepoID: n + 1, Note: "ü\"x"}); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		wait.For(t, "the later job completed", 15*time.Second, func() bool { return completed(t, q, "housekeeping") == n+1 })
		rec.mu.Lock()
		seen := map[int64]int{}
		for _, p := range rec.seen {
			seen[p.RepoID]++
			if p.Note != "ü\"x" {
				t.Errorf("payload %+v lost its note", p)
			}
		}
		rec.mu.Unlock()
		for i := int64(1); i <= n; i++ {
			if seen[i] != 1 {
				t.Errorf("repo %d handled %d times, want 1", i, seen[i])
			}
		}
		for _, j := range q.jobs(t, "housekeeping") {
			if j.State != rivertype.JobStateCompleted {
				t.Errorf("job %d state %s", j.ID, j.State)
			}
			// The row holds the real kind and the payload itself.
			var p payload
			if err := json.Unmarshal(j.EncodedArgs, &p); err != nil || p.RepoID == 0 {
				t.Errorf("job args %s: %v", j.EncodedArgs, err)
			}
		}
		// n jobs and the later one.
		if got := testutil.ToFloat64(q.metrics.enqueued.WithLabelValues("housekeeping")); got != n+1 {
			t.Errorf("enqueued_total = %v, want %d", got, n+1)
		}
		wait.For(t, "run metric", 15*time.Second, func() bool {
			return testutil.CollectAndCount(q.metrics.run) == 1 && histCount(t, q.reg, "sluice_jobs_run_seconds", "outcome", "ok") == n+1
		})
	})
}

func TestFailureRetried(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		q := newQueue(t, db, Config{})
		var (
			mu       sync.Mutex
			attempts int
		)
		q.Handle("webhook", func(ctx context.Context, raw json.RawMessage) error {
			mu.Lock()
			defer mu.Unlock()
			attempts++
			if attempts < 3 {
				return fmt.Errorf("endpoint down (attempt %d)", attempts)
			}
			return nil
		})
		q.start(t)
		if err := q.Enqueue(context.Background(), "webhook", payload{RepoID: 1}); err != nil {
			t.Fatal(err)
		}
		wait.For(t, "the job to complete", 15*time.Second, func() bool {
			js := q.jobs(t, "webhook")
			return len(js) == 1 && js[0].State == rivertype.JobStateCompleted
		})
		j := q.jobs(t, "webhook")[0]
		if j.Attempt != 3 || len(j.Errors) != 2 || !strings.Contains(j.Errors[0].Error, "endpoint down") {
			t.Errorf("attempt %d, errors %+v; want 3 attempts and 2 recorded errors", j.Attempt, j.Errors)
		}
		wait.For(t, "run metrics", 15*time.Second, func() bool {
			return histCount(t, q.reg, "sluice_jobs_run_seconds", "outcome", "error") == 2 &&
				histCount(t, q.reg, "sluice_jobs_run_seconds", "outcome", "ok") == 1
		})
	})
}

func TestUnique(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		q := newQueue(t, db, Config{})
		var rec recorder
		q.Handle("housekeeping", rec.handle)
		ctx := context.Background()
		// Not started: the jobs stay pending while we enqueue.
		for _, p := range []payload{{RepoID: 1}, {RepoID: 1}, {RepoID: 2}, {RepoID: 1}} {
			if err := q.Enqueue(ctx, "housekeeping", p, Unique()); err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
		}
		if js := q.jobs(t, "housekeeping"); len(js) != 2 {
			t.Fatalf("%d jobs queued, want one per repository", len(js))
		}
		if got := testutil.ToFloat64(q.metrics.enqueued.WithLabelValues("housekeeping")); got != 2 {
			t.Errorf("enqueued_total = %v, want 2 (duplicates skipped)", got)
		}
		// Without Unique, duplicates are fine.
		q.Enqueue(ctx, "housekeeping", payload{RepoID: 1})
		if js := q.jobs(t, "housekeeping"); len(js) != 3 {
			t.Fatalf("%d jobs queued, want 3", len(js))
		}
		q.start(t)
		wait.For(t, "jobs completed", 15*time.Second, func() bool { return completed(t, q, "housekeeping") == 3 })
		// Once finished, a job no longer blocks a new one.
		res, err := q.enqueue(ctx, "housekeeping", payload{RepoID: 1}, Unique())
		if err != nil || res.UniqueSkippedAsDuplicate {
			t.Fatalf("enqueue after completion: %+v, %v", res, err)
		}
		wait.For(t, "the new job handled", 15*time.Second, func() bool { return rec.count() == 4 })
	})
}

func TestQueueWaitObserved(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		q := newQueue(t, db, Config{})
		var rec recorder
		q.Handle("rescope", rec.handle)
		// The job waits 300 ms for a worker, as it would behind a stalled
		// pool: the wait metric must show it even though the run is fast.
		if err := q.Enqueue(context.Background(), "rescope", payload{RepoID: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		q.start(t)
		wait.For(t, "the job handled", 15*time.Second, func() bool { return rec.count() == 1 })
		wait.For(t, "the wait metric", 15*time.Second, func() bool { return histCount(t, q.reg, "sluice_jobs_queue_wait_seconds", "kind", "rescope") == 1 })
		wait := histSum(t, q.reg, "sluice_jobs_queue_wait_seconds", "kind", "rescope")
		run := histSum(t, q.reg, "sluice_jobs_run_seconds", "kind", "rescope")
		if wait < 0.3 || wait > 10 {
			t.Errorf("queue wait = %.3fs, want at least the 0.3s the job sat queued", wait)
		}
		if run >= 0.3 {
			t.Errorf("run = %.3fs includes the queue wait", run)
		}
	})
}

func TestDelay(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		q := newQueue(t, db, Config{})
		var rec recorder
		q.Handle("diff", rec.handle)
		q.start(t)
		before := time.Now()
		res, err := q.enqueue(context.Background(), "diff", payload{RepoID: 1}, Delay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if res.Job.State != rivertype.JobStateScheduled || res.Job.ScheduledAt.Before(before.Add(59*time.Minute)) {
			t.Errorf("delayed job: state %s, scheduled at %v", res.Job.State, res.Job.ScheduledAt)
		}
		// A job enqueued after it without a delay runs; had the delay
		// been ignored, the delayed one would have run first.
		if _, err := q.enqueue(context.Background(), "diff", payload{RepoID: 2}); err != nil {
			t.Fatal(err)
		}
		wait.For(t, "the undelayed job handled", 15*time.Second, func() bool { return rec.count() >= 1 })
		rec.mu.Lock()
		for _, p := range rec.seen {
			if p.RepoID == 1 {
				t.Error("a job delayed by an hour ran")
			}
		}
		rec.mu.Unlock()
	})
}

func TestStopDrains(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		q := newQueue(t, db, Config{})
		started := make(chan struct{})
		var finished bool
		var mu sync.Mutex
		q.Handle("slow", func(ctx context.Context, _ json.RawMessage) error {
			close(started)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			finished = true
			mu.Unlock()
			return nil
		})
		if err := q.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(context.Background(), "slow", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(15 * time.Second):
			t.Fatal("job never started")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			t.Fatal("Stop returned before the running job finished")
		}
		if js := q.jobs(t, "slow"); len(js) != 1 || js[0].State != rivertype.JobStateCompleted {
			t.Errorf("job after Stop: %+v", js[0])
		}
	})
}

func TestStopCancelsAtDeadline(t *testing.T) {
	db := openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"))
	q := newQueue(t, db, Config{})
	started := make(chan struct{})
	cancelled := make(chan struct{})
	q.Handle("stuck", func(ctx context.Context, _ json.RawMessage) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	})
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.Enqueue(context.Background(), "stuck", nil)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := q.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want the deadline", err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck job was never cancelled")
	}
}

func TestUnknownKind(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		// An older node knows only "alpha"; a newer one enqueues "beta".
		older := newQueue(t, db, Config{})
		var rec recorder
		older.Handle("alpha", rec.handle)
		newer := newQueue(t, db, Config{NodeID: "node-2"})
		newer.Handle("alpha", rec.handle)
		newer.Handle("beta", rec.handle)
		if err := newer.Enqueue(ctx, "beta", payload{RepoID: 9}); err != nil {
			t.Fatal(err)
		}
		older.start(t)
		wait.For(t, "the unknown kind to be tried", 15*time.Second, func() bool {
			js := older.jobs(t, "beta")
			return len(js) == 1 && len(js[0].Errors) > 0
		})
		j := older.jobs(t, "beta")[0]
		if j.State == rivertype.JobStateCompleted || !strings.Contains(j.Errors[0].Error, "not registered") {
			t.Errorf("unknown kind: state %s, errors %+v", j.State, j.Errors)
		}
		if rec.count() != 0 {
			t.Error("a handler ran for a kind it does not know")
		}
		// Enqueueing a kind without a handler fails at the call.
		if err := older.Enqueue(ctx, "beta", payload{}); err == nil || !strings.Contains(err.Error(), "no handler") {
			t.Errorf("Enqueue of an unhandled kind = %v", err)
		}
	})
}

func TestPeriodic(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		var rec recorder
		// Two nodes; only the leader enqueues the periodic job.
		var qs []*testQueue
		for i := range 2 {
			q := newQueue(t, db, Config{NodeID: fmt.Sprintf("node-%d", i)})
			q.Handle("sweep", rec.handle)
			q.Periodic("sweep", 300*time.Millisecond, payload{Note: "all"})
			qs = append(qs, q)
		}
		for _, q := range qs {
			q.start(t)
		}
		wait.For(t, "two periodic runs", 15*time.Second, func() bool { return rec.count() >= 2 })
		// Let more ticks pass, counted by the runs they caused, so that a
		// second node enqueueing as well would show in the count.
		wait.For(t, "four periodic runs", 15*time.Second, func() bool { return rec.count() >= 4 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.seen[0].Note != "all" {
			t.Errorf("periodic payload = %+v", rec.seen[0])
		}
		// Each tick of 300 ms enqueues one job, whatever the number of
		// nodes; two nodes each enqueueing would double the count.
		jobs := qs[0].jobs(t, "sweep")
		span := jobs[len(jobs)-1].CreatedAt.Sub(jobs[0].CreatedAt)
		if max := int(span/(300*time.Millisecond)) + 2; len(jobs) > max {
			t.Errorf("%d periodic jobs over %v, want at most %d (one leader)", len(jobs), span, max)
		}
	})
}

func TestSetupErrors(t *testing.T) {
	db := openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"))
	nop := func(context.Context, json.RawMessage) error { return nil }
	tests := []struct {
		name  string
		setup func(q *Queue)
		want  string
	}{
		{"duplicate handler", func(q *Queue) { q.Handle("aa", nop); q.Handle("aa", nop) }, "two handlers"},
		{"bad kind", func(q *Queue) { q.Handle("-x y", nop) }, "invalid kind"},
		{"one-letter kind", func(q *Queue) { q.Handle("a", nop) }, "invalid kind"},
		{"periodic without handler", func(q *Queue) { q.Periodic("pp", time.Second, nil) }, "no handler"},
		{"periodic bad interval", func(q *Queue) { q.Handle("pp", nop); q.Periodic("pp", 0, nil) }, "interval"},
		{"periodic bad payload", func(q *Queue) { q.Handle("pp", nop); q.Periodic("pp", time.Second, []int{1}) }, "JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue(t, db, Config{})
			tt.setup(q.Queue)
			err := q.Start(context.Background())
			if err == nil {
				q.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start = %v, want %q", err, tt.want)
			}
		})
	}
	t.Run("payload not an object", func(t *testing.T) {
		q := newQueue(t, db, Config{})
		q.Handle("aa", nop)
		if err := q.Enqueue(context.Background(), "aa", "string"); err == nil {
			t.Error("Enqueue accepted a string payload")
		}
	})
	t.Run("handle after build", func(t *testing.T) {
		q := newQueue(t, db, Config{})
		q.Handle("aa", nop)
		if err := q.Enqueue(context.Background(), "aa", nil); err != nil {
			t.Fatal(err)
		}
		q.Handle("late", nop)
		if err := q.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "after the queue was built") {
			q.Stop(context.Background())
			t.Errorf("Start = %v", err)
		}
	})
}

// completed counts the jobs of kind River has marked completed (it records
// completions asynchronously, after the handler returned).
func completed(t *testing.T, q *testQueue, kind string) int {
	n := 0
	for _, j := range q.jobs(t, kind) {
		if j.State == rivertype.JobStateCompleted {
			n++
		}
	}
	return n
}

// histCount and histSum read a histogram series whose label name=value
// from reg.
func histCount(t *testing.T, reg *prometheus.Registry, metric, name, value string) uint64 {
	t.Helper()
	var n uint64
	forHist(t, reg, metric, name, value, func(c uint64, _ float64) { n += c })
	return n
}

func histSum(t *testing.T, reg *prometheus.Registry, metric, name, value string) float64 {
	t.Helper()
	var s float64
	forHist(t, reg, metric, name, value, func(_ uint64, sum float64) { s += sum })
	return s
}

func forHist(t *testing.T, reg *prometheus.Registry, metric, name, value string, fn func(uint64, float64)) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					fn(m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum())
				}
			}
		}
	}
}
