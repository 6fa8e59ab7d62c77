package loadgen

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// gauge tracks how many operations run at once and the most seen.
type gauge struct{ cur, peak atomic.Int64 }

func (g *gauge) enter() {
	n := g.cur.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

func (g *gauge) leave() { g.cur.Add(-1) }

func TestRunOpenLoopRate(t *testing.T) {
	// 200/s for 300 ms schedules arrivals at 0, 5, …, 295 ms: exactly 60,
	// however late the runner wakes, since it starts overdue ones rather
	// than skipping them. A closed loop of 4 workers of this 100 ms
	// operation could start at most 16.
	var g gauge
	var mu sync.Mutex
	seen := map[int]int{}
	rep := Run(context.Background(), Spec{Workers: 4, Rate: 200, Duration: 300 * time.Millisecond,
		Op: func(_ context.Context, w int) (int64, error) {
			g.enter()
			defer g.leave()
			mu.Lock()
			seen[w]++
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			return 10, nil
		}})
	if rep.Offered != 60 || rep.Ops != 60 || rep.Dropped != 0 || rep.Errors != 0 || rep.CutOff != 0 {
		t.Errorf("offered %d ops %d dropped %d errors %d cut off %d, want 60 offered and done",
			rep.Offered, rep.Ops, rep.Dropped, rep.Errors, rep.CutOff)
	}
	if rep.Latency.Count() != rep.Ops || rep.Bytes != 10*rep.Ops {
		t.Errorf("latency samples %d bytes %d, ops %d", rep.Latency.Count(), rep.Bytes, rep.Ops)
	}
	// Operations overlap whenever one starts within another's 100 ms;
	// about 20 do, 3 leaves room for a stalled machine.
	if p := g.peak.Load(); p < 3 {
		t.Errorf("peak concurrency %d", p)
	}
	// The last arrival is at 295 ms and takes 100 ms; without CutOff the
	// run waits for it.
	if rep.Elapsed < 395*time.Millisecond {
		t.Errorf("elapsed %s", rep.Elapsed)
	}
	// Worker numbers are sequence numbers modulo Workers: 15 each.
	if want := map[int]int{0: 15, 1: 15, 2: 15, 3: 15}; !maps.Equal(seen, want) {
		t.Errorf("worker numbers %v, want %v", seen, want)
	}
	if s := rep.String(); !strings.Contains(s, "60 offered") || strings.Contains(s, "dropped") || strings.Contains(s, "cut off") {
		t.Errorf("String() = %q", s)
	}
}

func TestRunOpenLoopMaxOps(t *testing.T) {
	var calls atomic.Int64
	rep := Run(context.Background(), Spec{Rate: 1000, Duration: time.Hour, MaxOps: 7, Op: func(context.Context, int) (int64, error) {
		calls.Add(1)
		return 0, nil
	}})
	if calls.Load() != 7 || rep.Ops != 7 || rep.Offered != 7 {
		t.Errorf("calls %d ops %d offered %d, want 7", calls.Load(), rep.Ops, rep.Offered)
	}
}

func TestRunOpenLoopMaxInFlight(t *testing.T) {
	// Every operation holds its slot until the cut, so the first three
	// arrivals fill MaxInFlight and the other 37 of the 40 are dropped.
	var g gauge
	var calls atomic.Int64
	rep := Run(context.Background(), Spec{Rate: 200, Duration: 200 * time.Millisecond, MaxInFlight: 3, CutOff: true,
		Op: func(ctx context.Context, _ int) (int64, error) {
			calls.Add(1)
			g.enter()
			defer g.leave()
			<-ctx.Done()
			return 0, ctx.Err()
		}})
	if p := g.peak.Load(); p > 3 {
		t.Errorf("peak concurrency %d, MaxInFlight 3", p)
	}
	if rep.Dropped == 0 || rep.Offered != 40 || rep.Offered != calls.Load()+rep.Dropped {
		t.Errorf("offered %d dropped %d started %d", rep.Offered, rep.Dropped, calls.Load())
	}
	if rep.CutOff != calls.Load() || rep.Errors != 0 || rep.Ops != 0 || len(rep.ErrorSamples) != 0 {
		t.Errorf("cut off %d errors %d ops %d samples %q, started %d", rep.CutOff, rep.Errors, rep.Ops, rep.ErrorSamples, calls.Load())
	}
	if s := rep.String(); !strings.Contains(s, fmt.Sprintf("%d dropped", rep.Dropped)) || !strings.Contains(s, fmt.Sprintf("%d cut off", rep.CutOff)) {
		t.Errorf("String() = %q", s)
	}
}

func TestRunCutOff(t *testing.T) {
	// Long enough that even a loaded CI machine starts a goroutine in it.
	const window = time.Second
	// hang would take 10 s, so a run that ends well before proves the cut
	// cancelled it.
	var hangs atomic.Int64
	hang := func(ctx context.Context, _ int) (int64, error) {
		hangs.Add(1)
		select {
		case <-ctx.Done():
			return 1, ctx.Err()
		case <-time.After(10 * time.Second):
			return 1, nil
		}
	}
	tests := []struct {
		name string
		spec Spec
		// maxOps bounds the operations that succeed before the cut.
		maxOps int64
		// offered is an open loop's arrivals in the window.
		offered int64
		// minRun is how long Run must take.
		minRun time.Duration
	}{
		{
			name: "closed loop, op honours ctx",
			spec: Spec{Workers: 2, Op: hang},
		},
		{
			// Success after the cut is still outside the window.
			name: "closed loop, op ignores ctx",
			spec: Spec{Workers: 2, Op: func(context.Context, int) (int64, error) {
				hangs.Add(1)
				time.Sleep(1500 * time.Millisecond)
				return 1, nil
			}},
			minRun: 1500 * time.Millisecond,
		},
		{
			// Workers 2 alternates a hang with a quick success; 8/s gives
			// arrivals at 0, 125, …, 875 ms.
			name: "open loop, half hang",
			spec: Spec{Workers: 2, Rate: 8, Op: func(ctx context.Context, w int) (int64, error) {
				if w == 1 {
					return 1, nil
				}
				return hang(ctx, w)
			}},
			maxOps:  4,
			offered: 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hangs.Store(0)
			var calls atomic.Int64
			op := tt.spec.Op
			tt.spec.Op = func(ctx context.Context, w int) (int64, error) {
				calls.Add(1)
				return op(ctx, w)
			}
			tt.spec.Duration, tt.spec.CutOff = window, true
			t0 := time.Now()
			rep := Run(context.Background(), tt.spec)
			took := time.Since(t0)
			if calls.Load() == 0 {
				t.Fatal("no operation started within the window")
			}
			if rep.Elapsed != window {
				t.Errorf("elapsed %s, want the window %s", rep.Elapsed, window)
			}
			if took < tt.minRun || took > 5*time.Second {
				t.Errorf("run took %s", took)
			}
			// Every operation that hung is cut off; quick ones succeed
			// unless the runner was so late they ran past the cut.
			if rep.CutOff < hangs.Load() || rep.Ops > tt.maxOps || rep.Ops+rep.CutOff != calls.Load() {
				t.Errorf("ops %d cut off %d, started %d of which %d hung", rep.Ops, rep.CutOff, calls.Load(), hangs.Load())
			}
			if rep.Offered != tt.offered || rep.Offered != 0 && rep.Offered != calls.Load()+rep.Dropped {
				t.Errorf("offered %d dropped %d, started %d", rep.Offered, rep.Dropped, calls.Load())
			}
			if rep.Errors != 0 || len(rep.ErrorSamples) != 0 || rep.Latency.Count() != rep.Ops {
				t.Errorf("errors %d samples %q latency samples %d", rep.Errors, rep.ErrorSamples, rep.Latency.Count())
			}
			if rep.Bytes != rep.Ops+rep.CutOff {
				t.Errorf("bytes %d, want every operation's", rep.Bytes)
			}
		})
	}
}

