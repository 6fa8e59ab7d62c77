package packcache

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// fakeStore serves RepoState from memory.
type fakeStore struct {
	store.Store
	mu    sync.Mutex
	state store.RepoState
	down  bool // answer Unavailable, as during a database outage
}

func (f *fakeStore) RepoState(context.Context, int64) (store.RepoState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return store.RepoState{}, problem.New(problem.Unavailable, "database unavailable")
	}
	return f.state, nil
}

func (f *fakeStore) set(gen int64, pending int) {
	f.mu.Lock()
	f.state = store.RepoState{Generation: gen, Pending: pending}
	f.mu.Unlock()
}

type harness struct {
	t     *testing.T
	c     *Cache
	st    *fakeStore
	reg   *prometheus.Registry
	cfg   Config
	calls atomic.Int64
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	cfg := Config{
		Dir: t.TempDir(), Packs: true, Refs: true, MaxBytes: 1 << 30,
		TTL: time.Hour, MinOccurrences: 1, GitIdentity: "test",
		Statfs: func(string) (uint64, uint64, error) { return 100 << 30, 50 << 30, nil },
	}
	if mod != nil {
		mod(&cfg)
	}
	h := &harness{t: t, st: &fakeStore{state: store.RepoState{Generation: 1}}, cfg: cfg}
	h.open()
	return h
}

