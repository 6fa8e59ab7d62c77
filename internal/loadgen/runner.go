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
//
// By default a run is a closed loop: Workers workers each start their next
// operation when the previous one ends, so the load offered is whatever the
// server serves. With Rate set it is an open loop: operations arrive on a
// fixed schedule however slowly the server answers, which is how a storm of
// CI clones behaves and the only way to offer more than the server can
// serve.
type Spec struct {
	Name    string
	Workers int
	// Duration stops workers from starting new operations; operations
	// already running finish (bounded by ctx), so the measured window is
	// slightly longer than Duration and Elapsed says by how much — unless
	// CutOff is set.
	Duration time.Duration
	// MaxOps bounds the number of operations started; 0 means no bound.
	// At least one of Duration and MaxOps must be set.
	MaxOps int64
	Op     Op

	// Rate, when > 0, makes the run an open loop: operation i starts at
	// i/Rate seconds after the run's start, each in its own goroutine,
	// however many are still running. A runner that falls behind starts
	// the overdue operations at once rather than skipping them (but, with
	// CutOff, drops those still overdue at the cut), so the offered load
	// does not depend on the server's response time. Workers
	// then bounds nothing: the worker number passed to Op is the
	// operation's sequence number (counting started operations only)
	// modulo max(Workers, 1). Duration is required; MaxOps still bounds
	// the number started.
	Rate float64
	// MaxInFlight is, with Rate, the most operations running at once; 0
	// means DefaultMaxInFlight. An arrival that finds MaxInFlight
	// operations running is not started and not retried, only counted in
	// Report.Dropped. It guards the load machine, not the server.
	MaxInFlight int
	// CutOff, with Duration, cancels the context of every operation still
	// running when Duration has passed. Such operations count in
	// Report.CutOff, not in Ops or Errors, and Elapsed is exactly
	// Duration, so OpsPerHour is the completions within the window. An
	// operation that returns at or after the cut counts as cut off even if
	// it succeeded (an Op that ignores ctx): it did not complete within
	// the window. Run still waits for every operation to return, so an Op
	// should honour ctx. Without Duration, CutOff does nothing.
	CutOff bool
}

// DefaultMaxInFlight is Spec.MaxInFlight's default. It is far above the
// concurrency one load machine is meant to offer, and only there so that a
// server that stops answering cannot make an open-loop run pile up
// goroutines, connections and buffers without end.
const DefaultMaxInFlight = 1024

// Report summarises a run.
type Report struct {
	Name string
	// Workers is max(Spec.Workers, 1); for an open-loop run it is the
	// range of worker numbers passed to Op, not a concurrency.
	Workers int
	// Elapsed is from the first start to the last operation's end; with
	// Spec.CutOff, from the first start to the cut (Duration) if the run
	// lasted that long.
	Elapsed time.Duration
	// Ops counts successful operations, Errors failed ones.
	Ops, Errors int64
	// Bytes is the sum of what every operation returned, failed and cut
	// off ones included.
	Bytes int64
	// Latency holds successful operations only: a fast failure must not
	// make a server look quick.
	Latency *Histogram
	// ErrorSamples holds the first few distinct error messages.
	ErrorSamples []string
	// Offered counts an open-loop run's arrivals (Spec.Rate) scheduled
	// within the window, started or Dropped; 0 for a closed loop.
	Offered int64
	// Dropped counts arrivals the runner did not start: MaxInFlight
	// operations were running, or (with Spec.CutOff) the runner was so far
	// behind its schedule that the cut had passed. Neither is the
	// server's doing, so they are not Errors.
	Dropped int64
	// CutOff counts operations that returned at or after the cut
	// (Spec.CutOff).
	CutOff int64
}

// OpsPerHour is the throughput of successful operations.
func (r Report) OpsPerHour() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Hours()
}

// String is a one-line summary. Offered, dropped and cut-off counts appear
// only when non-zero, so a closed-loop run's line keeps the format other
// code already logs.
func (r Report) String() string {
	var extra string
	if r.Offered > 0 {
		extra += fmt.Sprintf(", %d offered", r.Offered)
	}
	if r.Dropped > 0 {
		extra += fmt.Sprintf(", %d dropped", r.Dropped)
	}
	if r.CutOff > 0 {
		extra += fmt.Sprintf(", %d cut off", r.CutOff)
	}
	return fmt.Sprintf("%s: %d workers, %d ops, %d errors%s in %s (%.0f ops/h), p50 %s p95 %s p99 %s, %d bytes",
		r.Name, r.Workers, r.Ops, r.Errors, extra, r.Elapsed.Round(time.Millisecond), r.OpsPerHour(),
		r.Latency.Quantile(0.50), r.Latency.Quantile(0.95), r.Latency.Quantile(0.99), r.Bytes)
}

const maxErrorSamples = 5