func TestRunCutOffBeforeWindow(t *testing.T) {
	// MaxOps ends the run long before Duration: nothing is cut and Elapsed
	// is the run's real length.
	rep := Run(context.Background(), Spec{Workers: 2, MaxOps: 4, Duration: time.Hour, CutOff: true,
		Op: func(context.Context, int) (int64, error) { return 0, nil }})
	if rep.Ops != 4 || rep.CutOff != 0 || rep.Elapsed >= time.Hour {
		t.Errorf("ops %d cut off %d elapsed %s", rep.Ops, rep.CutOff, rep.Elapsed)
	}
}

func TestRunBadRate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
	}{
		{"no duration", Spec{Rate: 10, MaxOps: 5}},
		{"negative", Spec{Rate: -1, Duration: time.Second}},
		{"nan", Spec{Rate: math.NaN(), Duration: time.Second}},
		{"infinite", Spec{Rate: math.Inf(1), Duration: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.spec.Op = func(context.Context, int) (int64, error) {
				t.Error("op ran")
				return 0, nil
			}
			rep := Run(context.Background(), tt.spec)
			if len(rep.ErrorSamples) != 1 || !strings.HasPrefix(rep.ErrorSamples[0], "spec: ") || rep.Ops != 0 || rep.Offered != 0 {
				t.Errorf("samples %q ops %d offered %d", rep.ErrorSamples, rep.Ops, rep.Offered)
			}
		})
	}
}

func TestRunOpenLoopCancelled(t *testing.T) {
	// Cancelling ctx stops arrivals: the run ends long before its hour.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	rep := Run(ctx, Spec{Rate: 100, Duration: time.Hour, Op: func(context.Context, int) (int64, error) {
		if calls.Add(1) == 3 {
			cancel()
		}
		return 0, nil
	}})
	if rep.Elapsed > time.Minute || rep.Offered != calls.Load() || rep.Ops != calls.Load() || calls.Load() < 3 {
		t.Errorf("elapsed %s offered %d ops %d calls %d", rep.Elapsed, rep.Offered, rep.Ops, calls.Load())
	}
}

func TestReportString(t *testing.T) {
	r := Report{Name: "clone", Workers: 2, Ops: 3, Errors: 1, Elapsed: time.Second, Bytes: 9, Latency: NewHistogram()}
	// The closed-loop format other code logs.
	if got, want := r.String(), "clone: 2 workers, 3 ops, 1 errors in 1s (10800 ops/h), p50 0s p95 0s p99 0s, 9 bytes"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	r.Offered, r.Dropped, r.CutOff = 6, 1, 1
	if got, want := r.String(), "clone: 2 workers, 3 ops, 1 errors, 6 offered, 1 dropped, 1 cut off in 1s (10800 ops/h), p50 0s p95 0s p99 0s, 9 bytes"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