func (h *harness) open() {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	c, err := New(h.cfg, h.st, h.reg, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.c = c
	h.t.Cleanup(func() { c.Close() })
}

func (h *harness) reopen() {
	h.t.Helper()
	h.c.Close()
	h.open()
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// clone is a v0 clone request for a commit id derived from n.
func clone(n int) *Request {
	oid := fmt.Sprintf("%040x", n+1)
	return request(pkt("want "+oid+" side-band-64k ofs-delta agent=git/2.39.5\n") + "0000" + pkt("done\n"))
}

// request is a v0 request of repository 7, parsed as hosting parses it.
func request(body string) *Request {
	req := &Request{RepoID: 7, Body: []byte(body)}
	req.Parsed, _ = pktline.ParseUploadRequest(strings.NewReader(body), 0, int64(len(body))+1)
	return req
}

// gen returns a Generate writing payload in chunks, pausing between them.
func (h *harness) gen(payload []byte, pause time.Duration, fail error) Generate {
	return func(ctx context.Context, w io.Writer, _ func(string)) error {
		h.calls.Add(1)
		for off := 0; off < len(payload); off += 4096 {
			if _, err := w.Write(payload[off:min(off+4096, len(payload))]); err != nil {
				return err
			}
			if pause > 0 {
				time.Sleep(pause)
			}
		}
		return fail
	}
}

// serve runs one request and waits for its producer to have kept or
// dropped the entry (clients are released before that). A nil g means a
// hit is expected.
func (h *harness) serve(req *Request, g Generate) ([]byte, bool, error) {
	h.t.Helper()
	if g == nil {
		g = func(context.Context, io.Writer, func(string)) error {
			h.t.Error("generate called where a hit was expected")
			return errors.New("unexpected miss")
		}
	}
	var buf bytes.Buffer
	handled, err := h.c.Serve(context.Background(), req, &buf, nil, g)
	h.settle()
	return buf.Bytes(), handled, err
}

// settle waits for every producer to be done with its entry: out of the
// index, and its file renamed or, for a response not kept, removed (which
// the producer does after the entry left the index).
func (h *harness) settle() {
	h.t.Helper()
	wait.For(h.t, "no production in progress", 10*time.Second, func() bool {
		if h.c.Stats().InProgress != 0 {
			return false
		}
		for _, f := range cacheFiles(h.t, h.cfg.Dir) {
			if strings.HasPrefix(filepath.Base(f), tmpPrefix) {
				return false
			}
		}
		return true
	})
}

func (h *harness) lookups(kind, result string) float64 {
	return testutil.ToFloat64(h.c.m.lookups.WithLabelValues(kind, result))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestMissThenHit(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(100_000)
	got, handled, err := h.serve(clone(1), h.gen(payload, 0, nil))
	if err != nil || !handled || !bytes.Equal(got, payload) {
		t.Fatalf("miss: handled=%v err=%v equal=%v", handled, err, bytes.Equal(got, payload))
	}
	got, handled, err = h.serve(clone(1), h.gen([]byte("other"), 0, nil))
	if err != nil || !handled || !bytes.Equal(got, payload) {
		t.Fatalf("hit: handled=%v err=%v equal=%v", handled, err, bytes.Equal(got, payload))
	}
	if h.calls.Load() != 1 {
		t.Fatalf("generate ran %d times, want 1", h.calls.Load())
	}
	if h.lookups(KindPacks, "miss") != 1 || h.lookups(KindPacks, "hit") != 1 {
		t.Fatalf("lookups miss=%v hit=%v", h.lookups(KindPacks, "miss"), h.lookups(KindPacks, "hit"))
	}
	st := h.c.Stats()
	if st.Entries != 1 || st.DiskBytes != int64(len(payload))+headerSize+trailerSize {
		t.Fatalf("stats %+v", st)
	}
	if testutil.ToFloat64(h.c.m.generated) != float64(len(payload)) {
		t.Fatalf("bytes generated %v", testutil.ToFloat64(h.c.m.generated))
	}
}

func TestKeyCoversRequestAndState(t *testing.T) {
	h := newHarness(t, nil)
	payload := []byte("response")
	h.serve(clone(1), h.gen(payload, 0, nil))
	tests := []struct {
		name   string
		req    func() *Request
		before func()
	}{
		{"other want", func() *Request { return clone(2) }, nil},
		{"other repository", func() *Request { r := clone(1); r.RepoID = 8; return r }, nil},
		{"protocol", func() *Request { r := clone(1); r.Protocol = "version=1"; return r }, nil},
		{"generation", func() *Request { return clone(1) }, func() { h.st.set(2, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			before := h.calls.Load()
			if _, handled, err := h.serve(tt.req(), h.gen(payload, 0, nil)); !handled || err != nil {
				t.Fatalf("handled=%v err=%v", handled, err)
			}
			if h.calls.Load() != before+1 {
				t.Fatal("served from an entry of another key")
			}
		})
	}
	// The agent is not part of the key: another git version shares it
	// (same length, so the pkt-line header stays right).
	r := request(strings.Replace(string(clone(1).Body), "agent=git/2.39.5", "agent=git/2.45.0", 1))
	before := h.calls.Load()
	h.serve(r, h.gen(payload, 0, nil))
	if h.calls.Load() != before {
		t.Fatal("a different agent missed")
	}
}

func TestBypass(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		req  *Request
		prep func(h *harness)
	}{
		{"pending ref transaction", nil, clone(1), func(h *harness) { h.st.set(3, 1) }},
		{"packs off", func(c *Config) { c.Packs = false }, clone(1), nil},
		{"unparsable body", nil, request("garbage"), nil},
		{"trailing bytes", nil, func() *Request { r := clone(1); r.Body = append(r.Body, "0000"...); return r }(), nil},
		{"free space below floor", func(c *Config) {
			c.MinFreeBytes = 1 << 30
			c.Statfs = func(string) (uint64, uint64, error) { return 100 << 30, 512 << 20, nil }
		}, clone(1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.mod)
			if tt.prep != nil {
				tt.prep(h)
			}
			for range 2 {
				out, handled, err := h.serve(tt.req, h.gen([]byte("x"), 0, nil))
				if handled || err != nil || len(out) != 0 {
					t.Fatalf("handled=%v err=%v out=%q", handled, err, out)
				}
			}
			if h.calls.Load() != 0 || h.c.Stats().Entries != 0 {
				t.Fatalf("calls=%d entries=%d", h.calls.Load(), h.c.Stats().Entries)
			}
		})
	}
}

func TestFreeSpaceFloorResumes(t *testing.T) {
	var free atomic.Uint64
	free.Store(100 << 20)
	h := newHarness(t, func(c *Config) {
		c.MinFreeBytes = 1 << 30
		c.Statfs = func(string) (uint64, uint64, error) { return 100 << 30, free.Load(), nil }
	})
	if _, handled, _ := h.serve(clone(1), h.gen([]byte("x"), 0, nil)); handled {
		t.Fatal("cached below the floor")
	}
	if h.lookups(KindPacks, "bypass") != 1 {
		t.Fatalf("bypass count %v", h.lookups(KindPacks, "bypass"))
	}
	free.Store(2 << 30)
	if _, handled, _ := h.serve(clone(1), h.gen([]byte("x"), 0, nil)); !handled {
		t.Fatal("not caching above the floor")
	}
}

func TestStaleProductionNotKept(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(50_000)
	g := func(ctx context.Context, w io.Writer, _ func(string)) error {
		h.calls.Add(1)
		w.Write(payload[:1000])
		h.st.set(2, 1) // a push begins while git runs
		_, err := w.Write(payload[1000:])
		return err
	}
	got, handled, err := h.serve(clone(1), g)
	if !handled || err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("waiting client not served: handled=%v err=%v", handled, err)
	}
	h.st.set(1, 0) // not realistic, but proves nothing was stored under the old key
	h.serve(clone(1), g)
	if h.calls.Load() != 2 {
		t.Fatalf("stale entry was kept: generate ran %d times", h.calls.Load())
	}
	h.reopen()
	if h.c.Stats().Entries != 0 {
		// The second production was stale too (it moved the state again).
		t.Fatalf("entries on disk: %d", h.c.Stats().Entries)
	}
	assertNoTempFiles(t, h.cfg.Dir)
}

func TestSingleFlight(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(400_000)
	const clients = 50
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]byte, clients)
	errs := make([]error, clients)
	for i := range clients {
		wg.Go(func() {
			<-start
			var buf bytes.Buffer
			_, errs[i] = h.c.Serve(context.Background(), clone(1), &buf, nil, h.gen(payload, time.Millisecond, nil))
			results[i] = buf.Bytes()
		})
	}
	close(start)
	wg.Wait()
	for i := range clients {
		if errs[i] != nil || !bytes.Equal(results[i], payload) {
			t.Fatalf("client %d: err=%v len=%d", i, errs[i], len(results[i]))
		}
	}
	if h.calls.Load() != 1 {
		t.Fatalf("generate ran %d times for %d identical requests", h.calls.Load(), clients)
	}
	if got := h.lookups(KindPacks, "coalesced") + h.lookups(KindPacks, "hit"); got != clients-1 {
		t.Fatalf("coalesced+hit = %v", got)
	}
}

