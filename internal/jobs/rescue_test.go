package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river/rivertype"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// markRunning makes job id look as a crashed process left it: running in
// attempt, attempted by client id `by`, started ago.
func markRunning(t *testing.T, db *store.DB, id int64, by string, attempt int, ago time.Duration) {
	t.Helper()
	var err error
	ctx := context.Background()
	if db.Dialect() == "postgres" {
		_, err = db.SQL().ExecContext(ctx, `UPDATE river_job SET state = 'running', attempt = $2,
			attempted_at = now() - $3 * interval '1 millisecond', attempted_by = ARRAY[$4]::text[]
			WHERE id = $1`, id, attempt, ago.Milliseconds(), by)
	} else {
		_, err = db.SQL().ExecContext(ctx, `UPDATE river_job SET state = 'running', attempt = ?,
			attempted_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?), attempted_by = jsonb(json_array(?))
			WHERE id = ?`, attempt, sqliteModifier(-ago), by, id)
	}
	if err != nil {
		t.Fatalf("mark job %d running: %v", id, err)
	}
}

// insert enqueues a job that no worker takes until markRunning has
// changed it (it is scheduled an hour ahead) and returns its id.
func (q *testQueue) insert(t *testing.T, kind string, p payload, opts ...EnqueueOption) int64 {
	t.Helper()
	res, err := q.enqueue(context.Background(), kind, p, append(opts, Delay(time.Hour))...)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.Job.ID
}

func (q *testQueue) job(t *testing.T, id int64) *rivertype.JobRow {
	t.Helper()
	j, err := q.client.JobGet(context.Background(), id)
	if err != nil {
		t.Fatalf("JobGet %d: %v", id, err)
	}
	return j
}

func lastError(j *rivertype.JobRow) string {
	if len(j.Errors) == 0 {
		return ""
	}
	return j.Errors[len(j.Errors)-1].Error
}

// TestRestartRescuesOwnJobs: a node killed mid-job comes back (same node
// id, new incarnation); the jobs its earlier incarnation left running are
// worked again at once, not after River's rescue timeout (two hours), and
// a job out of attempts is discarded. Another node's running job is left
// alone.
func TestRestartRescuesOwnJobs(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		var rec recorder
		old := newQueue(t, db, Config{NodeID: "node-1"})
		old.Handle("housekeeping", rec.handle)
		retry := old.insert(t, "housekeeping", payload{RepoID: 1}, Unique())
		spent := old.insert(t, "housekeeping", payload{RepoID: 2}, MaxAttempts(1))
		other := old.insert(t, "housekeeping", payload{RepoID: 3})
		markRunning(t, db, retry, old.clientID(), 1, time.Minute)
		markRunning(t, db, spent, old.clientID(), 1, time.Minute)
		markRunning(t, db, other, "node-2_1", 1, time.Minute)

		q := newQueue(t, db, Config{NodeID: "node-1"})
		q.Handle("housekeeping", rec.handle)
		if q.clientID() == old.clientID() {
			t.Fatal("two incarnations share a client id")
		}
		q.start(t)
		wait.For(t, "the orphaned job to be worked again", 15*time.Second, func() bool {
			return q.job(t, retry).State == rivertype.JobStateCompleted
		})
		j := q.job(t, retry)
		if !strings.Contains(lastError(j), "node node-1 restarted") || j.Attempt != 2 {
			t.Errorf("rescued job: attempt %d, errors %+v", j.Attempt, j.Errors)
		}
		if j := q.job(t, spent); j.State != rivertype.JobStateDiscarded || !strings.Contains(lastError(j), "restarted") {
			t.Errorf("job out of attempts: state %s, errors %+v", j.State, j.Errors)
		}
		// The start's one rescue pass has run (the job it freed is done):
		// a node with another id, which no registry says is gone, keeps
		// its job.
		if j := q.job(t, other); j.State != rivertype.JobStateRunning {
			t.Errorf("another node's running job: state %s", j.State)
		}
		if rec.count() != 1 {
			t.Errorf("handler ran %d times, want 1", rec.count())
		}
		if got := testutil.ToFloat64(q.metrics.rescued.WithLabelValues("housekeeping", "requeued")); got != 1 {
			t.Errorf("rescued requeued = %v, want 1", got)
		}
		if got := testutil.ToFloat64(q.metrics.rescued.WithLabelValues("housekeeping", "discarded")); got != 1 {
			t.Errorf("rescued discarded = %v, want 1", got)
		}
		// The unique job no longer blocks the repository's next one.
		res, err := q.enqueue(context.Background(), "housekeeping", payload{RepoID: 1}, Unique())
		if err != nil || res.UniqueSkippedAsDuplicate {
			t.Errorf("enqueue after rescue: %+v, %v", res, err)
		}
	})
}

