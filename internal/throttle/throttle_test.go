package throttle

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// fakeStore holds settings, users and groups in memory.
type fakeStore struct {
	store.Store
	mu       sync.Mutex
	settings map[string]string
	users    map[string]*store.User
	groups   map[string]*store.Group
	members  map[int64][]store.User
}

func newFakeStore() *fakeStore {
	return &fakeStore{settings: map[string]string{}, users: map[string]*store.User{},
		groups: map[string]*store.Group{}, members: map[int64][]store.User{}}
}

func (f *fakeStore) GetSetting(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.settings[name]
	if !ok {
		return "", problem.New(problem.NotFound, "setting not found")
	}
	return v, nil
}

func (f *fakeStore) PutSetting(_ context.Context, name, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settings[name] = value
	return nil
}

func (f *fakeStore) UserByName(_ context.Context, name string) (*store.User, error) {
	if u, ok := f.users[strings.ToLower(name)]; ok {
		return u, nil
	}
	return nil, problem.New(problem.NotFound, "user not found")
}

func (f *fakeStore) GroupByName(_ context.Context, name string) (*store.Group, error) {
	if g, ok := f.groups[name]; ok {
		return g, nil
	}
	return nil, problem.New(problem.NotFound, "group not found")
}

func (f *fakeStore) GroupMembers(_ context.Context, id int64) ([]store.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[id], nil
}

func (f *fakeStore) RepoBySlug(context.Context, string, string) (*store.Repository, error) {
	return nil, problem.New(problem.NotFound, "repository not found")
}

// testConfig is the configuration's default throttle section (Bitbucket's
// numbers), spelled out because the package has no defaults of its own.
func testConfig() Config {
	return Config{Strategy: "adaptive", MinPerCore: 1, MaxPerCore: 12, TargetCPU: 0.75,
		QueueMax: 1000, QueueWait: 5 * time.Minute, RateLimit: true, RateBucket: 60, RateRefill: 5}
}

func fixedConfig(tickets int) Config {
	c := testConfig()
	c.Strategy = "fixed"
	c.Fixed = tickets
	return c
}

// clock is a settable fake clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newThrottle(t *testing.T, cfg Config, st store.Store, opts Options) *Throttle {
	t.Helper()
	opts.Store = st
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	th, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

var alice = &auth.Principal{UserID: 1, Name: "alice"}