func TestProducerFailureReachesEveryReader(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(100_000)
	boom := errors.New("git died")
	var wg sync.WaitGroup
	errs := make([]error, 5)
	release := make(chan struct{})
	g := func(ctx context.Context, w io.Writer, _ func(string)) error {
		h.calls.Add(1)
		w.Write(payload[:50_000])
		<-release
		return boom
	}
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = h.c.Serve(context.Background(), clone(1), io.Discard, nil, g)
		})
	}
	wait.For(t, "the condition", 10*time.Second, func() bool { return h.lookups(KindPacks, "coalesced")+h.lookups(KindPacks, "miss") == 5 })
	close(release)
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Fatalf("reader %d: err=%v, want the producer's error", i, err)
		}
	}
	if h.c.Stats().Entries != 0 {
		t.Fatal("failed entry kept")
	}
	assertNoTempFiles(t, h.cfg.Dir)
	// The next request produces afresh.
	got, handled, err := h.serve(clone(1), h.gen(payload, 0, nil))
	if !handled || err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("after failure: handled=%v err=%v", handled, err)
	}
}

// failingWriter is a client that hangs up after n bytes.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestClientHangUpLeavesOthers(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(200_000)
	g := h.gen(payload, time.Millisecond, nil)
	var wg sync.WaitGroup
	var good bytes.Buffer
	var goodErr, badErr error
	ctx, cancel := context.WithCancel(context.Background())
	wg.Go(func() { _, badErr = h.c.Serve(ctx, clone(1), &failingWriter{n: 10_000}, nil, g) })
	wait.For(t, "the condition", 10*time.Second, func() bool { return h.calls.Load() == 1 })
	wg.Go(func() { _, goodErr = h.c.Serve(context.Background(), clone(1), &good, nil, g) })
	wg.Wait()
	cancel()
	h.settle()
	if badErr == nil {
		t.Fatal("hung-up client saw no error")
	}
	if goodErr != nil || !bytes.Equal(good.Bytes(), payload) {
		t.Fatalf("other client: err=%v len=%d", goodErr, good.Len())
	}
	if h.c.Stats().Entries != 1 {
		t.Fatal("entry not kept after the first client hung up")
	}
}