// TestGoneNodeJobsRescued: a live node rescues the running jobs of nodes
// the registry no longer lists as live, once their attempt is older than
// the grace, and leaves live nodes' jobs alone.
func TestGoneNodeJobsRescued(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		var rec recorder
		q := newQueue(t, db, Config{
			NodeID:         "node-1",
			RescueInterval: 50 * time.Millisecond,
			RescueGrace:    time.Second,
			LiveNodes: func(context.Context) (map[string]bool, error) {
				return map[string]bool{"node-1": true, "node_2": true}, nil
			},
		})
		q.Handle("rescope", rec.handle)
		q.start(t)
		// The nodes die while this one runs: the rescue loop, not the
		// start, must find their jobs.
		gone := q.insert(t, "rescope", payload{RepoID: 1})
		fresh := q.insert(t, "rescope", payload{RepoID: 2})
		live := q.insert(t, "rescope", payload{RepoID: 3})
		markRunning(t, db, gone, "node-9_17", 1, time.Minute)
		markRunning(t, db, fresh, "node-8_17", 1, 0)
		markRunning(t, db, live, "node_2_17", 1, time.Minute)

		wait.For(t, "the gone node's job to be worked again", 15*time.Second, func() bool {
			return q.job(t, gone).State == rivertype.JobStateCompleted
		})
		if e := lastError(q.job(t, gone)); !strings.Contains(e, "node node-9 is gone") {
			t.Errorf("rescue error = %q", e)
		}
		if j := q.job(t, fresh); j.State != rivertype.JobStateRunning {
			t.Errorf("a job attempted within the grace: state %s, want still running", j.State)
		}
		wait.For(t, "the job attempted within the grace to be rescued after it", 15*time.Second, func() bool {
			return q.job(t, fresh).State == rivertype.JobStateCompleted
		})
		if j := q.job(t, live); j.State != rivertype.JobStateRunning {
			t.Errorf("a live node's job (its id has an underscore): state %s, want running", j.State)
		}
		if rec.count() != 2 {
			t.Errorf("handler ran %d times, want 2", rec.count())
		}
	})
}

// TestSoleWorkerRescuesAll: on SQLite one server works the queue, so at
// start every running job is an orphan, even under another node id (the
// default id holds the HTTP port, which may change between runs).
func TestSoleWorkerRescuesAll(t *testing.T) {
	db := openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"))
	var rec recorder
	q := newQueue(t, db, Config{NodeID: "host:8080", SoleWorker: true})
	q.Handle("diff", rec.handle)
	id := q.insert(t, "diff", payload{RepoID: 1})
	markRunning(t, db, id, "host:39211_123", 1, 0)
	q.start(t)
	wait.For(t, "the previous server's job to be worked", 15*time.Second, func() bool {
		return q.job(t, id).State == rivertype.JobStateCompleted
	})
	if e := lastError(q.job(t, id)); !strings.Contains(e, "server restarted") {
		t.Errorf("rescue error = %q", e)
	}
}

// TestKindTimeout: a kind's Timeout bounds its runs; other kinds keep the
// queue's.
func TestKindTimeout(t *testing.T) {
	db := openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"))
	q := newQueue(t, db, Config{})
	deadlines := make(chan time.Duration, 2)
	record := func(ctx context.Context, _ json.RawMessage) error {
		d, _ := ctx.Deadline()
		deadlines <- time.Until(d)
		return nil
	}
	q.Handle("short", record, Timeout(30*time.Second))
	q.Handle("long", record)
	q.start(t)
	for _, kind := range []string{"short", "long"} {
		if err := q.Enqueue(context.Background(), kind, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-deadlines:
			want := DefaultJobTimeout
			if kind == "short" {
				want = 30 * time.Second
			}
			if d > want || d < want-10*time.Second {
				t.Errorf("%s: deadline in %v, want %v", kind, d, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s never ran", kind)
		}
	}
}

// TestPeriodicSurvivesLeaderChanges: nodes live shorter than the interval,
// one after the other, as when leadership moves every few seconds. River's
// in-memory schedule restarted from zero with each and never ran the job;
// the schedule in the database runs it at its interval regardless, and
// never more often.
func TestPeriodicSurvivesLeaderChanges(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		const every = time.Second
		var rec recorder
		var last *testQueue
		for i := 0; rec.count() < 3; i++ {
			if i == 30 {
				t.Fatalf("%d runs after %d nodes of 0.4s each, want one per %v", rec.count(), i, every)
			}
			q := newQueue(t, db, Config{NodeID: fmt.Sprintf("node-%d", i)})
			q.Handle("sweep", rec.handle)
			q.Periodic("sweep", every, payload{Note: "all"})
			if err := q.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(every * 4 / 10) // the node's lifetime, not a negative check
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := q.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			cancel()
			last = q
		}
		jobs := last.jobs(t, "sweep")
		for i := 1; i < len(jobs); i++ {
			if gap := jobs[i].CreatedAt.Sub(jobs[i-1].CreatedAt); gap < every*8/10 {
				t.Errorf("periodic jobs %d and %d enqueued %v apart, interval %v", i-1, i, gap, every)
			}
		}
	})
}
