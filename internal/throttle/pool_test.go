package throttle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// waitQueued waits until the pool has n waiters.
func waitQueued(t *testing.T, p *pool, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.state().Queued != n {
		if time.Now().After(deadline) {
			t.Fatalf("queued = %d, want %d", p.state().Queued, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPoolFairAcrossPrincipals(t *testing.T) {
	p := newPool(1, 100, time.Now)
	ctx := context.Background()
	if err := p.acquire(ctx, "holder", 0, time.Minute, 0, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(key string, i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.acquire(ctx, key, 0, time.Minute, 0, nil); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", key, i))
			mu.Unlock()
			p.release(0, 0)
		}()
	}
	// A (a CI agent) queues 20 requests, then B (a developer) one.
	for i := 1; i <= 20; i++ {
		enqueue("A", i)
		waitQueued(t, p, i)
	}
	enqueue("B", 1)
	waitQueued(t, p, 21)

	// B is one behind A's first, whatever A queued.
	p.mu.Lock()
	b := p.queues["B"][0]
	a20 := p.queues["A"][19]
	aheadB, aheadA20 := p.aheadOf(b), p.aheadOf(a20)
	p.mu.Unlock()
	if aheadB != 1 || aheadA20 != 20 {
		t.Errorf("ahead of B: %d, of A's 20th: %d; want 1 and 20", aheadB, aheadA20)
	}

	p.release(0, 0) // the holder leaves; the queue drains one by one
	wg.Wait()
	if len(order) != 21 || order[0] != "A1" || order[1] != "B1" || order[20] != "A20" {
		t.Fatalf("service order %v, want A1 B1 A2 … A20", order)
	}
	if st := p.state(); st.InUse != 0 || st.Queued != 0 || st.Principals != 0 {
		t.Fatalf("pool not empty after drain: %+v", st)
	}
}

func TestPoolRoundRobinThreePrincipals(t *testing.T) {
	p := newPool(1, 100, time.Now)
	ctx := context.Background()
	if err := p.acquire(ctx, "holder", 0, time.Minute, 0, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	n := 0
	for _, key := range []string{"A", "A", "A", "B", "B", "C"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.acquire(ctx, key, 0, time.Minute, 0, nil); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, key)
			mu.Unlock()
			p.release(0, 0)
		}()
		n++
		waitQueued(t, p, n)
	}
	p.release(0, 0)
	wg.Wait()
	if got := fmt.Sprint(order); got != "[A B C A B A]" {
		t.Fatalf("order %s, want [A B C A B A]", got)
	}
}

func TestPoolQueueFull(t *testing.T) {
	p := newPool(1, 2, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := p.acquire(ctx, "a", 0, time.Minute, 0, nil); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { errs <- p.acquire(ctx, "b", 0, time.Minute, 0, nil) }()
		waitQueued(t, p, i+1)
	}
	if err := p.acquire(ctx, "c", 0, time.Minute, 0, nil); !errors.Is(err, errQueueFull) {
		t.Fatalf("third waiter: %v, want queue full", err)
	}
	cancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled waiter: %v", err)
		}
	}
	if st := p.state(); st.Queued != 0 || st.InUse != 1 {
		t.Fatalf("state after cancel: %+v", st)
	}
}

func TestPoolTimeoutAndProgress(t *testing.T) {
	p := newPool(1, 10, time.Now)
	ctx := context.Background()
	if err := p.acquire(ctx, "a", 0, time.Minute, 0, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []int
	err := p.acquire(ctx, "b", 0, 120*time.Millisecond, 20*time.Millisecond, func(ahead int) {
		mu.Lock()
		reports = append(reports, ahead)
		mu.Unlock()
	})
	if !errors.Is(err, errQueueTimeout) {
		t.Fatalf("err = %v, want timeout", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) < 3 || reports[0] != 0 {
		t.Fatalf("progress reports %v, want one at once and more while waiting", reports)
	}
	if st := p.state(); st.Queued != 0 || st.Principals != 0 {
		t.Fatalf("timed-out waiter left behind: %+v", st)
	}
}

func TestPoolRaiseLimitAdmitsWaiters(t *testing.T) {
	p := newPool(1, 10, time.Now)
	ctx := context.Background()
	if err := p.acquire(ctx, "a", 0, time.Minute, 0, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for i := range 2 {
		go func() { done <- p.acquire(ctx, fmt.Sprint("w", i), 0, time.Minute, 0, nil) }()
		waitQueued(t, p, i+1)
	}
	p.setLimit(3)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st := p.state(); st.InUse != 3 {
		t.Fatalf("in use %d, want 3", st.InUse)
	}
	// Cutting the limit below what is in use admits nobody new.
	p.setLimit(1)
	p.release(0, 0)
	if err := p.acquire(ctx, "x", 0, 0, 0, nil); !errors.Is(err, errQueueFull) {
		t.Fatalf("acquire over a cut limit: %v", err)
	}
}

func TestPoolWindowAverage(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	p := newPool(4, 10, clock)
	p.window()
	ctx := context.Background()
	for range 2 {
		if err := p.acquire(ctx, "a", 0, 0, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Second) // 2 tickets for 1 s
	p.release(0, 0)
	now = now.Add(time.Second) // 1 ticket for 1 s
	avg, saturated := p.window()
	if avg != 1.5 || saturated {
		t.Fatalf("window = %v, %v; want 1.5, false", avg, saturated)
	}
}