// slowWriter accepts rate bytes per second.
type slowWriter struct {
	rate int
	n    atomic.Int64
}

func (s *slowWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += s.rate / 100 {
		end := min(off+s.rate/100, len(p))
		time.Sleep(10 * time.Millisecond)
		s.n.Add(int64(end - off))
	}
	return len(p), nil
}

func TestSlowReaderDoesNotHoldProducer(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(2 << 20) // two seconds at 1 MB/s
	var producedAt time.Time
	var mu sync.Mutex
	g := func(ctx context.Context, w io.Writer, _ func(string)) error {
		err := h.gen(payload, 0, nil)(ctx, w, nil)
		mu.Lock()
		producedAt = time.Now()
		mu.Unlock()
		return err
	}
	w := &slowWriter{rate: 1 << 20}
	start := time.Now()
	if _, err := h.c.Serve(context.Background(), clone(1), w, nil, g); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	produced := producedAt.Sub(start)
	mu.Unlock()
	total := time.Since(start)
	if produced > total/2 {
		t.Fatalf("producer finished after %v of the reader's %v", produced, total)
	}
	if w.n.Load() != int64(len(payload)) {
		t.Fatalf("reader got %d bytes", w.n.Load())
	}
}

func TestEvictionUnderBudget(t *testing.T) {
	const size = 10_000
	h := newHarness(t, func(c *Config) { c.MaxBytes = 3 * (size + headerSize + trailerSize) })
	for i := range 3 {
		h.serve(clone(i), h.gen(randomBytes(size), 0, nil))
	}
	h.serve(clone(0), nil) // touch 0: 1 is now the least recently used
	h.serve(clone(3), h.gen(randomBytes(size), 0, nil))
	st := h.c.Stats()
	if st.Entries != 3 || st.DiskBytes > h.cfg.MaxBytes || st.Evictions["budget"] != 1 {
		t.Fatalf("stats %+v", st)
	}
	before := h.calls.Load()
	for _, i := range []int{0, 2, 3} {
		if _, handled, _ := h.serve(clone(i), h.gen([]byte("x"), 0, nil)); !handled {
			t.Fatalf("entry %d gone", i)
		}
	}
	if h.calls.Load() != before {
		t.Fatal("a recently used entry was evicted")
	}
	h.serve(clone(1), h.gen(randomBytes(size), 0, nil))
	if h.calls.Load() != before+1 {
		t.Fatal("the least recently used entry was not evicted")
	}
	wait.For(t, "the condition", 10*time.Second, func() bool { return countFiles(t, h.cfg.Dir) == 3 })
}

func TestTTL(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.TTL = time.Minute })
	now := time.Now()
	h.c.mu.Lock()
	h.c.now = func() time.Time { return now }
	h.c.mu.Unlock()
	h.serve(clone(1), h.gen([]byte("old"), 0, nil))
	now = now.Add(2 * time.Minute)
	got, _, _ := h.serve(clone(1), h.gen([]byte("new"), 0, nil))
	if string(got) != "new" || h.c.Stats().Evictions["ttl"] != 1 {
		t.Fatalf("got %q, stats %+v", got, h.c.Stats())
	}
	now = now.Add(2 * time.Minute)
	h.c.expire()
	if h.c.Stats().Entries != 0 || countFiles(t, h.cfg.Dir) != 0 {
		t.Fatal("janitor left an expired entry")
	}
}

