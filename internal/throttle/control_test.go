package throttle

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestLawNext(t *testing.T) {
	l := law{target: 0.75, band: 0.05, min: 2, max: 24, step: 2, pressureHigh: 0.8}
	tests := []struct {
		name   string
		limit  int
		s      sample
		want   int
		reason string
	}{
		{"inside band holds", 10, sample{Util: 0.78, InUse: 10, Saturated: true}, 10, reasonHold},
		{"lower edge of band holds", 10, sample{Util: 0.70, InUse: 10, Saturated: true}, 10, reasonHold},
		{"proportional decrease", 10, sample{Util: 1.0, InUse: 10, Saturated: true}, 7, reasonCPUHigh},
		{"decrease at least one", 10, sample{Util: 0.81, InUse: 10}, 9, reasonCPUHigh},
		{"decrease at most half", 20, sample{Util: 1.0, InUse: 2}, 10, reasonCPUHigh},
		{"decrease stops at min", 3, sample{Util: 1.0, InUse: 3}, 2, reasonCPUHigh},
		{"increase within band", 10, sample{Util: 0.6, InUse: 10, Saturated: true}, 12, reasonCPULow},
		{"increase capped by model", 10, sample{Util: 0.68, InUse: 10, Saturated: true}, 11, reasonCPULow},
		{"increase capped by step", 10, sample{Util: 0.1, InUse: 10, Saturated: true}, 12, reasonCPULow},
		{"no increase that would leave the band", 2, sample{Util: 0.6, InUse: 2, Saturated: true}, 2, reasonHold},
		{"no increase without a queue", 10, sample{Util: 0.2, InUse: 3}, 10, reasonIdle},
		{"no increase under machine pressure", 10, sample{Util: 0.5, InUse: 10, Saturated: true, Pressure: 0.9}, 10, reasonPressure},
		{"own pressure decreases", 12, sample{Util: 0.74, InUse: 12, Saturated: true, Pressure: 0.9, OwnPSI: true}, 9, reasonPressure},
		{"machine pressure alone does not decrease", 12, sample{Util: 0.74, InUse: 12, Pressure: 0.9}, 12, reasonHold},
		{"max bound", 24, sample{Util: 0.1, InUse: 24, Saturated: true}, 24, reasonHold},
		{"zero utilisation grows by step", 4, sample{Util: 0, InUse: 4, Saturated: true}, 6, reasonCPULow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := l.next(tt.limit, tt.s)
			if got != tt.want || reason != tt.reason {
				t.Errorf("next(%d, %+v) = %d (%s), want %d (%s)", tt.limit, tt.s, got, reason, tt.want, tt.reason)
			}
		})
	}
}

// fakeCPU is a CPU source a test advances by hand.
type fakeCPU struct {
	used time.Duration
	err  error
}

func (f *fakeCPU) Usage() (time.Duration, error) { return f.used, f.err }
func (f *fakeCPU) Name() string                  { return "fake" }

type fakeMem struct{ avail int64 }

func (f fakeMem) Available() (int64, error) { return f.avail, nil }

// plant simulates a node under a storm of clones: utilisation is
// background + perTicket × tickets in use, tickets in use are
// min(limit, demand), and noise jitters each sample.
type plant struct {
	cores      float64
	background float64
	perTicket  float64
	demand     int
	noise      float64
	rng        *rand.Rand
}

// run drives c for n intervals of 2 s on a fake clock and returns the
// limit and utilisation after each.
func (p *plant) run(c *controller, cpu *fakeCPU, clock *time.Time, n int) (limits []int, utils []float64) {
	const dt = 2 * time.Second
	for range n {
		inUse := min(c.last.Limit, p.demand)
		if c.last.Limit == 0 {
			inUse = min(c.limit, p.demand)
		}
		u := p.background + p.perTicket*float64(inUse)
		if p.noise > 0 {
			u += (p.rng.Float64()*2 - 1) * p.noise
		}
		u = math.Min(1, math.Max(0, u))
		cpu.used += time.Duration(u * p.cores * float64(dt))
		*clock = clock.Add(dt)
		st := c.tick(*clock, float64(inUse), p.demand > inUse, inUse, 0)
		limits = append(limits, st.Limit)
		utils = append(utils, u)
	}
	return limits, utils
}