func TestAdmitRefusals(t *testing.T) {
	cfg := fixedConfig(1)
	cfg.QueueMax = 1
	cfg.QueueWait = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	th := newThrottle(t, cfg, newFakeStore(), Options{Registerer: reg, ProgressEvery: 50 * time.Millisecond})
	ctx := context.Background()
	tk := Ticket{Principal: alice, ProjectKey: "PRJ", Slug: "r", Command: "upload-pack", Transport: "http", RemoteAddr: "127.0.0.1:1"}
	as := func(p *auth.Principal) Ticket { t := tk; t.Principal = p; return t }

	release, err := th.Admit(ctx, tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var msgs []string
	waitErr := make(chan error, 1)
	go func() {
		_, err := th.Admit(ctx, as(&auth.Principal{UserID: 2, Name: "bob"}), func(m string) {
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
		})
		waitErr <- err
	}()
	waitQueued(t, th.pool, 1)

	// The queue holds one: the next request is refused at once.
	_, err = th.Admit(ctx, as(&auth.Principal{UserID: 3, Name: "carol"}), nil)
	if problem.KindOf(err) != problem.Unavailable || problem.Message(err) != "server busy: queue full" || problem.RetryAfter(err) < 1 {
		t.Fatalf("queue full: %v (kind %v, retry %d)", err, problem.KindOf(err), problem.RetryAfter(err))
	}

	// bob gives up after queue_wait with a message naming the wait.
	err = <-waitErr
	if problem.KindOf(err) != problem.Unavailable || problem.Message(err) != "waited 1s for capacity; try again later" {
		t.Fatalf("timeout: %v", err)
	}
	if problem.RetryAfter(err) < 1 {
		t.Fatalf("timeout without Retry-After: %v", err)
	}
	mu.Lock()
	if len(msgs) < 2 || msgs[0] != "sluice: waiting for capacity, 0 ahead of you" {
		t.Errorf("progress messages %q", msgs)
	}
	mu.Unlock()
	release()
	release() // idempotent

	if got := testutil.ToFloat64(th.m.rejections.WithLabelValues("queue_full")); got != 1 {
		t.Errorf("queue_full rejections %v", got)
	}
	if got := testutil.ToFloat64(th.m.rejections.WithLabelValues("queue_timeout")); got != 1 {
		t.Errorf("queue_timeout rejections %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_throttle_tickets_limit", "sluice_throttle_tickets_in_use",
		"sluice_throttle_tickets_queued", "sluice_throttle_queue_wait_seconds"); err != nil || n != 4 {
		t.Errorf("gathered %d ticket metrics: %v", n, err)
	}
	if st := th.State(); st.InUse != 0 || st.Limit != 1 || st.Strategy != "fixed" {
		t.Errorf("state %+v", st)
	}
}

func TestAdmitQueueWaitLongerMessage(t *testing.T) {
	cfg := fixedConfig(1)
	cfg.QueueWait = 1100 * time.Millisecond
	th := newThrottle(t, cfg, newFakeStore(), Options{})
	tk := Ticket{Principal: alice, Command: "upload-pack"}
	release, err := th.Admit(context.Background(), tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, err = th.Admit(context.Background(), tk, nil)
	if got := problem.Message(err); got != "waited 1s for capacity; try again later" {
		t.Fatalf("message %q", got)
	}
}

func TestRateLimitBucket(t *testing.T) {
	cfg := fixedConfig(1)
	cfg.RateBucket, cfg.RateRefill = 3, 1
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	th := newThrottle(t, cfg, newFakeStore(), Options{Now: clk.now})
	ctx := context.Background()
	for i := range 3 {
		if err := th.RateLimit(ctx, alice, "10.0.0.1:5"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	err := th.RateLimit(ctx, alice, "10.0.0.1:5")
	if problem.KindOf(err) != problem.Throttled || problem.RetryAfter(err) != 1 {
		t.Fatalf("4th request: %v (retry %d)", err, problem.RetryAfter(err))
	}
	h := http.Header{}
	SetHeaders(h, err)
	if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("Retry-After") != "1" {
		t.Fatalf("headers %v", h)
	}
	// Another user and an anonymous caller have buckets of their own;
	// anonymous callers are told apart by address, not port.
	if err := th.RateLimit(ctx, &auth.Principal{UserID: 2, Name: "bob"}, "10.0.0.1:5"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := th.RateLimit(ctx, auth.Anonymous(), "10.0.0.9:"+string(rune('1'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := th.RateLimit(ctx, auth.Anonymous(), "10.0.0.9:99"); err == nil {
		t.Fatal("anonymous caller not limited by address")
	}
	if err := th.RateLimit(ctx, auth.Anonymous(), "10.0.0.10:1"); err != nil {
		t.Fatal(err)
	}
	// Refill: two seconds earn two requests.
	clk.add(2 * time.Second)
	for i := range 2 {
		if err := th.RateLimit(ctx, alice, "x"); err != nil {
			t.Fatalf("after refill, request %d: %v", i+1, err)
		}
	}
	if err := th.RateLimit(ctx, alice, "x"); err == nil {
		t.Fatal("refill gave more than it should")
	}
	if got := testutil.ToFloat64(th.m.limited.WithLabelValues(classUser)); got != 2 {
		t.Errorf("user rate-limited count %v", got)
	}
	if got := testutil.ToFloat64(th.m.limited.WithLabelValues(classAnonymous)); got != 1 {
		t.Errorf("anonymous rate-limited count %v", got)
	}
}

func TestRateLimitBucketsBoundedAndSwept(t *testing.T) {
	cfg := fixedConfig(1)
	cfg.RateBucket, cfg.RateRefill = 2, 1
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	th := newThrottle(t, cfg, newFakeStore(), Options{Now: clk.now, MaxBuckets: 10})
	for i := range 50 {
		_ = th.RateLimit(context.Background(), auth.Anonymous(), "10.1.0."+strconv.Itoa(i)+":1")
	}
	if n := th.rl.size(); n != 10 {
		t.Fatalf("%d buckets, want the bound 10", n)
	}
	clk.add(500 * time.Millisecond)
	th.rl.sweep()
	if n := th.rl.size(); n != 10 {
		t.Fatalf("swept buckets still in debt: %d left", n)
	}
	clk.add(time.Second) // every bucket has refilled
	th.rl.sweep()
	if n := th.rl.size(); n != 0 {
		t.Fatalf("%d idle buckets left after sweep", n)
	}
}

func TestExemptionsAndRuntimeSettings(t *testing.T) {
	st := newFakeStore()
	st.users["ci"] = &store.User{ID: 10, Name: "ci"}
	st.users["alice"] = &store.User{ID: 1, Name: "alice"}
	st.groups["builders"] = &store.Group{ID: 7, Name: "builders"}
	st.members[7] = []store.User{{ID: 11, Name: "agent"}}
	cfg := fixedConfig(1)
	cfg.RateBucket, cfg.RateRefill = 1, 0.001
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	th := newThrottle(t, cfg, st, Options{Now: clk.now})
	th.Start(context.Background())
	defer th.Close()
	ctx := context.Background()

	if _, stored := th.RateLimits(); stored {
		t.Fatal("settings stored before anyone saved them")
	}
	bad := []RateLimits{
		{Enabled: true, Bucket: 0, Refill: 1},
		{Enabled: true, Bucket: 1, Refill: 1, Exemptions: []Exemption{{User: "ci", Group: "builders", Unlimited: true}}},
		{Enabled: true, Bucket: 1, Refill: 1, Exemptions: []Exemption{{User: "ci"}}},
		{Enabled: true, Bucket: 1, Refill: 1, Exemptions: []Exemption{{User: "nobody", Unlimited: true}}},
		{Enabled: true, Bucket: 1, Refill: 1, Exemptions: []Exemption{{Group: "nogroup", Unlimited: true}}},
		{Enabled: true, Bucket: 1, Refill: 1, Exemptions: []Exemption{{User: "ci", Unlimited: true}, {User: "CI", Bucket: 2, Refill: 1}}},
	}
	for _, rl := range bad {
		if err := th.SetRateLimits(ctx, rl); problem.KindOf(err) != problem.Invalid {
			t.Errorf("SetRateLimits(%+v) = %v, want invalid", rl, err)
		}
	}

	rl := RateLimits{Enabled: true, Bucket: 1, Refill: 0.001, Exemptions: []Exemption{
		{User: "ci", Unlimited: true},
		{Group: "builders", Bucket: 3, Refill: 0.001},
		{Token: 99, Bucket: 2, Refill: 0.001},
	}}
	if err := th.SetRateLimits(ctx, rl); err != nil {
		t.Fatal(err)
	}
	count := func(p *auth.Principal) int {
		n := 0
		for n < 10 && th.RateLimit(ctx, p, "127.0.0.1:1") == nil {
			n++
		}
		return n
	}
	tests := []struct {
		name string
		p    *auth.Principal
		want int
	}{
		{"unlimited user", &auth.Principal{UserID: 10, Name: "ci"}, 10},
		{"group member", &auth.Principal{UserID: 11, Name: "agent"}, 3},
		{"exempt token", &auth.Principal{UserID: 1, Name: "alice", TokenID: 99}, 2},
		{"plain user", &auth.Principal{UserID: 1, Name: "alice"}, 1},
		{"other token of the same user shares the user's bucket", &auth.Principal{UserID: 1, Name: "alice", TokenID: 5}, 0},
	}
	for _, tt := range tests {
		if got := count(tt.p); got != tt.want {
			t.Errorf("%s: %d requests allowed, want %d", tt.name, got, tt.want)
		}
	}

	// Another node sees the stored document at its next poll.
	other := newThrottle(t, cfg, st, Options{Now: clk.now})
	other.Start(ctx)
	defer other.Close()
	if got, stored := other.RateLimits(); !stored || len(got.Exemptions) != 3 {
		t.Fatalf("other node's settings %+v stored %v", got, stored)
	}
	// Disabling it there takes effect here at the next poll.
	off := rl
	off.Enabled = false
	if err := other.SetRateLimits(ctx, off); err != nil {
		t.Fatal(err)
	}
	th.poll(ctx)
	if got, _ := th.RateLimits(); got.Enabled {
		t.Fatal("disabled settings not picked up")
	}
	if err := th.RateLimit(ctx, &auth.Principal{UserID: 1, Name: "alice"}, "x"); err != nil {
		t.Fatalf("rate limit disabled but refused: %v", err)
	}
	// A new group member is picked up at the next poll too.
	if err := th.SetRateLimits(ctx, rl); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.members[7] = append(st.members[7], store.User{ID: 12, Name: "agent2"})
	st.mu.Unlock()
	th.poll(ctx)
	if got := count(&auth.Principal{UserID: 12, Name: "agent2"}); got != 3 {
		t.Fatalf("new group member allowed %d, want 3", got)
	}
	// A broken stored document keeps the last good settings.
	_ = st.PutSetting(ctx, SettingRateLimits, "{not json")
	th.poll(ctx)
	if got, _ := th.RateLimits(); !got.Enabled || len(got.Exemptions) != 3 {
		t.Fatalf("settings after a broken document: %+v", got)
	}
}

func TestMiddleware(t *testing.T) {
	cfg := fixedConfig(1)
	cfg.RateBucket, cfg.RateRefill = 2, 0.001
	th := newThrottle(t, cfg, newFakeStore(), Options{})
	calls := 0
	h := th.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusNoContent)
	}))
	do := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/rest/api/1.0/projects", nil)
		req.RemoteAddr = "192.0.2.7:4000"
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, want := range []string{"1", "0"} {
		rec := do()
		if rec.Code != http.StatusNoContent || rec.Header().Get("X-RateLimit-Limit") != "2" || rec.Header().Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d: %d %v", i+1, rec.Code, rec.Header())
		}
	}
	rec := do()
	if rec.Code != http.StatusTooManyRequests || calls != 2 {
		t.Fatalf("third request: %d, handler called %d times", rec.Code, calls)
	}
	if rec.Header().Get("Retry-After") == "" || rec.Header().Get("X-RateLimit-Remaining") != "0" || rec.Header().Get("X-RateLimit-Limit") != "2" {
		t.Fatalf("429 headers %v", rec.Header())
	}
	var body struct {
		Errors []struct{ Message string } `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Errors) != 1 || !strings.Contains(body.Errors[0].Message, "rate limit") {
		t.Fatalf("429 body %q: %v", rec.Body.String(), err)
	}
	if got := testutil.ToFloat64(th.m.limited.WithLabelValues(classAnonymous)); got != 1 {
		t.Fatalf("anonymous rate-limited count %v", got)
	}
}
