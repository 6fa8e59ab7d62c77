package sshd

import (
	"net"
	"testing"
	"time"
)

func tcp(s string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		panic(err)
	}
	return a
}

func TestGate(t *testing.T) {
	g := newGate(3, 2)
	a1, ok1 := g.enter()
	a2, ok2 := g.enter()
	if !ok1 || !ok2 || !a1.bind(tcp("192.0.2.1:1000")) || !a2.bind(tcp("192.0.2.1:1001")) {
		t.Fatal("two connections from one address refused under a per-source bound of 2")
	}
	a3, ok := g.enter()
	if !ok {
		t.Fatal("third connection refused under a total of 3")
	}
	// The same address, another port, the IPv4-mapped form: one source.
	if a3.bind(tcp("192.0.2.1:1002")) || a3.bind(tcp("[::ffff:192.0.2.1]:1003")) {
		t.Error("a third connection from one address passed a per-source bound of 2")
	}
	if !a3.bind(tcp("192.0.2.2:1000")) {
		t.Error("another address was refused")
	}
	if _, ok := g.enter(); ok {
		t.Error("a fourth connection passed a total of 3")
	}
	a1.release()
	a1.release() // twice: no effect
	b, ok := g.enter()
	if !ok || !b.bind(tcp("192.0.2.1:1004")) {
		t.Error("a released slot did not come back")
	}
	for _, p := range []*pass{a2, a3, b} {
		p.release()
	}
	if g.n != 0 || len(g.bySource) != 0 {
		t.Errorf("after every release: %d held, sources %v", g.n, g.bySource)
	}
}

func TestSourceOf(t *testing.T) {
	cases := []struct {
		a, b string
		same bool
	}{
		{"192.0.2.1:1", "192.0.2.1:2", true},
		{"192.0.2.1:1", "192.0.2.2:1", false},
		{"192.0.2.1:1", "[::ffff:192.0.2.1]:1", true},
		// One IPv6 host is given a /64; it is one source.
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:1", true},
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", false},
	}
	for _, c := range cases {
		if got := sourceOf(tcp(c.a)) == sourceOf(tcp(c.b)); got != c.same {
			t.Errorf("%s and %s: same source = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

func TestQuietLog(t *testing.T) {
	q := quietLog{every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	if ok, left := q.allow(t0); !ok || left != 0 {
		t.Fatalf("first line: %v, %d", ok, left)
	}
	for i := range 5 {
		if ok, _ := q.allow(t0.Add(time.Duration(i) * time.Second)); ok {
			t.Fatal("a line within the interval was written")
		}
	}
	if ok, left := q.allow(t0.Add(11 * time.Second)); !ok || left != 5 {
		t.Errorf("after the interval: %v, %d left out; want true, 5", ok, left)
	}
}