func TestMinOccurrences(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinOccurrences = 2 })
	if _, handled, _ := h.serve(clone(1), h.gen([]byte("a"), 0, nil)); handled {
		t.Fatal("cached on first sight")
	}
	if _, handled, _ := h.serve(clone(1), h.gen([]byte("a"), 0, nil)); !handled {
		t.Fatal("not cached on second sight")
	}
	if got, handled, _ := h.serve(clone(1), nil); !handled || string(got) != "a" {
		t.Fatal("no hit on third sight")
	}
}

func TestRestartWarm(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(30_000)
	h.serve(clone(1), h.gen(payload, 0, nil))
	h.serve(clone(2), h.gen(payload[:100], 0, nil))
	// Leftovers of a crash: a temporary file and a stray file.
	os.WriteFile(filepath.Join(h.cfg.Dir, "00", tmpPrefix+"123"), []byte("partial"), 0o600)
	os.MkdirAll(filepath.Join(h.cfg.Dir, "ff"), 0o750)
	os.WriteFile(filepath.Join(h.cfg.Dir, "ff", "junk"), []byte("junk"), 0o600)
	h.reopen()
	if st := h.c.Stats(); st.Entries != 2 {
		t.Fatalf("stats after restart %+v", st)
	}
	got, handled, err := h.serve(clone(1), nil)
	if !handled || err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("warm hit: handled=%v err=%v", handled, err)
	}
	if countFiles(t, h.cfg.Dir) != 2 {
		t.Fatal("orphans not cleaned")
	}
}

func TestCorruptEntries(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, path string)
		atStart bool // detected by the scan rather than at first hit
	}{
		{"flipped byte", func(t *testing.T, p string) {
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			defer f.Close()
			b := make([]byte, 1)
			f.ReadAt(b, headerSize+500)
			b[0] ^= 0xff
			f.WriteAt(b, headerSize+500)
		}, false},
		{"truncated", func(t *testing.T, p string) { os.Truncate(p, headerSize+500) }, true},
		{"bad header", func(t *testing.T, p string) {
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			defer f.Close()
			f.WriteAt([]byte("XXXX"), 0)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			payload := randomBytes(5000)
			h.serve(clone(1), h.gen(payload, 0, nil))
			h.c.Close()
			tt.corrupt(t, onlyFile(t, h.cfg.Dir))
			h.open()
			if got := h.c.Stats().Entries; got != map[bool]int{true: 0, false: 1}[tt.atStart] {
				t.Fatalf("entries after scan: %d", got)
			}
			if !tt.atStart {
				// Found at the first hit: git answers instead.
				out, handled, err := h.serve(clone(1), nil)
				if handled || err != nil || len(out) != 0 {
					t.Fatalf("corrupt entry served: handled=%v err=%v", handled, err)
				}
			}
			if countFiles(t, h.cfg.Dir) != 0 || h.c.Stats().Entries != 0 {
				t.Fatal("corrupt entry kept")
			}
			if h.c.Stats().Evictions["corrupt"] != map[bool]int64{true: 0, false: 1}[tt.atStart] {
				t.Fatalf("evictions %v", h.c.Stats().Evictions)
			}
			got, handled, err := h.serve(clone(1), h.gen(payload, 0, nil))
			if !handled || err != nil || !bytes.Equal(got, payload) {
				t.Fatal("not regenerated")
			}
		})
	}
}

func TestClearAndInvalidate(t *testing.T) {
	h := newHarness(t, nil)
	h.serve(clone(1), h.gen([]byte("pack"), 0, nil))
	caps := &Request{RepoID: 7, Protocol: "version=2"}
	h.serve(caps, h.gen([]byte("caps"), 0, nil))
	other := clone(1)
	other.RepoID = 9
	h.serve(other, h.gen([]byte("other"), 0, nil))

	h.c.Invalidate(7)
	if st := h.c.Stats(); st.Entries != 2 || st.Evictions["refs_changed"] != 1 {
		t.Fatalf("after invalidate: %+v", st)
	}
	// The capability advertisement does not depend on refs.
	h.st.set(5, 0)
	if got, handled, _ := h.serve(caps, nil); !handled || string(got) != "caps" {
		t.Fatal("capability advertisement not served across a generation change")
	}
	n, _ := h.c.ClearRepo(7)
	if st := h.c.Stats(); n != 1 || st.Entries != 1 {
		t.Fatalf("after clear: n=%d %+v", n, st)
	}
}

