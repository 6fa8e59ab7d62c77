package packcache

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// firstWrite is a client that says when its first bytes arrived.
type firstWrite struct {
	once sync.Once
	got  chan struct{}
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { close(f.got) })
	return len(p), nil
}

// hangUp runs a client for req that hangs up as soon as it has received
// its first bytes, and returns once it is gone.
func (h *harness) hangUp(req *Request, g Generate) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &firstWrite{got: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := h.c.Serve(ctx, req, w, nil, g)
		done <- err
	}()
	select {
	case <-w.got:
	case err := <-done:
		h.t.Fatalf("client ended before any bytes: %v", err)
	case <-time.After(10 * time.Second):
		h.t.Fatal("no bytes reached the client")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		h.t.Fatalf("hung-up client: %v", err)
	}
}

// heldProducer writes a first chunk, then waits for the test (release) or
// for its context to end, which it reports on stopped.
type heldProducer struct {
	release chan struct{}
	stopped chan struct{}
	rest    []byte // written after release
}

func newHeld(rest []byte) *heldProducer {
	return &heldProducer{release: make(chan struct{}), stopped: make(chan struct{}), rest: rest}
}

func (p *heldProducer) generate(ctx context.Context, w io.Writer, _ func(string)) error {
	if _, err := w.Write([]byte("0008NAK\n")); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		close(p.stopped)
		return ctx.Err()
	case <-p.release:
	}
	for off := 0; off < len(p.rest); off += 4096 {
		if _, err := w.Write(p.rest[off:min(off+4096, len(p.rest))]); err != nil {
			close(p.stopped)
			return err
		}
	}
	return nil
}

func (p *heldProducer) awaitStop(t *testing.T) {
	t.Helper()
	select {
	case <-p.stopped:
	case <-time.After(10 * time.Second):
		close(p.release) // let it end, so the test leaves nothing behind
		t.Fatal("the producer nobody follows was not stopped")
	}
}

func (h *harness) abandoned(reason string) float64 {
	return testutil.ToFloat64(h.c.m.abandoned.WithLabelValues(reason))
}

// TestAbandonedUnrequestedProducerStops: the only client of a response
// nobody asked for before hangs up; its git is stopped at once and nothing
// is kept.
func TestAbandonedUnrequestedProducerStops(t *testing.T) {
	h := newHarness(t, nil)
	p := newHeld(nil)
	h.hangUp(clone(1), p.generate)
	p.awaitStop(t)
	h.settle()
	if s := h.c.Stats(); s.Entries != 0 || countFiles(t, h.cfg.Dir) != 0 {
		t.Fatalf("kept %d entries, %d files", s.Entries, countFiles(t, h.cfg.Dir))
	}
	if h.abandoned("unrequested") != 1 {
		t.Fatalf("abandoned{unrequested} = %v", h.abandoned("unrequested"))
	}
	// The next request for it produces afresh.
	payload := randomBytes(10_000)
	got, handled, err := h.serve(clone(1), h.gen(payload, 0, nil))
	if err != nil || !handled || string(got) != string(payload) {
		t.Fatalf("next request: handled=%v err=%v len=%d", handled, err, len(got))
	}
}

// TestAbandonedRequestedProducerFinishes: a response asked for before is
// likely to be asked for again; it is finished and kept after its client
// hangs up.
func TestAbandonedRequestedProducerFinishes(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinOccurrences = 2 })
	if _, handled, _ := h.serve(clone(1), h.gen([]byte("x"), 0, nil)); handled {
		t.Fatal("first sight was cached")
	}
	p := newHeld(randomBytes(100_000))
	h.hangUp(clone(1), p.generate)
	close(p.release)
	h.settle()
	if s := h.c.Stats(); s.Entries != 1 {
		t.Fatalf("entries %d, want the finished response kept", s.Entries)
	}
	got, _, err := h.serve(clone(1), nil)
	if err != nil || len(got) != 8+100_000 {
		t.Fatalf("hit: err=%v len=%d", err, len(got))
	}
	for _, r := range []string{"unrequested", "time", "bytes"} {
		if h.abandoned(r) != 0 {
			t.Fatalf("abandoned{%s} = %v", r, h.abandoned(r))
		}
	}
}

// TestAbandonedSharedProducerFinishes: two clients asked for the same
// response; both hang up, and it is finished all the same.
func TestAbandonedSharedProducerFinishes(t *testing.T) {
	h := newHarness(t, nil)
	p := newHeld(randomBytes(10_000))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		w := &firstWrite{got: make(chan struct{})}
		wg.Go(func() { h.c.Serve(ctx, clone(1), w, nil, p.generate) })
		<-w.got
	}
	if h.lookups(KindPacks, "coalesced") != 1 {
		t.Fatalf("the second client did not follow the first's production")
	}
	cancel()
	wg.Wait()
	close(p.release)
	h.settle()
	if s := h.c.Stats(); s.Entries != 1 {
		t.Fatalf("entries %d, want 1", s.Entries)
	}
}

// TestAbandonedProducerTimeBudget: a response asked for before may run on
// without clients only for Config.AbandonedTimeout.
func TestAbandonedProducerTimeBudget(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinOccurrences = 2; c.AbandonedTimeout = 50 * time.Millisecond })
	h.serve(clone(1), h.gen([]byte("x"), 0, nil))
	p := newHeld(nil)
	h.hangUp(clone(1), p.generate)
	p.awaitStop(t)
	h.settle()
	if h.abandoned("time") != 1 || h.c.Stats().Entries != 0 {
		t.Fatalf("abandoned{time} = %v, entries %d", h.abandoned("time"), h.c.Stats().Entries)
	}
}

// TestAbandonedProducerByteBudget: nor may it write more than
// Config.AbandonedMaxBytes.
func TestAbandonedProducerByteBudget(t *testing.T) {
	const budget = 64 << 10
	h := newHarness(t, func(c *Config) { c.MinOccurrences = 2; c.AbandonedMaxBytes = budget; c.AbandonedTimeout = time.Hour })
	h.serve(clone(1), h.gen([]byte("x"), 0, nil))
	p := newHeld(randomBytes(4 * budget))
	h.hangUp(clone(1), p.generate)
	close(p.release)
	p.awaitStop(t)
	h.settle()
	if h.abandoned("bytes") != 1 || h.c.Stats().Entries != 0 || countFiles(t, h.cfg.Dir) != 0 {
		t.Fatalf("abandoned{bytes} = %v, entries %d", h.abandoned("bytes"), h.c.Stats().Entries)
	}
	if g := testutil.ToFloat64(h.c.m.generated); g > budget+4096+8+1 {
		t.Fatalf("generated %v bytes past a budget of %d", g, budget)
	}
}
