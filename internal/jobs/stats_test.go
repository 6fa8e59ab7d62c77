package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

func TestMeanP95(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	twenty := make([]float64, 20)
	for i := range twenty {
		twenty[i] = float64(i+1) / 1000 // 1 ms … 20 ms
	}
	tests := []struct {
		name      string
		in        []float64
		mean, p95 time.Duration
	}{
		{"empty", nil, 0, 0},
		{"one", []float64{0.25}, ms(250), ms(250)},
		{"unsorted", []float64{0.3, 0.1, 0.2}, ms(200), ms(300)},
		// Nearest rank: ⌈0.95·20⌉ = 19th value.
		{"twenty", twenty, ms(10.5), ms(19)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mean, p95 := meanP95(tc.in)
			if d := mean - tc.mean; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("mean %v, want %v", mean, tc.mean)
			}
			if d := p95 - tc.p95; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("p95 %v, want %v", p95, tc.p95)
			}
		})
	}
}

// TestStats runs real jobs through River and checks the counts by state
// and the timings read back from river_job.
func TestStats(t *testing.T) {
	eachDB(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := newQueue(t, db, Config{Workers: 4})
		const runFor = 60 * time.Millisecond
		q.Handle("slow", func(ctx context.Context, _ json.RawMessage) error {
			time.Sleep(runFor)
			return nil
		})
		q.Handle("broken", func(context.Context, json.RawMessage) error { return errors.New("always fails") })
		release := make(chan struct{})
		q.Handle("blocked", func(ctx context.Context, _ json.RawMessage) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		q.Handle("later", func(context.Context, json.RawMessage) error { return nil })
		q.Handle("idle", func(context.Context, json.RawMessage) error { return nil })

		// Enqueued before the workers start: every "slow" job waits at
		// least this long in the queue.
		const queued = 300 * time.Millisecond
		for i := range 3 {
			if err := q.Enqueue(ctx, "slow", payload{RepoID: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Enqueue(ctx, "broken", payload{}, MaxAttempts(1)); err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(ctx, "later", payload{}, Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(queued)
		q.start(t)
		defer close(release)
		if err := q.Enqueue(ctx, "blocked", payload{}); err != nil {
			t.Fatal(err)
		}

		var stats map[string]KindStats
		wait.For(t, "the jobs to settle", 15*time.Second, func() bool {
			list, err := q.Stats(ctx)
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			stats = map[string]KindStats{}
			for _, k := range list {
				stats[k.Kind] = k
			}
			return stats["slow"].Finished == 3 && stats["broken"].Discarded == 1 && stats["blocked"].Running == 1
		})

		slow := stats["slow"]
		if slow.Available+slow.Running+slow.Retryable+slow.Scheduled != 0 {
			t.Errorf("slow: %+v; want nothing left in the queue", slow)
		}
		if slow.WaitMean < queued || slow.WaitP95 < queued || slow.WaitP95 > 30*time.Second {
			t.Errorf("slow: wait mean %v p95 %v; want at least %v (enqueued before start)", slow.WaitMean, slow.WaitP95, queued)
		}
		if slow.RunMean < runFor || slow.RunP95 < runFor || slow.RunP95 > 30*time.Second {
			t.Errorf("slow: run mean %v p95 %v; want at least %v", slow.RunMean, slow.RunP95, runFor)
		}
		if slow.RunP95 < slow.RunMean || slow.WaitP95 < slow.WaitMean {
			t.Errorf("slow: p95 below the mean: %+v", slow)
		}
		if b := stats["broken"]; b.Discarded != 1 || b.Finished != 1 {
			t.Errorf("broken: %+v; want one discarded job, finished in the window", b)
		}
		if l := stats["later"]; l.Scheduled != 1 || l.Finished != 0 || l.WaitMean != 0 {
			t.Errorf("later: %+v; want one scheduled job and no timings", l)
		}
		if b := stats["blocked"]; b.Running != 1 || b.Finished != 0 {
			t.Errorf("blocked: %+v; want one running job", b)
		}
		// A kind with a handler and no jobs is listed with zeros.
		if i, ok := stats["idle"]; !ok || i != (KindStats{Kind: "idle"}) {
			t.Errorf("idle: %+v (listed %v); want a row of zeros", i, ok)
		}
		list, _ := q.Stats(ctx)
		for i := 1; i < len(list); i++ {
			if list[i-1].Kind >= list[i].Kind {
				t.Errorf("kinds not sorted: %q before %q", list[i-1].Kind, list[i].Kind)
			}
		}
	})
}
