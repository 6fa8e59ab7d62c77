package packcache

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

// refsFiles stands in for a repository's ref files: its digest is
// whatever the test sets.
type refsFiles struct {
	mu     sync.Mutex
	digest string
}

func (r *refsFiles) set(d string) { r.mu.Lock(); r.digest = d; r.mu.Unlock() }

func (r *refsFiles) read(int64) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.digest, nil
}

func (h *harness) down(down bool) {
	h.st.mu.Lock()
	h.st.down = down
	h.st.mu.Unlock()
}

func TestOutageServesOnlyEntriesWhoseRefsAreOnDisk(t *testing.T) {
	refs := &refsFiles{digest: "a"}
	h := newHarness(t, func(c *Config) { c.RefsDigest = refs.read })
	payload := randomBytes(50_000)
	if _, _, err := h.serve(clone(1), h.gen(payload, 0, nil)); err != nil {
		t.Fatal(err)
	}

	h.down(true)
	got, handled, err := h.serve(clone(1), nil)
	if err != nil || !handled || !bytes.Equal(got, payload) {
		t.Fatalf("hit during the outage: handled=%v err=%v equal=%v", handled, err, bytes.Equal(got, payload))
	}

	// A request never answered: no git, Unavailable.
	got, handled, err = h.serve(clone(2), nil)
	if !handled || !problem.Is(err, problem.Unavailable) || len(got) != 0 {
		t.Fatalf("miss during the outage: handled=%v err=%v wrote %d bytes", handled, err, len(got))
	}

	// A push landed on disk (through another node): the entry is stale.
	refs.set("b")
	got, handled, err = h.serve(clone(1), nil)
	if !handled || !problem.Is(err, problem.Unavailable) || len(got) != 0 {
		t.Fatalf("stale entry during the outage: handled=%v err=%v wrote %d bytes", handled, err, len(got))
	}
	refs.set("a")
	if _, handled, err := h.serve(clone(1), nil); !handled || !problem.Is(err, problem.Unavailable) {
		t.Fatalf("a stale entry was kept: handled=%v err=%v", handled, err)
	}
	if h.calls.Load() != 1 {
		t.Fatalf("generate ran %d times, want 1 (none during the outage)", h.calls.Load())
	}

	h.down(false)
	if _, _, err := h.serve(clone(1), h.gen(payload, 0, nil)); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
}

func TestOutageWithoutDigestsDeclines(t *testing.T) {
	h := newHarness(t, nil)
	h.serve(clone(1), h.gen([]byte("response"), 0, nil))
	h.down(true)
	_, handled, err := h.serve(clone(1), nil)
	if handled || err != nil {
		t.Fatalf("without RefsDigest the cache stays out: handled=%v err=%v", handled, err)
	}
}

func TestRefsMovingWhileProducingRecordNoDigest(t *testing.T) {
	refs := &refsFiles{digest: "a"}
	h := newHarness(t, func(c *Config) { c.RefsDigest = refs.read })
	g := func(ctx context.Context, w io.Writer, _ func(string)) error {
		h.calls.Add(1)
		refs.set("b") // the files changed while git ran; the generation did not (yet)
		_, err := w.Write([]byte("response"))
		return err
	}
	h.serve(clone(1), g)
	h.down(true)
	if _, handled, err := h.serve(clone(1), nil); !handled || !problem.Is(err, problem.Unavailable) {
		t.Fatalf("an entry without a trustworthy digest was served: handled=%v err=%v", handled, err)
	}
}
