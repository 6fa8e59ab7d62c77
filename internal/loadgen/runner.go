package loadgen

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Op is one operation a worker repeats; worker numbers run from 0 to
// Workers-1 (a push workload uses them to give each worker its own branch).
// It returns the bytes it transferred.
type Op func(ctx context.Context, worker int) (bytes int64, err error)

// Spec describes a run.
type Spec struct {
	Name    string
	Workers int
	// Duration stops workers from starting new operations; operations
	// already running finish (bounded by ctx), so the measured window is
	// slightly longer than Duration and Elapsed says by how much.
	Duration time.Duration
	// MaxOps bounds the number of operations started; 0 means no bound.
	// At least one of Duration and MaxOps must be set.
	MaxOps int64
	Op     Op
}

// Report summarises a run.
type Report struct {
	Name    string
	Workers int
	// Elapsed is from the first start to the last operation's end.
	Elapsed time.Duration
	// Ops counts successful operations, Errors failed ones.
	Ops, Errors int64
	Bytes       int64
	// Latency holds successful operations only: a fast failure must not
	// make a server look quick.
	Latency *Histogram
	// ErrorSamples holds the first few distinct error messages.
	ErrorSamples []string
}

// OpsPerHour is the throughput of successful operations.
func (r Report) OpsPerHour() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Hours()
}

// String is a one-line summary.
func (r Report) String() string {
	return fmt.Sprintf("%s: %d workers, %d ops, %d errors in %s (%.0f ops/h), p50 %s p95 %s p99 %s, %d bytes",
		r.Name, r.Workers, r.Ops, r.Errors, r.Elapsed.Round(time.Millisecond), r.OpsPerHour(),
		r.Latency.Quantile(0.50), r.Latency.Quantile(0.95), r.Latency.Quantile(0.99), r.Bytes)
}

const maxErrorSamples = 5

// Run runs spec.Workers concurrent workers of spec.Op until spec.Duration
// has passed, spec.MaxOps operations have started, or ctx ends.
func Run(ctx context.Context, spec Spec) Report {
	workers := max(spec.Workers, 1)
	rep := Report{Name: spec.Name, Workers: workers, Latency: NewHistogram()}
	if spec.Duration <= 0 && spec.MaxOps <= 0 {
		rep.ErrorSamples = []string{"spec: neither Duration nor MaxOps set"}
		return rep
	}
	start := time.Now()
	var deadline time.Time
	if spec.Duration > 0 {
		deadline = start.Add(spec.Duration)
	}
	var started atomic.Int64
	// more reserves the next operation, so MaxOps is never exceeded.
	more := func() bool {
		if ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return false
		}
		return spec.MaxOps <= 0 || started.Add(1) <= spec.MaxOps
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			h := NewHistogram()
			var ops, errs, nbytes int64
			var samples []string
			for more() {
				t0 := time.Now()
				n, err := spec.Op(ctx, w)
				d := time.Since(t0)
				nbytes += n
				if err != nil {
					errs++
					if len(samples) < maxErrorSamples {
						samples = append(samples, err.Error())
					}
					continue
				}
				ops++
				h.Record(d)
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Ops += ops
			rep.Errors += errs
			rep.Bytes += nbytes
			rep.Latency.Merge(h)
			for _, s := range samples {
				if len(rep.ErrorSamples) < maxErrorSamples && !slices.Contains(rep.ErrorSamples, s) {
					rep.ErrorSamples = append(rep.ErrorSamples, s)
				}
			}
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	return rep
}

// Histogram records durations in log-linear buckets: each power of two of
// microseconds is split into 32 equal buckets, so a quantile is reported
// within about 3% of the true value whatever the scale, in fixed memory.
// The zero value is not usable; call NewHistogram.
type Histogram struct {
	counts []int64
	n      int64
	sum    time.Duration
	max    time.Duration
}

const (
	subBits    = 5 // 32 sub-buckets per power of two
	subBuckets = 1 << subBits
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]int64, (64-subBits+1)*subBuckets)}
}

// bucketOf maps microseconds to a bucket: values below subBuckets map to
// themselves; above, the top subBits+1 significant bits select the bucket.
func bucketOf(us uint64) int {
	if us < subBuckets {
		return int(us)
	}
	exp := bits.Len64(us) - subBits - 1 // how far to shift to keep subBits+1 bits
	mant := us >> exp                   // in [subBuckets, 2*subBuckets)
	return (exp+1)*subBuckets + int(mant-subBuckets)
}

// bucketUpper is the largest value (in microseconds) bucket b holds.
func bucketUpper(b int) uint64 {
	if b < subBuckets {
		return uint64(b)
	}
	exp := b/subBuckets - 1
	mant := uint64(b%subBuckets + subBuckets)
	return (mant+1)<<exp - 1
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d/time.Microsecond))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is the number of samples.
func (h *Histogram) Count() int64 { return h.n }

// Max is the largest sample.
func (h *Histogram) Max() time.Duration { return h.max }

// Mean is the average sample.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the upper bound of the bucket holding the q-th sample
// (0 < q <= 1), capped at the largest sample; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n))) // nearest rank
	rank = min(max(rank, 1), h.n)
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketUpper(b))*time.Microsecond, h.max)
		}
	}
	return h.max
}
