package sshd

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// gate counts connections that have not authenticated yet, in total and
// per source, so that a flood of idle or slow connections from one place
// cannot take every slot and lock everyone else out until the handshake
// deadline frees them. A connection enters the gate as soon as it is
// accepted and leaves it when authentication completes or the connection
// ends.
type gate struct {
	total, perSource int

	mu       sync.Mutex
	n        int
	bySource map[netip.Prefix]int
}

func newGate(total, perSource int) *gate {
	return &gate{total: total, perSource: perSource, bySource: make(map[netip.Prefix]int)}
}

// pass is one connection's place in the gate. It is used by one
// goroutine at a time: the accept loop, then the connection's own.
type pass struct {
	g      *gate
	source netip.Prefix
	bound  bool
	held   bool
}

// enter takes a slot of the total, or reports false when all are taken.
func (g *gate) enter() (*pass, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= g.total {
		return nil, false
	}
	g.n++
	return &pass{g: g, held: true}, true
}

// bind counts the pass against the source of addr, or reports false
// when that source already holds perSource slots. It is separate from
// enter because behind a trusted proxy the source is only known once the
// PROXY header has been read.
func (p *pass) bind(addr net.Addr) bool {
	g := p.g
	src := sourceOf(addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.bySource[src] >= g.perSource {
		return false
	}
	g.bySource[src]++
	p.source, p.bound = src, true
	return true
}

// release gives the slots back; later calls do nothing.
func (p *pass) release() {
	if p == nil || !p.held {
		return
	}
	p.held = false
	g := p.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if p.bound {
		if g.bySource[p.source]--; g.bySource[p.source] <= 0 {
			delete(g.bySource, p.source)
		}
	}
}

// sourceOf is the key a source is counted under: the IPv4 address, or the
// IPv6 /64, because one IPv6 host is routinely given a whole /64 and
// could otherwise count as 2^64 sources. Addresses that are not TCP (none
// in production) share one key.
func sourceOf(addr net.Addr) netip.Prefix {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip := ta.AddrPort().Addr().Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// quietLog limits a log line that an attacker can trigger at will (one per
// refused connection) to one per interval, counting what it left out.
type quietLog struct {
	every      time.Duration
	last       atomic.Int64 // unix nanoseconds of the last line written
	suppressed atomic.Int64
}

// allow reports whether to write a line now and, if so, how many were
// left out since the previous one.
func (q *quietLog) allow(now time.Time) (bool, int64) {
	last := q.last.Load()
	if now.UnixNano()-last < int64(q.every) || !q.last.CompareAndSwap(last, now.UnixNano()) {
		q.suppressed.Add(1)
		return false, 0
	}
	return true, q.suppressed.Swap(0)
}
