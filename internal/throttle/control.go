package throttle

import (
	"math"
	"time"
)

// law is the adaptive control law; the package comment explains it and why
// it is stable. It is a pure function of the previous limit and one
// sample, so it can be tested without clocks or processes.
type law struct {
	target float64 // CPU utilisation to hold, 0..1
	band   float64 // dead band half-width around target
	min    int     // bounds of the limit
	max    int
	// step caps an increase per interval.
	step int
	// pressureHigh is the PSI "some" share above which the limit never
	// grows, and (for the node's own PSI) shrinks.
	pressureHigh float64
}

// sample is one interval's measurements.
type sample struct {
	Util      float64 // CPU used / (cores × interval)
	InUse     float64 // time-averaged tickets in use over the interval
	Saturated bool    // some request had to queue
	Pressure  float64 // PSI some avg10, 0..1; 0 when unknown
	OwnPSI    bool    // Pressure is this node's own
}

// Reasons a limit changed, for the debug log and the admin state.
const (
	reasonHold     = "hold"
	reasonCPUHigh  = "cpu_high"
	reasonPressure = "pressure"
	reasonCPULow   = "cpu_low"
	reasonIdle     = "not_saturated"
	reasonStarting = "starting" // the first reading only primes the rate
)

// next returns the limit for the coming interval.
func (l law) next(limit int, s sample) (int, string) {
	n := s.InUse
	next, reason := limit, reasonHold
	switch {
	case s.Util > l.target+l.band:
		// Proportional decrease to where the tickets in use would have
		// put utilisation on target, at least one and at most half.
		est := int(math.Floor(n * l.target / s.Util))
		next = min(limit-1, max(limit/2, est))
		reason = reasonCPUHigh
	case s.OwnPSI && s.Pressure > l.pressureHigh:
		// The node's own tasks wait for CPU although utilisation looks
		// acceptable (a quota tighter than the cores it was given):
		// back off by a quarter.
		next = min(limit-1, limit*3/4)
		reason = reasonPressure
	case s.Util < l.target-l.band:
		if !s.Saturated {
			// Nobody waited: the limit is not what holds utilisation
			// down, and raising it would only loosen the bound for a
			// later burst.
			return limit, reasonIdle
		}
		if s.Pressure > l.pressureHigh {
			return limit, reasonPressure
		}
		// Grow to the largest count the linear model keeps inside the
		// band, by at most step.
		grow := limit + l.step
		if s.Util > 0 {
			grow = min(grow, int(math.Floor(max(n, 1)*(l.target+l.band)/s.Util)))
		}
		if grow > limit {
			next, reason = grow, reasonCPULow
		}
	}
	next = max(l.min, min(l.max, next))
	if next == limit {
		reason = reasonHold // pinned at a bound
	}
	return next, reason
}

// The share law's constants: its gain, and the least share of the node's
// cores git keeps however busy the node is, so queued work always moves.
const (
	shareGain = 0.5
	shareMin  = 0.2
)

// nextShare is the law below the ticket floor: the git group's CPU share
// (1 = uncapped) for the coming interval. The caller applies it only
// while the share is below 1 or the ticket limit sits at its floor with
// utilisation above the band.
func (l law) nextShare(share float64, s sample) (float64, string) {
	if share >= 1 {
		if s.Util <= l.target+l.band {
			return 1, reasonHold
		}
		// Entering: cap git at the target itself; the proportional
		// steps below take it from there.
		return max(shareMin, l.target), reasonCPUHigh
	}
	e := l.target - s.Util
	if math.Abs(e) <= l.band/2 {
		return share, reasonHold
	}
	next := max(shareMin, share+shareGain*e)
	if next >= 1 {
		return 1, reasonCPULow
	}
	if e > 0 {
		return next, reasonCPULow
	}
	return next, reasonCPUHigh
}

