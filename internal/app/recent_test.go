package app

import (
	"runtime"
	"testing"
	"time"
)

func TestRecentSet(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	r := newRecentSet(30 * time.Second)
	if r.has(1, t0) {
		t.Fatal("empty set has 1")
	}
	r.add(1, t0)
	for _, c := range []struct {
		id   int64
		at   time.Duration
		want bool
	}{
		{1, 0, true},
		{1, 29 * time.Second, true},
		{1, 30 * time.Second, false}, // the queued job may have started
		{2, time.Second, false},
		{1, -time.Second, false}, // a clock step back does not extend the window
	} {
		if got := r.has(c.id, t0.Add(c.at)); got != c.want {
			t.Errorf("has(%d, t0%+v) = %v, want %v", c.id, c.at, got, c.want)
		}
	}
	// Expired ids are swept when something is added a ttl later.
	r.add(2, t0.Add(31*time.Second))
	r.add(3, t0.Add(62*time.Second))
	if _, ok := r.added[1]; ok {
		t.Error("expired id 1 was kept")
	}
	if !r.has(3, t0.Add(62*time.Second)) {
		t.Error("3 was not recorded")
	}
}

func TestPackThreads(t *testing.T) {
	if n := packThreads(float64(runtime.NumCPU())); n != 0 {
		t.Errorf("a node with all %d CPUs: pack.threads=%d, want git's default (0)", runtime.NumCPU(), n)
	}
	if runtime.NumCPU() > 1 {
		if n := packThreads(0.5); n != 1 {
			t.Errorf("a node of half a core: pack.threads=%d, want 1", n)
		}
	}
}
