package loadgen

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
	}{
		{"small", []time.Duration{1 * time.Microsecond, 5 * time.Microsecond, 30 * time.Microsecond}},
		{"milliseconds", durations(1000, func(i int) time.Duration { return time.Duration(i+1) * time.Millisecond })},
		{"spread", durations(5000, func(int) time.Duration { return time.Duration(rand.Int64N(int64(10 * time.Minute))) })},
	}
	for _, tt := range tests {
		h := NewHistogram()
		for _, d := range tt.samples {
			h.Record(d)
		}
		sorted := slices.Clone(tt.samples)
		slices.Sort(sorted)
		for _, q := range []float64{0.5, 0.95, 0.99, 1} {
			exact := sorted[max(int(q*float64(len(sorted))+0.999999)-1, 0)]
			got := h.Quantile(q)
			// Buckets are 1/32 of a power of two wide, plus the
			// microsecond truncation.
			lo, hi := exact-exact/32-time.Microsecond, exact+exact/16+time.Microsecond
			if got < lo || got > hi {
				t.Errorf("%s: q%.2f = %s, exact %s", tt.name, q, got, exact)
			}
		}
		if h.Count() != int64(len(tt.samples)) || h.Max() != sorted[len(sorted)-1] {
			t.Errorf("%s: count %d max %s", tt.name, h.Count(), h.Max())
		}
	}
	if q := NewHistogram().Quantile(0.5); q != 0 {
		t.Errorf("empty histogram quantile = %s", q)
	}
}

func durations(n int, f func(int) time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func TestBuckets(t *testing.T) {
	// Every value falls in a bucket whose upper bound is at least the value
	// and the previous bucket's bound is below it.
	for _, us := range []uint64{0, 1, 31, 32, 33, 63, 64, 65, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		b := bucketOf(us)
		if bucketUpper(b) < us || (b > 0 && bucketUpper(b-1) >= us) {
			t.Errorf("%d: bucket %d bounds (%d, %d]", us, b, bucketUpper(b-1), bucketUpper(b))
		}
	}
}

func TestRun(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		spec    Spec
		wantOps int64 // -1: only ops+errors == MaxOps is checked
	}{
		{
			name: "max ops bound",
			spec: Spec{Workers: 4, MaxOps: 10, Op: func(context.Context, int) (int64, error) { return 7, nil }},
			// Duration unset: only the count stops the run.
			wantOps: 10,
		},
		{
			name: "errors counted apart",
			spec: Spec{Workers: 3, MaxOps: 9, Op: func(_ context.Context, w int) (int64, error) {
				if w == 0 {
					return 0, boom
				}
				return 1, nil
			}},
			wantOps: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Run(context.Background(), tt.spec)
			if tt.wantOps >= 0 && rep.Ops != tt.wantOps {
				t.Errorf("ops = %d, want %d", rep.Ops, tt.wantOps)
			}
			if rep.Ops+rep.Errors != tt.spec.MaxOps {
				t.Errorf("ops %d + errors %d != %d", rep.Ops, rep.Errors, tt.spec.MaxOps)
			}
			if rep.Latency.Count() != rep.Ops {
				t.Errorf("latency samples %d, ops %d", rep.Latency.Count(), rep.Ops)
			}
			if rep.Errors > 0 && (len(rep.ErrorSamples) != 1 || rep.ErrorSamples[0] != "boom") {
				t.Errorf("error samples %q", rep.ErrorSamples)
			}
		})
	}
}

func TestRunDuration(t *testing.T) {
	var mu sync.Mutex
	perWorker := map[int]int{}
	rep := Run(context.Background(), Spec{Workers: 3, Duration: 100 * time.Millisecond, Op: func(ctx context.Context, w int) (int64, error) {
		mu.Lock()
		perWorker[w]++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		return 100, nil
	}})
	if rep.Ops < 3 || rep.Elapsed < 100*time.Millisecond || rep.Bytes != 100*rep.Ops {
		t.Errorf("ops %d elapsed %s bytes %d", rep.Ops, rep.Elapsed, rep.Bytes)
	}
	if len(perWorker) != 3 {
		t.Errorf("workers used: %v", perWorker)
	}
	if rep.OpsPerHour() <= 0 {
		t.Errorf("ops/hour = %f", rep.OpsPerHour())
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep := Run(ctx, Spec{Workers: 2, Duration: time.Hour, Op: func(context.Context, int) (int64, error) {
		t.Error("op ran after cancellation")
		return 0, nil
	}})
	if rep.Ops != 0 {
		t.Errorf("ops = %d", rep.Ops)
	}
}