// cpuCap is the git group as the controller drives it (GitGroup; a fake
// in tests).
type cpuCap interface {
	Share() float64
	SetShare(float64) error
}

// controller samples the sources once per interval and applies the law.
type controller struct {
	law     law
	src     Sources
	limit   int // the CPU law's state, before the memory cap
	primed  bool
	lastCPU time.Duration
	lastAt  time.Time
	last    controlState
	cap     cpuCap // nil: no git group, tickets act alone
}

// controlState is what the admin endpoint shows of the last interval.
type controlState struct {
	At          time.Time
	Util        float64
	InUse       float64
	Saturated   bool
	Pressure    float64
	MemAvail    int64
	MemCap      int // 0: no cap
	CPULimit    int
	Limit       int
	GitShare    float64 // the git group's share of the cores; 0: no group
	CapError    string  // setting the git group's share failed
	Reason      string
	SourceError string
}

func newController(l law, src Sources, start int) *controller {
	return &controller{law: l, src: src, limit: max(l.min, min(l.max, start))}
}

// memReserve is kept free for the node itself (its Go heap, the pack
// cache's buffers) when the memory backstop sizes the ticket count.
const memReserve = 256 << 20

// tick measures the interval that ended at now and returns the new
// limit. avgInUse and saturated come from the pool's window; inUse and
// memPerOp (the mean memory estimate of an operation) size the memory
// backstop.
func (c *controller) tick(now time.Time, avgInUse float64, saturated bool, inUse int, memPerOp int64) controlState {
	st := controlState{At: now, InUse: avgInUse, Saturated: saturated, CPULimit: c.limit, Limit: c.limit, Reason: reasonHold}
	if c.cap != nil {
		st.GitShare = c.cap.Share()
	}
	usage, err := c.src.CPU.Usage()
	if err != nil {
		// Without a measurement the limit stays where it is: failing
		// open or shut would both be guesses.
		st.SourceError = err.Error()
		c.last = st
		return st
	}
	if !c.primed || !now.After(c.lastAt) {
		c.primed, c.lastCPU, c.lastAt = true, usage, now
		st.Reason = reasonStarting
		c.last = st
		return st
	}
	st.Util = (usage - c.lastCPU).Seconds() / (now.Sub(c.lastAt).Seconds() * c.src.Cores)
	c.lastCPU, c.lastAt = usage, now
	s := sample{Util: st.Util, InUse: avgInUse, Saturated: saturated}
	if c.src.Pressure != nil {
		if p, err := c.src.Pressure.Pressure(); err == nil {
			s.Pressure, s.OwnPSI = p, c.src.Pressure.Own()
			st.Pressure = p
		}
	}
	if c.cap != nil && (c.cap.Share() < 1 || (c.limit == c.law.min && s.Util > c.law.target+c.law.band)) {
		// Below the ticket floor the git group's share is the actuator,
		// and the ticket limit waits at the floor until the share is
		// back to 1: one actuator at a time.
		share, reason := c.law.nextShare(c.cap.Share(), s)
		if err := c.cap.SetShare(share); err != nil {
			st.CapError = err.Error()
		} else {
			st.Reason = "git_share_" + reason
		}
	} else {
		c.limit, st.Reason = c.law.next(c.limit, s)
	}
	if c.cap != nil {
		st.GitShare = c.cap.Share()
	}
	st.CPULimit, st.Limit = c.limit, c.limit
	if c.src.Memory != nil && memPerOp > 0 {
		if avail, err := c.src.Memory.Available(); err == nil {
			st.MemAvail = avail
			// What runs already is inside MemAvailable's complement;
			// each further operation needs its estimate. At least one
			// ticket always remains, or nothing could ever run again.
			st.MemCap = max(1, inUse+int(max(0, avail-memReserve)/memPerOp))
			if st.MemCap < st.Limit {
				st.Limit, st.Reason = st.MemCap, "memory"
			}
		}
	}
	c.last = st
	return st
}