func TestCloseWaitsForProducers(t *testing.T) {
	h := newHarness(t, nil)
	started := make(chan struct{})
	g := func(ctx context.Context, w io.Writer, _ func(string)) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := h.c.Serve(ctx, clone(1), io.Discard, nil, g); done <- err }()
	<-started
	cancel() // the client leaves; the producer keeps going until Close
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client err %v", err)
	}
	h.c.Close()
	assertNoTempFiles(t, h.cfg.Dir)
}

func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func countFiles(t *testing.T, dir string) int { return len(cacheFiles(t, dir)) }

func onlyFile(t *testing.T, dir string) string {
	t.Helper()
	files := cacheFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("want one cache file, have %v", files)
	}
	return files[0]
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	for _, f := range cacheFiles(t, dir) {
		if strings.HasPrefix(filepath.Base(f), tmpPrefix) {
			t.Fatalf("temporary file left: %s", f)
		}
	}
}

// TestFollowersHearTheQueue: a request that joins a producer still waiting
// for capacity is told so too, not only the request that started it, and
// a follower that has gone hears nothing more.
func TestFollowersHearTheQueue(t *testing.T) {
	h := newHarness(t, nil)
	payload := randomBytes(100_000)
	var mu sync.Mutex
	heard := map[string]int{}
	listener := func(who string) func(string) {
		return func(string) {
			mu.Lock()
			defer mu.Unlock()
			heard[who]++
		}
	}
	count := func(who string) int {
		mu.Lock()
		defer mu.Unlock()
		return heard[who]
	}
	waitFor := func(who string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for count(who) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s heard nothing", who)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	admitted := make(chan struct{})
	var admit sync.Once
	// On failure too, or the producer would wait for a ticket forever.
	t.Cleanup(func() { admit.Do(func() { close(admitted) }) })
	var calls atomic.Int32
	// As Admit does, the producer repeats where it stands in the queue
	// until it gets a ticket.
	queued := func(ctx context.Context, w io.Writer, progress func(string)) error {
		calls.Add(1)
		if progress == nil {
			return errors.New("the producer has no progress receiver")
		}
		for {
			progress("sluice: waiting for capacity, 0 ahead of you")
			select {
			case <-admitted:
				_, err := w.Write(payload)
				return err
			case <-time.After(5 * time.Millisecond):
			}
		}
	}

	var wg sync.WaitGroup
	var first, second bytes.Buffer
	wg.Go(func() {
		if _, err := h.c.Serve(context.Background(), clone(1), &first, listener("first"), queued); err != nil {
			t.Error(err)
		}
	})
	waitFor("first")
	wg.Go(func() {
		if _, err := h.c.Serve(context.Background(), clone(1), &second, listener("second"), queued); err != nil {
			t.Error(err)
		}
	})
	waitFor("second")
	// A follower that hangs up stops hearing.
	gone, hangUp := context.WithCancel(context.Background())
	goneDone := make(chan struct{})
	go func() {
		defer close(goneDone)
		h.c.Serve(gone, clone(1), io.Discard, listener("gone"), queued)
	}()
	waitFor("gone")
	hangUp()
	<-goneDone
	before := count("gone")
	// The producer repeats its progress message; once the followers still
	// listening have heard it twice more, the one that hung up would have
	// heard it too.
	for _, who := range []string{"first", "second"} {
		was := count(who)
		wait.For(t, who+" hears two more messages", 10*time.Second, func() bool { return count(who) >= was+2 })
	}
	if after := count("gone"); after != before {
		t.Errorf("a follower that hung up heard %d more messages", after-before)
	}
	admit.Do(func() { close(admitted) })
	wg.Wait()
	h.settle()
	if !bytes.Equal(first.Bytes(), payload) || !bytes.Equal(second.Bytes(), payload) {
		t.Fatalf("responses of %d and %d bytes, want %d", first.Len(), second.Len(), len(payload))
	}
	if calls.Load() != 1 {
		t.Fatalf("generate ran %d times", calls.Load())
	}
}
