package throttle

import (
	"context"
	"errors"
	"sync"
	"time"
)

var (
	errQueueFull    = errors.New("queue full")
	errQueueTimeout = errors.New("queue timeout")
)

// pool hands out hosting tickets up to a limit that may change at any time,
// and queues the rest fairly: one FIFO queue per principal, served
// round-robin, so a principal's place in line depends on how many
// principals are waiting, not on how many requests each of them queued.
type pool struct {
	now func() time.Time

	mu       sync.Mutex
	limit    int
	inUse    int
	memInUse int64 // sum of the memory estimates of running operations
	queued   int
	queueMax int
	queues   map[string][]*waiter
	ring     []string // principals with a non-empty queue, in service order
	next     int      // index in ring of the principal served next

	// Window statistics for the controller, reset by window().
	area      float64 // ticket-seconds held since windowAt
	areaAt    time.Time
	windowAt  time.Time
	saturated bool // a request had to queue during the window

	// holdAvg is an exponentially weighted average of how long a ticket
	// is held, for Retry-After hints.
	holdAvg time.Duration
}

type waiter struct {
	key     string
	mem     int64
	ready   chan struct{}
	granted bool
}

func newPool(limit, queueMax int, now func() time.Time) *pool {
	t := now()
	return &pool{now: now, limit: max(1, limit), queueMax: queueMax, queues: make(map[string][]*waiter),
		areaAt: t, windowAt: t}
}

// account adds the ticket-seconds held since the last change; callers hold
// mu and call it before changing inUse.
func (p *pool) account(now time.Time) {
	if d := now.Sub(p.areaAt); d > 0 {
		p.area += float64(p.inUse) * d.Seconds()
	}
	p.areaAt = now
}

// acquire takes a ticket for principal key, waiting at most maxWait. While
// it waits, progress is called at once and then every progressEvery with
// the number of requests that will be served first.
func (p *pool) acquire(ctx context.Context, key string, mem int64, maxWait, progressEvery time.Duration, progress func(ahead int)) error {
	p.mu.Lock()
	if p.inUse < p.limit && p.queued == 0 {
		p.account(p.now())
		p.inUse++
		p.memInUse += mem
		p.mu.Unlock()
		return nil
	}
	p.saturated = true
	if p.queued >= p.queueMax || maxWait <= 0 {
		p.mu.Unlock()
		return errQueueFull
	}
	w := &waiter{key: key, mem: mem, ready: make(chan struct{})}
	if len(p.queues[key]) == 0 {
		p.ring = append(p.ring, key)
	}
	p.queues[key] = append(p.queues[key], w)
	p.queued++
	ahead := p.aheadOf(w)
	p.mu.Unlock()

	if progress != nil {
		progress(ahead)
	}
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	var tick <-chan time.Time
	if progress != nil && progressEvery > 0 {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-w.ready:
			return nil
		case <-tick:
			p.mu.Lock()
			ahead, granted := p.aheadOf(w), w.granted
			p.mu.Unlock()
			if !granted {
				progress(ahead)
			}
		case <-timer.C:
			if p.abandon(w) {
				return nil
			}
			return errQueueTimeout
		case <-ctx.Done():
			if p.abandon(w) {
				// Granted as we gave up: hand the ticket on.
				p.release(mem, 0)
			}
			return ctx.Err()
		}
	}
}

// abandon takes w out of its queue; it reports true when w was granted a
// ticket first, which the caller then owns.
func (p *pool) abandon(w *waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.granted {
		return true
	}
	q := p.queues[w.key]
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	p.queued--
	if len(q) > 0 {
		p.queues[w.key] = q
		return false
	}
	delete(p.queues, w.key)
	for i, k := range p.ring {
		if k == w.key {
			p.ring = append(p.ring[:i], p.ring[i+1:]...)
			if i < p.next {
				p.next--
			}
			break
		}
	}
	if p.next >= len(p.ring) {
		p.next = 0
	}
	return false
}

// release gives a ticket back; held is how long it was held (0: unknown).
func (p *pool) release(mem int64, held time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.account(p.now())
	p.inUse--
	p.memInUse -= mem
	if held > 0 {
		// Weight 1/8: a few dozen operations make the average, one
		// outlier does not.
		if p.holdAvg == 0 {
			p.holdAvg = held
		} else {
			p.holdAvg += (held - p.holdAvg) / 8
		}
	}
	p.dispatch()
}

// dispatch grants tickets to waiters while there is room, one principal
// after the other. Callers hold mu.
func (p *pool) dispatch() {
	for p.inUse < p.limit && len(p.ring) > 0 {
		if p.next >= len(p.ring) {
			p.next = 0
		}
		key := p.ring[p.next]
		q := p.queues[key]
		w := q[0]
		q[0] = nil
		q = q[1:]
		p.queued--
		if len(q) == 0 {
			delete(p.queues, key)
			p.ring = append(p.ring[:p.next], p.ring[p.next+1:]...)
			// next now names the principal after key already.
		} else {
			p.queues[key] = q
			p.next++
		}
		p.account(p.now())
		p.inUse++
		p.memInUse += w.mem
		w.granted = true
		close(w.ready)
	}
}

// aheadOf counts the requests that will be served before w if nothing
// changes: service goes round the ring from next, taking one request per
// principal per round, so a request k-th in its own queue waits for k
// rounds, plus the turn of every principal before its own in the last one.
// Callers hold mu.
func (p *pool) aheadOf(w *waiter) int {
	q := p.queues[w.key]
	k := -1
	for i, x := range q {
		if x == w {
			k = i
			break
		}
	}
	if k < 0 {
		return 0
	}
	n := len(p.ring)
	pos := 0
	for i, key := range p.ring {
		if key == w.key {
			pos = (i - p.next + n) % n
		}
	}
	ahead := k
	for i, key := range p.ring {
		if key == w.key {
			continue
		}
		rel := (i - p.next + n) % n
		turns := k
		if rel < pos {
			turns++
		}
		ahead += min(len(p.queues[key]), turns)
	}
	return ahead
}

// setLimit changes the limit; a raise lets waiters in at once, a cut
// takes effect as tickets come back.
func (p *pool) setLimit(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limit = max(1, n)
	p.dispatch()
}

// window returns the time-averaged tickets in use since the previous call
// and whether any request had to queue, and starts a new window.
func (p *pool) window() (avgInUse float64, saturated bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.account(now)
	if d := now.Sub(p.windowAt).Seconds(); d > 0 {
		avgInUse = p.area / d
	} else {
		avgInUse = float64(p.inUse)
	}
	saturated = p.saturated || p.queued > 0
	p.area, p.windowAt, p.saturated = 0, now, false
	return avgInUse, saturated
}

type poolState struct {
	Limit, InUse, Queued, Principals int
	MemInUse                         int64
	HoldAvg                          time.Duration
}

func (p *pool) state() poolState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return poolState{Limit: p.limit, InUse: p.inUse, Queued: p.queued, Principals: len(p.ring),
		MemInUse: p.memInUse, HoldAvg: p.holdAvg}
}