func newTestController(cores float64, cpu *fakeCPU, clock time.Time) *controller {
	l := law{target: 0.75, band: 0.05, min: int(cores), max: int(12 * cores), step: max(1, int(cores/4)), pressureHigh: 0.8}
	c := newController(l, Sources{CPU: cpu, Cores: cores}, l.min)
	c.tick(clock, 0, false, 0, 0) // prime
	return c
}

func inBand(u float64) bool { return u >= 0.70-1e-9 && u <= 0.80+1e-9 }

func TestControllerFollowsLoad(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	cpu := &fakeCPU{}
	c := newTestController(8, cpu, clock)
	p := &plant{cores: 8, background: 0.05, perTicket: 0.025, demand: 1000}

	// Start at min (8 tickets, 25% CPU): the limit climbs into the band.
	limits, utils := p.run(c, cpu, &clock, 30)
	if u := utils[len(utils)-1]; !inBand(u) {
		t.Fatalf("after warm-up cpu = %.2f (limits %v), want within 0.70..0.80", u, limits)
	}
	for i := 1; i < len(limits); i++ {
		if limits[i] < limits[i-1] {
			t.Fatalf("limit fell during warm-up without overshoot: %v", limits)
		}
	}
	settled := limits[len(limits)-1]

	// Each clone gets twice as expensive: CPU rises, the limit falls and
	// CPU returns to the band.
	p.perTicket *= 2
	limits, utils = p.run(c, cpu, &clock, 10)
	if limits[len(limits)-1] >= settled {
		t.Fatalf("cpu rose but limit went %d -> %v", settled, limits)
	}
	if u := utils[len(utils)-1]; !inBand(u) {
		t.Fatalf("after the rise cpu = %.2f (limits %v)", u, limits)
	}
	high := limits[len(limits)-1]

	// Clones get cheap: CPU falls, the limit rises and CPU returns.
	p.perTicket /= 4
	limits, utils = p.run(c, cpu, &clock, 40)
	if limits[len(limits)-1] <= high {
		t.Fatalf("cpu fell but limit went %d -> %v", high, limits)
	}
	if u := utils[len(utils)-1]; !inBand(u) {
		t.Fatalf("after the fall cpu = %.2f (limits %v)", u, limits)
	}
}

func TestControllerSteadyLoadDoesNotOscillate(t *testing.T) {
	tests := []struct {
		name string
		p    plant
	}{
		// Fine-grained tickets with noise just inside the dead band.
		{"noisy at target", plant{cores: 8, background: 0.05, perTicket: 0.025, demand: 1000, noise: 0.04}},
		// Coarse tickets (2 cores, each clone 0.3 of the node): no
		// count is inside the band; the limit must still settle.
		{"coarse quantum", plant{cores: 2, perTicket: 0.3, demand: 1000}},
		// Demand below the limit: nothing queues, nothing moves.
		{"light load", plant{cores: 4, perTicket: 0.05, demand: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Unix(1_700_000_000, 0)
			cpu := &fakeCPU{}
			c := newTestController(tt.p.cores, cpu, clock)
			p := tt.p
			p.rng = rand.New(rand.NewPCG(1, 2))
			p.run(c, cpu, &clock, 40) // settle
			limits, utils := p.run(c, cpu, &clock, 200)
			changes := 0
			for i := 1; i < len(limits); i++ {
				if limits[i] != limits[i-1] {
					changes++
				}
			}
			if changes > 0 {
				t.Errorf("limit changed %d times at steady load: %v", changes, limits)
			}
			for _, u := range utils {
				if u > 0.80+p.noise+1e-9 {
					t.Errorf("cpu %.2f above the band at steady load", u)
					break
				}
			}
		})
	}
}