// Run runs spec.Op until spec.Duration has passed, spec.MaxOps operations
// have started, or ctx ends: from spec.Workers concurrent workers, or at
// spec.Rate arrivals a second. It returns once every operation has
// returned.
func Run(ctx context.Context, spec Spec) Report {
	workers := max(spec.Workers, 1)
	rep := Report{Name: spec.Name, Workers: workers, Latency: NewHistogram()}
	switch {
	case spec.Duration <= 0 && spec.MaxOps <= 0:
		rep.ErrorSamples = []string{"spec: neither Duration nor MaxOps set"}
		return rep
	case spec.Rate != 0 && !(spec.Rate > 0 && !math.IsInf(spec.Rate, 1)):
		// NaN or infinity would be a computed rate gone wrong; running it
		// as a closed loop (or as fast as goroutines start) would hide that.
		rep.ErrorSamples = []string{fmt.Sprintf("spec: Rate %v is not a positive finite number", spec.Rate)}
		return rep
	case spec.Rate > 0 && spec.Duration <= 0:
		rep.ErrorSamples = []string{"spec: Rate set without Duration"}
		return rep
	}
	r := &runner{spec: spec, ctx: ctx, opCtx: ctx, start: time.Now(), workers: workers, total: newTally()}
	if spec.Duration > 0 {
		r.deadline = r.start.Add(spec.Duration)
		if spec.CutOff {
			var cancel context.CancelFunc
			r.opCtx, cancel = context.WithDeadline(ctx, r.deadline)
			defer cancel()
		}
	}
	if spec.Rate > 0 {
		r.openLoop()
	} else {
		r.closedLoop()
	}
	r.wg.Wait()
	rep.Elapsed = time.Since(r.start)
	if r.cuts() && rep.Elapsed > spec.Duration {
		rep.Elapsed = spec.Duration
	}
	t := r.total
	rep.Ops, rep.Errors, rep.CutOff, rep.Bytes = t.ops, t.errs, t.cut, t.bytes
	rep.Latency, rep.ErrorSamples = t.lat, t.samples
	rep.Offered, rep.Dropped = r.offered, r.dropped
	return rep
}

// runner is one Run's state.
type runner struct {
	spec    Spec
	ctx     context.Context // the caller's: ends the run
	opCtx   context.Context // passed to Op: ctx, or ctx cut at deadline
	start   time.Time
	workers int
	// deadline is start+Duration; zero without Duration.
	deadline time.Time

	wg      sync.WaitGroup
	mu      sync.Mutex
	total   *tally // guarded by mu
	offered int64  // open loop; the scheduler's own
	dropped int64
}

func (r *runner) cuts() bool { return r.spec.CutOff && !r.deadline.IsZero() }

// outcome is what one operation did.
type outcome struct {
	bytes   int64
	err     error
	latency time.Duration
	cut     bool // returned at or after the cut
}

// op runs one operation.
func (r *runner) op(worker int) outcome {
	t0 := time.Now()
	n, err := r.spec.Op(r.opCtx, worker)
	end := time.Now()
	// Compared with the deadline, not with whether opCtx has fired: the
	// window ends at start+Duration however late the runtime gets round
	// to cancelling, and both times read the monotonic clock.
	return outcome{bytes: n, err: err, latency: end.Sub(t0), cut: r.cuts() && !end.Before(r.deadline)}
}

// closedLoop starts the workers.
func (r *runner) closedLoop() {
	var started atomic.Int64
	// more reserves the next operation, so MaxOps is never exceeded.
	more := func() bool {
		if r.ctx.Err() != nil || (!r.deadline.IsZero() && !time.Now().Before(r.deadline)) {
			return false
		}
		return r.spec.MaxOps <= 0 || started.Add(1) <= r.spec.MaxOps
	}
	for w := range r.workers {
		r.wg.Go(func() {
			// Each worker tallies on its own and merges once, so workers
			// never contend for the lock between operations.
			t := newTally()
			for more() {
				t.record(r.op(w))
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.total.merge(t)
		})
	}
}

// openLoop starts operations on schedule until the window ends, MaxOps
// have started or ctx ends, and returns without waiting for them.
func (r *runner) openLoop() {
	maxInFlight := int64(r.spec.MaxInFlight)
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	window := r.spec.Duration.Seconds()
	var inFlight atomic.Int64 // incremented here only, so a check then Add cannot overshoot
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var started int64
	for i := int64(0); r.spec.MaxOps <= 0 || started < r.spec.MaxOps; i++ {
		// Each arrival's time is computed from the start, not from the
		// previous one, so rounding and late wake-ups do not accumulate.
		// Comparing in seconds first keeps a huge offset from overflowing
		// a Duration.
		off := float64(i) / r.spec.Rate
		if off >= window {
			return
		}
		if wait := time.Until(r.start.Add(time.Duration(off * float64(time.Second)))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-r.ctx.Done():
				return
			case <-timer.C:
			}
		}
		if r.ctx.Err() != nil {
			return
		}
		r.offered++
		// In-flight first, then the clock: a slot freed by the cut is
		// seen together with the cut having passed, so no operation
		// starts after the cut.
		if inFlight.Load() >= maxInFlight || (r.cuts() && !time.Now().Before(r.deadline)) {
			r.dropped++
			continue
		}
		inFlight.Add(1)
		w := int(started % int64(r.workers))
		started++
		r.wg.Go(func() {
			defer inFlight.Add(-1)
			o := r.op(w)
			// One lock per operation: a tally each would cost a
			// histogram's allocation per arrival.
			r.mu.Lock()
			defer r.mu.Unlock()
			r.total.record(o)
		})
	}
}

// tally accumulates operation outcomes.
type tally struct {
	lat                   *Histogram
	ops, errs, cut, bytes int64
	samples               []string // distinct, at most maxErrorSamples
}

func newTally() *tally { return &tally{lat: NewHistogram()} }

func (t *tally) record(o outcome) {
	t.bytes += o.bytes
	switch {
	case o.cut:
		t.cut++
	case o.err != nil:
		t.errs++
		t.sample(o.err.Error())
	default:
		t.ops++
		t.lat.Record(o.latency)
	}
}

func (t *tally) sample(s string) {
	if len(t.samples) < maxErrorSamples && !slices.Contains(t.samples, s) {
		t.samples = append(t.samples, s)
	}
}

func (t *tally) merge(o *tally) {
	t.ops += o.ops
	t.errs += o.errs
	t.cut += o.cut
	t.bytes += o.bytes
	t.lat.Merge(o.lat)
	for _, s := range o.samples {
		t.sample(s)
	}
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