func TestControllerMemoryBackstop(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	cpu := &fakeCPU{}
	l := law{target: 0.75, band: 0.05, min: 4, max: 48, step: 1, pressureHigh: 0.8}
	c := newController(l, Sources{CPU: cpu, Cores: 4, Memory: fakeMem{avail: memReserve + 3*(100<<20)}}, 20)
	c.tick(clock, 0, false, 0, 0)
	clock = clock.Add(2 * time.Second)
	cpu.used += time.Duration(0.75 * 4 * float64(2*time.Second))
	// 5 running, room for 3 more of 100 MB each: 8, below both the CPU
	// limit (20) and the minimum (4 is not a floor for memory).
	st := c.tick(clock, 5, true, 5, 100<<20)
	if st.Limit != 8 || st.CPULimit != 20 || st.Reason != "memory" {
		t.Fatalf("limit %d cpu limit %d reason %s, want 8, 20, memory", st.Limit, st.CPULimit, st.Reason)
	}
	// No memory at all still leaves one ticket.
	c.src.Memory = fakeMem{avail: 0}
	clock = clock.Add(2 * time.Second)
	cpu.used += time.Duration(0.75 * 4 * float64(2*time.Second))
	if st := c.tick(clock, 0, true, 0, 100<<20); st.Limit != 1 {
		t.Fatalf("limit %d with no memory, want 1", st.Limit)
	}
}

func TestControllerSourceErrorHolds(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	cpu := &fakeCPU{}
	c := newTestController(4, cpu, clock)
	c.limit = 10
	cpu.err = errors.New("gone")
	clock = clock.Add(2 * time.Second)
	st := c.tick(clock, 10, true, 10, 0)
	if st.Limit != 10 || st.SourceError == "" {
		t.Fatalf("limit %d error %q, want 10 and an error", st.Limit, st.SourceError)
	}
}

func TestLawNextShare(t *testing.T) {
	l := law{target: 0.75, band: 0.05, min: 1, max: 12, step: 1, pressureHigh: 0.8}
	tests := []struct {
		name   string
		share  float64
		util   float64
		want   float64
		reason string
	}{
		{"uncapped inside band stays uncapped", 1, 0.79, 1, reasonHold},
		{"entering caps at the target", 1, 0.97, 0.75, reasonCPUHigh},
		{"proportional decrease", 0.75, 0.95, 0.65, reasonCPUHigh},
		{"proportional increase", 0.5, 0.55, 0.6, reasonCPULow},
		{"half band holds", 0.6, 0.77, 0.6, reasonHold},
		{"floor", 0.25, 1.0, shareMin, reasonCPUHigh},
		{"back to uncapped", 0.9, 0.3, 1, reasonCPULow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := l.nextShare(tt.share, sample{Util: tt.util})
			if math.Abs(got-tt.want) > 1e-9 || reason != tt.reason {
				t.Errorf("nextShare(%v, %v) = %v (%s), want %v (%s)", tt.share, tt.util, got, reason, tt.want, tt.reason)
			}
		})
	}
}

// fakeCap is a git group the controller drives in tests.
type fakeCap struct {
	share float64
	err   error
	sets  int
}

func (f *fakeCap) Share() float64 { return f.share }
func (f *fakeCap) SetShare(s float64) error {
	if f.err != nil {
		return f.err
	}
	f.sets++
	f.share = min(1, s)
	return nil
}

// cappedPlant is a node of one core under a clone storm where a single
// clone keeps the core busy: git's CPU is min(perTicket × tickets, the
// group's share), the node's own work (proxying the pack) costs
// overhead × git's CPU, and background is the rest (REST, cache hits).
type cappedPlant struct {
	background, perTicket, overhead, noise float64
	demand                                 int
	rng                                    *rand.Rand
}

func (p *cappedPlant) run(c *controller, gc *fakeCap, cpu *fakeCPU, clock *time.Time, n int) (limits []int, shares, utils []float64) {
	const dt = 2 * time.Second
	for range n {
		inUse := min(c.limit, p.demand)
		git := math.Min(p.perTicket*float64(inUse), gc.share)
		u := p.background + git*(1+p.overhead)
		if p.noise > 0 {
			u += (p.rng.Float64()*2 - 1) * p.noise
		}
		u = math.Min(1, math.Max(0, u))
		cpu.used += time.Duration(u * float64(dt))
		*clock = clock.Add(dt)
		st := c.tick(*clock, float64(inUse), p.demand > inUse, inUse, 0)
		limits, shares, utils = append(limits, st.Limit), append(shares, st.GitShare), append(utils, u)
	}
	return limits, shares, utils
}

func TestControllerShareBelowTicketFloor(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	cpu := &fakeCPU{}
	gc := &fakeCap{share: 1}
	c := newTestController(1, cpu, clock)
	c.cap = gc
	p := &cappedPlant{background: 0.03, perTicket: 0.85, overhead: 0.12, demand: 100}

	// One clone alone saturates the node: the ticket limit is at its
	// floor of one, and the share takes over and brings utilisation into
	// the band, each step closer than the last (no overshoot).
	limits, shares, utils := p.run(c, gc, cpu, &clock, 12)
	for i, l := range limits {
		if l != 1 {
			t.Fatalf("interval %d: limit %d, want the floor 1 while the share acts (%v)", i, l, limits)
		}
	}
	if u := utils[len(utils)-1]; !inBand(u) {
		t.Fatalf("cpu %.3f after 12 intervals, want 0.70..0.80; shares %.3f utils %.3f", u, shares, utils)
	}
	for i := 2; i < len(utils); i++ {
		if math.Abs(utils[i]-0.75) > math.Abs(utils[i-1]-0.75)+1e-9 {
			t.Fatalf("utilisation moved away from the target at interval %d: %.3f", i, utils)
		}
		if (utils[i]-0.75)*(utils[1]-0.75) < -1e-9 && !inBand(utils[i]) {
			t.Fatalf("overshoot at interval %d: %.3f", i, utils)
		}
	}

	// Steady storm with noise just inside the share's dead band: the
	// share settles and stays.
	p.noise, p.rng = 0.02, rand.New(rand.NewPCG(3, 4))
	_, shares, utils = p.run(c, gc, cpu, &clock, 100)
	changes := 0
	for i := 1; i < len(shares); i++ {
		if shares[i] != shares[i-1] {
			changes++
		}
	}
	if changes > 5 {
		t.Errorf("share changed %d times in 100 steady intervals: %.3f", changes, shares)
	}
	mean := 0.0
	for _, u := range utils {
		mean += u / float64(len(utils))
	}
	if !inBand(mean) {
		t.Errorf("mean cpu %.3f at steady storm, want 0.70..0.80", mean)
	}

	// The storm ends: the share returns to 1 first, and only then may
	// the ticket law move again.
	p.noise, p.demand = 0, 0
	limits, shares, _ = p.run(c, gc, cpu, &clock, 6)
	if shares[len(shares)-1] != 1 {
		t.Fatalf("share %.3f after the storm, want 1 (%v)", shares[len(shares)-1], shares)
	}
	for i := range limits {
		if shares[i] < 1 && limits[i] != 1 {
			t.Fatalf("limit moved to %d while the share was %.2f", limits[i], shares[i])
		}
	}

	// A heavier REST load on top: git is held down, never below its
	// floor share.
	p.demand, p.background = 100, 0.7
	_, shares, _ = p.run(c, gc, cpu, &clock, 20)
	if s := shares[len(shares)-1]; s != shareMin {
		t.Errorf("share %.3f with the node busy on its own, want the floor %v", s, shareMin)
	}
}

func TestControllerShareNotAboveFloor(t *testing.T) {
	// Eight cores, each clone a small part of the node: tickets alone
	// hold the band, and the share is never touched.
	clock := time.Unix(1_700_000_000, 0)
	cpu := &fakeCPU{}
	gc := &fakeCap{share: 1}
	c := newTestController(8, cpu, clock)
	c.cap = gc
	p := &plant{cores: 8, background: 0.05, perTicket: 0.025, demand: 1000}
	_, utils := p.run(c, cpu, &clock, 30)
	if gc.sets != 0 || gc.share != 1 {
		t.Errorf("share set %d times (now %.2f) though tickets had room", gc.sets, gc.share)
	}
	if u := utils[len(utils)-1]; !inBand(u) {
		t.Errorf("cpu %.2f, want within the band", u)
	}
}

func TestControllerShareErrorReported(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	cpu := &fakeCPU{}
	gc := &fakeCap{share: 1, err: errors.New("read-only cgroup")}
	c := newTestController(1, cpu, clock)
	c.cap = gc
	cpu.used += 2 * time.Second // fully busy
	st := c.tick(clock.Add(2*time.Second), 1, true, 1, 0)
	if st.CapError == "" || st.Limit != 1 || st.GitShare != 1 {
		t.Errorf("state %+v, want the cap error, limit 1, share 1", st)
	}
}
