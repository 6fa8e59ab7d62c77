package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/hookclient"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestMain(m *testing.M) {
	// The git integration test points git's hooks at this test binary;
	// in that role it is the hook program, as `sluice hook` is in
	// production.
	if os.Getenv("SLUICE_TEST_HOOK_MAIN") == "1" {
		if len(os.Args) < 3 || os.Args[1] != "hook" {
			fmt.Fprintln(os.Stderr, "usage: hook NAME ARGS…")
			os.Exit(2)
		}
		os.Exit(hookclient.Run(os.Args[2], os.Args[3:], os.Stdin, os.Stdout, os.Stderr, os.Environ()))
	}
	// As the test package, it fails if a goroutine the tests started is
	// still running once they finished.
	goleak.VerifyTestMain(m)
}

// fakeStore keeps the refs generation and ref transactions in memory with
// the semantics store documents.
type fakeStore struct {
	store.Store

	mu        sync.Mutex
	gen       map[int64]int64
	txns      map[int64]store.RefTxn
	nextID    int64
	failBegin bool
	failEnd   bool
	ended     map[int64]bool // txn id → committed
	lists     int            // PendingRefTxns calls: reconciler passes
	runs      map[int64]store.GitRun
	nextRun   int64
	failRuns  bool
}

func newFakeStore() *fakeStore {
	return &fakeStore{gen: map[int64]int64{}, txns: map[int64]store.RefTxn{}, ended: map[int64]bool{}, runs: map[int64]store.GitRun{}}
}

func (f *fakeStore) BeginGitRun(_ context.Context, repoID int64, nodeID, instance string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRuns {
		return 0, problem.New(problem.Unavailable, "database unavailable")
	}
	f.nextRun++
	f.runs[f.nextRun] = store.GitRun{ID: f.nextRun, RepoID: repoID, NodeID: nodeID, Instance: instance, StartedAt: time.Now()}
	return f.nextRun, nil
}

func (f *fakeStore) EndGitRun(_ context.Context, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRuns {
		return problem.New(problem.Unavailable, "database unavailable")
	}
	delete(f.runs, id)
	return nil
}

func (f *fakeStore) GitRuns(context.Context) ([]store.GitRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRuns {
		return nil, problem.New(problem.Unavailable, "database unavailable")
	}
	var out []store.GitRun
	for _, g := range f.runs {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b store.GitRun) int { return int(a.ID - b.ID) })
	return out, nil
}

func (f *fakeStore) RepoState(_ context.Context, repoID int64) (store.RepoState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := store.RepoState{Generation: f.gen[repoID]}
	for _, t := range f.txns {
		if t.RepoID == repoID {
			st.Pending++
		}
	}
	return st, nil
}

func (f *fakeStore) BeginRefTxn(_ context.Context, repoID int64, nodeID, instance, updates string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failBegin {
		return 0, problem.New(problem.Unavailable, "database unavailable")
	}
	f.nextID++
	f.txns[f.nextID] = store.RefTxn{ID: f.nextID, RepoID: repoID, NodeID: nodeID, Instance: instance, Updates: updates, CreatedAt: time.Now()}
	f.gen[repoID]++
	return f.nextID, nil
}

func (f *fakeStore) EndRefTxn(_ context.Context, id int64, committed bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failEnd {
		return problem.New(problem.Unavailable, "database unavailable")
	}
	t, ok := f.txns[id]
	if !ok {
		return problem.New(problem.NotFound, "ref transaction not found")
	}
	delete(f.txns, id)
	f.gen[t.RepoID]++
	f.ended[id] = committed
	return nil
}

func (f *fakeStore) BumpGeneration(_ context.Context, repoID int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen[repoID]++
	return nil
}

func (f *fakeStore) PendingRefTxns(_ context.Context, nodeID string) ([]store.RefTxn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var out []store.RefTxn
	for _, t := range f.txns {
		if nodeID == "" || t.NodeID == nodeID {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fakeStore) ClaimRefTxn(_ context.Context, id int64, claimer string, _ time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failEnd {
		return false, problem.New(problem.Unavailable, "database unavailable")
	}
	t, ok := f.txns[id]
	if !ok || (t.ClaimedBy != "" && t.ClaimedBy != claimer) {
		return false, nil
	}
	t.ClaimedBy = claimer
	f.txns[id] = t
	return true, nil
}

func (f *fakeStore) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func state(t *testing.T, st store.Store, repoID int64) store.RepoState {
	t.Helper()
	s, err := st.RepoState(context.Background(), repoID)
	if err != nil {
		t.Fatalf("RepoState: %v", err)
	}
	return s
}

type testServer struct {
	*Server
	st  *fakeStore
	reg *prometheus.Registry
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	if cfg.SocketDir == "" {
		cfg.SocketDir = t.TempDir()
	}
	st := newFakeStore()
	reg := prometheus.NewRegistry()
	s, err := NewServer(cfg, st, nil, reg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &testServer{Server: s, st: st, reg: reg}
}

// run calls hookclient.Run as git would run the hook, with env on top of a
// minimal environment.
func run(t *testing.T, env []string, hook string, args []string, stdin string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	environ := append([]string{"PATH=/usr/bin:/bin"}, env...)
	code := hookclient.Run(hook, args, strings.NewReader(stdin), &stdout, &stderr, environ)
	if stdout.Len() > 0 {
		t.Errorf("hook wrote to stdout: %q", stdout.String())
	}
	return code, stderr.String()
}

func line(old, new, ref string) string { return old + " " + new + " " + ref + "\n" }

type recordingPolicy struct {
	mu      sync.Mutex
	err     error
	req     Request
	updates []RefUpdate
	qenv    []string
}

func (p *recordingPolicy) CheckPush(_ context.Context, req Request, updates []RefUpdate, qenv []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.req, p.updates, p.qenv = req, updates, qenv
	return p.err
}

func TestPreReceive(t *testing.T) {
	pushOpts := func(opts ...string) []string {
		env := []string{fmt.Sprintf("GIT_PUSH_OPTION_COUNT=%d", len(opts))}
		for i, o := range opts {
			env = append(env, fmt.Sprintf("GIT_PUSH_OPTION_%d=%s", i, o))
		}
		return env
	}
	tests := []struct {
		name      string
		stdin     string
		env       []string
		policyErr error
		wantCode  int
		wantMsg   []string // substrings of stderr
		outcome   string
	}{
		{name: "plain push", stdin: line(zero, oidA, "refs/heads/main"), outcome: outcomeOK},
		{name: "option-like ref", stdin: line(zero, oidA, "refs/heads/main") + line(zero, oidA, "refs/heads/--output=x"),
			wantCode: 1, wantMsg: []string{"ref name rule", `"refs/heads/--output=x"`, "'-'"}, outcome: outcomeRejected},
		{name: "check-ref-format rule", stdin: line(zero, oidA, "refs/heads/a..b"),
			wantCode: 1, wantMsg: []string{`"refs/heads/a..b"`, "'..'"}, outcome: outcomeRejected},
		{name: "every bad ref named", stdin: line(zero, oidA, "refs/heads/-a") + line(zero, oidA, "refs/tags/-b"),
			wantCode: 1, wantMsg: []string{"refs/heads/-a", "refs/tags/-b"}, outcome: outcomeRejected},
		{name: "deleting a bad ref is refused too", stdin: line(oidA, zero, "refs/heads/-a"),
			wantCode: 1, wantMsg: []string{"refs/heads/-a"}, outcome: outcomeRejected},
		{name: "push options within limits", stdin: line(zero, oidA, "refs/heads/main"),
			env: pushOpts("ci.skip", strings.Repeat("x", 8)), outcome: outcomeOK},
		{name: "too many push options", stdin: line(zero, oidA, "refs/heads/main"),
			env: pushOpts("a", "b", "c"), wantCode: 1, wantMsg: []string{"too many push options: 3 (limit 2)"}, outcome: outcomeRejected},
		{name: "push option too long", stdin: line(zero, oidA, "refs/heads/main"),
			env: pushOpts("ok", strings.Repeat("x", 9)), wantCode: 1, wantMsg: []string{"push option 2 is 9 bytes long (limit 8)"}, outcome: outcomeRejected},
		{name: "huge option count", stdin: line(zero, oidA, "refs/heads/main"),
			env: []string{"GIT_PUSH_OPTION_COUNT=1000000000"}, wantCode: 1, wantMsg: []string{"limit 2"}, outcome: outcomeRejected},
		{name: "policy rejects", stdin: line(oidA, oidB, "refs/heads/main"),
			policyErr: problem.New(problem.Forbidden, "branch permission \"no direct push\" forbids pushing to %q", "refs/heads/main"),
			wantCode:  1, wantMsg: []string{`branch permission "no direct push"`, `"refs/heads/main"`}, outcome: outcomeRejected},
		{name: "policy fails", stdin: line(oidA, oidB, "refs/heads/main"),
			policyErr: errors.New("db down: secret detail"),
			wantCode:  1, wantMsg: []string{"could not be checked"}, outcome: outcomeError},
		{name: "malformed input", stdin: oidA + " refs/heads/main\n",
			wantCode: 1, wantMsg: []string{"malformed"}, outcome: outcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, Config{MaxPushOptions: 2, MaxPushOptionBytes: 8})
			pol := &recordingPolicy{err: tt.policyErr}
			s.SetPolicy(pol)
			req := Request{RepoID: 7, Principal: &auth.Principal{UserID: 3, Name: "alice"}, Transport: "ssh"}
			env, done := s.Register(req)
			defer done()
			qdir := t.TempDir()
			env = append(env, tt.env...)
			env = append(env, "GIT_QUARANTINE_PATH="+qdir, "GIT_OBJECT_DIRECTORY="+qdir,
				"GIT_ALTERNATE_OBJECT_DIRECTORIES=/repos/007/7.git/objects")
			code, stderr := run(t, env, "pre-receive", nil, tt.stdin)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
			if strings.Contains(stderr, "secret detail") {
				t.Errorf("stderr leaks an internal error: %q", stderr)
			}
			if tt.wantCode == 0 && stderr != "" {
				t.Errorf("unexpected stderr %q", stderr)
			}
			if got := testutil.ToFloat64(s.metrics.calls.WithLabelValues("pre-receive", tt.outcome)); got != 1 {
				t.Errorf("calls{pre-receive,%s} = %v, want 1", tt.outcome, got)
			}
			if got := state(t, s.st, 7); got.Generation != 0 || got.Pending != 0 {
				t.Errorf("pre-receive changed the repo state: %+v", got)
			}
			// The policy runs only when the built-in rules pass, and then
			// sees the request, the updates and the quarantine.
			pol.mu.Lock()
			defer pol.mu.Unlock()
			if tt.outcome == outcomeOK || tt.policyErr != nil {
				if pol.req.RepoID != 7 || pol.req.Principal.Name != "alice" || pol.req.Transport != "ssh" {
					t.Errorf("policy saw request %+v", pol.req)
				}
				want, _ := ParseUpdates([]byte(tt.stdin))
				if fmt.Sprint(pol.updates) != fmt.Sprint(want) {
					t.Errorf("policy saw updates %v, want %v", pol.updates, want)
				}
				wantQ := []string{"GIT_QUARANTINE_PATH=" + qdir, "GIT_OBJECT_DIRECTORY=" + qdir,
					"GIT_ALTERNATE_OBJECT_DIRECTORIES=/repos/007/7.git/objects"}
				if fmt.Sprint(pol.qenv) != fmt.Sprint(wantQ) {
					t.Errorf("policy saw quarantine %v, want %v", pol.qenv, wantQ)
				}
			} else if pol.updates != nil {
				t.Errorf("policy ran although a built-in rule rejected the push")
			}
		})
	}
}

func TestQuarantineEnvChecked(t *testing.T) {
	s := newTestServer(t, Config{})
	s.SetPolicy(&recordingPolicy{})
	env, done := s.Register(Request{RepoID: 1, System: true})
	defer done()
	env = append(env, "GIT_OBJECT_DIRECTORY=relative/objects")
	code, stderr := run(t, env, "pre-receive", nil, line(zero, oidA, "refs/heads/main"))
	if code == 0 || !strings.Contains(stderr, "malformed hook environment") {
		t.Errorf("relative object directory accepted: code %d, stderr %q", code, stderr)
	}
}

func TestReferenceTransaction(t *testing.T) {
	s := newTestServer(t, Config{})
	var (
		mu      sync.Mutex
		changed []RefUpdate
	)
	s.OnRefsChanged(func(repoID int64, updates []RefUpdate) {
		mu.Lock()
		defer mu.Unlock()
		if repoID != 42 {
			t.Errorf("OnRefsChanged repo = %d, want 42", repoID)
		}
		changed = append(changed, updates...)
	})
	env, done := s.Register(Request{RepoID: 42, System: true})
	defer done()
	in := line(oidA, oidB, "refs/heads/main")

	if code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, in); code != 0 {
		t.Fatalf("prepared: exit %d, %q", code, stderr)
	}
	if got := state(t, s.st, 42); got != (store.RepoState{Generation: 1, Pending: 1}) {
		t.Errorf("after prepared: %+v, want generation 1, pending 1", got)
	}
	s.st.mu.Lock()
	rec := s.st.txns[1]
	s.st.mu.Unlock()
	if rec.Updates != in || rec.NodeID != "node-1" {
		t.Errorf("recorded txn %+v, want the hook input and the node id", rec)
	}
	if len(changed) != 0 {
		t.Errorf("listeners told before commit: %v", changed)
	}

	if code, stderr := run(t, env, "reference-transaction", []string{"committed"}, in); code != 0 {
		t.Fatalf("committed: exit %d, %q", code, stderr)
	}
	if got := state(t, s.st, 42); got != (store.RepoState{Generation: 2, Pending: 0}) {
		t.Errorf("after committed: %+v, want generation 2, pending 0", got)
	}
	if !s.st.ended[1] {
		t.Errorf("txn not ended as committed: %v", s.st.ended)
	}
	mu.Lock()
	if len(changed) != 1 || changed[0] != (RefUpdate{oidA, oidB, "refs/heads/main"}) {
		t.Errorf("OnRefsChanged got %v", changed)
	}
	mu.Unlock()

	// An aborted transaction ends its record as not committed and tells
	// nobody: no ref moved.
	in2 := line(oidB, oidA, "refs/heads/main")
	run(t, env, "reference-transaction", []string{"prepared"}, in2)
	if code, _ := run(t, env, "reference-transaction", []string{"aborted"}, in2); code != 0 {
		t.Errorf("aborted: exit %d", code)
	}
	if got := state(t, s.st, 42); got != (store.RepoState{Generation: 4, Pending: 0}) {
		t.Errorf("after prepared+aborted: %+v, want generation 4, pending 0", got)
	}
	if committed, ok := s.st.ended[2]; !ok || committed {
		t.Errorf("txn 2 ended = %v, %v; want ended as not committed", committed, ok)
	}
	mu.Lock()
	if len(changed) != 1 {
		t.Errorf("aborted transaction reached listeners: %v", changed)
	}
	mu.Unlock()

	// Git aborts transactions that fail before the prepared hook: nothing
	// to end, nothing to block.
	if code, stderr := run(t, env, "reference-transaction", []string{"aborted"}, line(oidA, zero, "refs/heads/x")); code != 0 {
		t.Errorf("aborted without prepared: exit %d, %q", code, stderr)
	}
	if got := state(t, s.st, 42); got.Generation != 4 || got.Pending != 0 {
		t.Errorf("after lone aborted: %+v", got)
	}
	if got := testutil.ToFloat64(s.metrics.calls.WithLabelValues("reference-transaction", outcomeOK)); got != 5 {
		t.Errorf("calls{reference-transaction,ok} = %v, want 5", got)
	}
	if got := testutil.CollectAndCount(s.metrics.duration); got != 1 {
		t.Errorf("duration series = %d, want 1", got)
	}
}

// Git 2.39 runs a nested packed-refs transaction with the same input when
// a packed ref is deleted, and one transaction per ref without --atomic:
// every prepared must be paired with its own end.
func TestNestedTransactions(t *testing.T) {
	s := newTestServer(t, Config{})
	env, done := s.Register(Request{RepoID: 1, System: true})
	defer done()
	del := line(oidA, zero, "refs/heads/old")
	other := line(zero, oidB, "refs/heads/new")
	for _, step := range []struct{ phase, in string }{
		{"prepared", del}, {"prepared", del}, {"prepared", other},
		{"committed", del}, {"committed", other}, {"committed", del},
	} {
		if code, stderr := run(t, env, "reference-transaction", []string{step.phase}, step.in); code != 0 {
			t.Fatalf("%s: exit %d, %q", step.phase, code, stderr)
		}
	}
	if got := state(t, s.st, 1); got != (store.RepoState{Generation: 6, Pending: 0}) {
		t.Errorf("state = %+v, want generation 6, pending 0", got)
	}
	for id := int64(1); id <= 3; id++ {
		if !s.st.ended[id] {
			t.Errorf("txn %d not ended as committed", id)
		}
	}
}

func TestPreparedStoreFailureAborts(t *testing.T) {
	s := newTestServer(t, Config{})
	s.st.set(func() { s.st.failBegin = true })
	env, done := s.Register(Request{RepoID: 5, System: true})
	defer done()
	in := line(oidA, oidB, "refs/heads/main")
	code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, in)
	if code == 0 {
		t.Fatalf("prepared succeeded although the store failed")
	}
	if !strings.Contains(stderr, "could not be recorded") {
		t.Errorf("stderr %q", stderr)
	}
	// Git then aborts the transaction, which must go through.
	if code, _ := run(t, env, "reference-transaction", []string{"aborted"}, in); code != 0 {
		t.Errorf("aborted after failed prepared: exit %d", code)
	}
	if got := state(t, s.st, 5); got != (store.RepoState{}) {
		t.Errorf("state = %+v, want untouched", got)
	}
	if got := testutil.ToFloat64(s.metrics.calls.WithLabelValues("reference-transaction", outcomeError)); got != 1 {
		t.Errorf("calls{reference-transaction,error} = %v, want 1", got)
	}
}

func TestDoneEndsOpenTransactions(t *testing.T) {
	s := newTestServer(t, Config{})
	var changed int
	s.OnRefsChanged(func(int64, []RefUpdate) { changed++ })
	env, done := s.Register(Request{RepoID: 9, System: true})
	in := line(oidA, oidB, "refs/heads/main")
	if code, _ := run(t, env, "reference-transaction", []string{"prepared"}, in); code != 0 {
		t.Fatal("prepared failed")
	}
	// git is killed here; its committed hook never runs.
	done()
	done() // idempotent
	if got := state(t, s.st, 9); got != (store.RepoState{Generation: 2, Pending: 0}) {
		t.Errorf("state = %+v, want generation 2, pending 0", got)
	}
	if committed, ok := s.st.ended[1]; !ok || committed {
		t.Errorf("txn ended = %v, %v; want ended as not committed", committed, ok)
	}
	if changed != 1 {
		t.Errorf("listeners told %d times, want 1 (the ref may have moved)", changed)
	}
	// The token is gone.
	if code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, in); code == 0 || !strings.Contains(stderr, "refused") {
		t.Errorf("call after done: exit %d, %q", code, stderr)
	}
}

func TestEndFailureRetriedAtDone(t *testing.T) {
	s := newTestServer(t, Config{})
	env, done := s.Register(Request{RepoID: 9, System: true})
	in := line(oidA, oidB, "refs/heads/main")
	run(t, env, "reference-transaction", []string{"prepared"}, in)
	s.st.set(func() { s.st.failEnd = true })
	run(t, env, "reference-transaction", []string{"committed"}, in)
	if got := state(t, s.st, 9); got.Pending != 1 {
		t.Fatalf("state = %+v, want the transaction still pending", got)
	}
	s.st.set(func() { s.st.failEnd = false })
	done()
	if got := state(t, s.st, 9); got.Pending != 0 {
		t.Errorf("state = %+v, want the transaction ended at done", got)
	}
}

func TestOnPushedAtDone(t *testing.T) {
	s := newTestServer(t, Config{})
	type pushed struct {
		req     Request
		updates []RefUpdate
	}
	got := make(chan pushed, 4)
	s.OnPushed(func(req Request, updates []RefUpdate) { got <- pushed{req, updates} })
	s.OnPushed(func(Request, []RefUpdate) { panic("listener bug") })
	s.OnPushed(func(req Request, updates []RefUpdate) { got <- pushed{req, updates} })
	req := Request{RepoID: 3, Principal: &auth.Principal{Name: "bob"}, Transport: "http"}
	env, done := s.Register(req)
	// A created branch, a deleted tag reported twice (loose and packed
	// transactions), and an aborted update that must not be reported.
	for _, tx := range []struct{ in, end string }{
		{line(zero, oidA, "refs/heads/main"), "committed"},
		{line(oidA, zero, "refs/tags/v1"), "committed"},
		{line(oidA, zero, "refs/tags/v1"), "committed"},
		{line(oidA, oidB, "refs/heads/other"), "aborted"},
	} {
		for _, phase := range []string{"prepared", tx.end} {
			if code, stderr := run(t, env, "reference-transaction", []string{phase}, tx.in); code != 0 {
				t.Fatalf("%s: exit %d, %q", phase, code, stderr)
			}
		}
	}
	select {
	case p := <-got:
		t.Fatalf("OnPushed ran before the request ended: %+v", p)
	case <-time.After(100 * time.Millisecond):
	}
	done()
	for i := 0; i < 2; i++ {
		select {
		case p := <-got:
			if p.req.RepoID != 3 || p.req.Principal.Name != "bob" || len(p.updates) != 2 ||
				!p.updates[0].Created() || !p.updates[1].Deleted() {
				t.Errorf("listener got %+v", p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("listener %d never ran (a panicking one must not stop the others)", i)
		}
	}
	// A request that committed nothing reports nothing.
	_, done2 := s.Register(req)
	done2()
	select {
	case p := <-got:
		t.Fatalf("OnPushed for a request without commits: %+v", p)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestClientRefusals(t *testing.T) {
	s := newTestServer(t, Config{})
	env, done := s.Register(Request{RepoID: 1, System: true})
	defer done()
	in := line(oidA, oidB, "refs/heads/main")
	badToken := []string{hookclient.EnvSocket + "=" + s.SocketPath(), hookclient.EnvToken + "=" + strings.Repeat("ab", 32)}
	tests := []struct {
		name     string
		env      []string
		hook     string
		args     []string
		wantCode int
		wantMsg  string
	}{
		{"no environment", nil, "pre-receive", nil, 1, "hook called outside a sluice request"},
		{"no token", env[:1], "reference-transaction", []string{"prepared"}, 1, "hook called outside a sluice request"},
		{"aborted never blocks", nil, "reference-transaction", []string{"aborted"}, 0, "hook called outside a sluice request"},
		{"unknown token", badToken, "pre-receive", nil, 1, "refused"},
		{"server gone", []string{hookclient.EnvSocket + "=" + filepath.Join(t.TempDir(), "none.sock"), hookclient.EnvToken + "=x"}, "pre-receive", nil, 1, "unreachable"},
		{"server gone, aborted", []string{hookclient.EnvSocket + "=" + filepath.Join(t.TempDir(), "none.sock"), hookclient.EnvToken + "=x"},
			"reference-transaction", []string{"aborted"}, 0, "unreachable"},
		{"unknown hook", env, "update", []string{"refs/heads/main", oidA, oidB}, 1, "unknown hook"},
		{"bad push option count", append(env[:2:2], "GIT_PUSH_OPTION_COUNT=x"), "pre-receive", nil, 1, "GIT_PUSH_OPTION_COUNT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stderr := run(t, tt.env, tt.hook, tt.args, in)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantMsg) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.wantCode, tt.wantMsg)
			}
		})
	}
	if got := state(t, s.st, 1); got != (store.RepoState{}) {
		t.Errorf("refused calls changed state: %+v", got)
	}
}

func TestReconcile(t *testing.T) {
	s := newTestServer(t, Config{NodeID: "node-a"})
	ctx := context.Background()
	// A previous run of this node left two transactions open; another,
	// live node has one in flight that must not be touched.
	a1, _ := s.st.BeginRefTxn(ctx, 1, "node-a", "previous-run", line(oidA, oidB, "refs/heads/main"))
	a2, _ := s.st.BeginRefTxn(ctx, 2, "node-a", "previous-run", line(zero, oidB, "refs/heads/x"))
	b1, _ := s.st.BeginRefTxn(ctx, 1, "node-b", "b-run", line(oidB, oidA, "refs/heads/y"))
	if err := s.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := state(t, s.st, 1); got != (store.RepoState{Generation: 3, Pending: 1}) {
		t.Errorf("repo 1 = %+v, want generation 3 and node-b's transaction pending", got)
	}
	if got := state(t, s.st, 2); got != (store.RepoState{Generation: 2, Pending: 0}) {
		t.Errorf("repo 2 = %+v, want generation 2, pending 0", got)
	}
	for _, id := range []int64{a1, a2} {
		if committed, ok := s.st.ended[id]; !ok || committed {
			t.Errorf("txn %d ended = %v, %v; want ended as not committed", id, committed, ok)
		}
	}
	if _, ok := s.st.ended[b1]; ok {
		t.Errorf("another node's transaction was ended")
	}
	// Nothing left: a second run is a no-op.
	if err := s.Reconcile(ctx); err != nil {
		t.Fatalf("second Reconcile: %v", err)
	}
	if got := state(t, s.st, 2); got.Generation != 2 {
		t.Errorf("second Reconcile bumped the generation: %+v", got)
	}
}

func TestServerSocket(t *testing.T) {
	t.Run("requires a node id", func(t *testing.T) {
		if _, err := NewServer(Config{SocketDir: t.TempDir()}, newFakeStore(), nil, nil); err == nil {
			t.Fatal("NewServer accepted an empty node id")
		}
	})
	t.Run("private and removed at close", func(t *testing.T) {
		dir := t.TempDir()
		s, err := NewServer(Config{SocketDir: dir, NodeID: "n"}, newFakeStore(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(s.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket mode = %v, want a 0600 socket", fi.Mode())
		}
		if filepath.Dir(s.SocketPath()) != dir {
			t.Errorf("socket %q not in %q", s.SocketPath(), dir)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.SocketPath()); !os.IsNotExist(err) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	t.Run("long directory falls back to a temp dir", func(t *testing.T) {
		long := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
		s, err := NewServer(Config{SocketDir: long, NodeID: "n"}, newFakeStore(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		path := s.SocketPath()
		if len(path) >= maxSocketPath || strings.HasPrefix(path, long) {
			t.Errorf("socket path %q (%d bytes)", path, len(path))
		}
		env, done := s.Register(Request{RepoID: 1, System: true})
		code, stderr := run(t, env, "pre-receive", nil, "")
		done()
		if code != 0 {
			t.Errorf("call through the fallback socket: exit %d, %q", code, stderr)
		}
		s.Close()
		if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
			t.Errorf("temp socket dir left behind: %v", err)
		}
	})
	t.Run("two servers share a directory", func(t *testing.T) {
		dir := t.TempDir()
		a := newTestServer(t, Config{SocketDir: dir})
		b := newTestServer(t, Config{SocketDir: dir})
		if a.SocketPath() == b.SocketPath() {
			t.Fatal("two servers got the same socket")
		}
		// A token is only good at the server that issued it.
		env, done := a.Register(Request{RepoID: 1, System: true})
		defer done()
		env[0] = hookclient.EnvSocket + "=" + b.SocketPath()
		if code, _ := run(t, env, "pre-receive", nil, ""); code == 0 {
			t.Error("server b accepted server a's token")
		}
	})
}

func TestConcurrentCalls(t *testing.T) {
	s := newTestServer(t, Config{})
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env, done := s.Register(Request{RepoID: int64(100 + i), System: true})
			defer done()
			in := line(zero, oidA, fmt.Sprintf("refs/heads/b%d", i))
			for _, phase := range []string{"prepared", "committed"} {
				var stderr bytes.Buffer
				if code := hookclient.Run("reference-transaction", []string{phase}, strings.NewReader(in), io.Discard, &stderr, env); code != 0 {
					t.Errorf("%s: exit %d, %q", phase, code, stderr.String())
				}
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if got := state(t, s.st, int64(100+i)); got != (store.RepoState{Generation: 2}) {
			t.Errorf("repo %d: %+v", 100+i, got)
		}
	}
}

// TestSQLiteStore runs the transaction hooks and Reconcile against the real
// store, to hold the fake's semantics to the real ones.
func TestSQLiteStore(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"), nil)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	defer db.Close()
	p := &store.Project{Key: "PRJ", Name: "Project"}
	if err := db.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	r := &store.Repository{ProjectID: p.ID, Slug: "repo", Name: "repo", DefaultBranch: "main"}
	if err := db.CreateRepo(ctx, r); err != nil {
		t.Fatal(err)
	}
	before := state(t, db, r.ID)

	s, err := NewServer(Config{SocketDir: t.TempDir(), NodeID: "node-1"}, db, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	env, done := s.Register(Request{RepoID: r.ID, System: true})
	in := line(zero, oidA, "refs/heads/main")
	if code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, in); code != 0 {
		t.Fatalf("prepared: exit %d, %q", code, stderr)
	}
	if got := state(t, db, r.ID); got.Generation != before.Generation+1 || got.Pending != 1 {
		t.Errorf("after prepared: %+v (before %+v)", got, before)
	}
	if code, stderr := run(t, env, "reference-transaction", []string{"committed"}, in); code != 0 {
		t.Fatalf("committed: exit %d, %q", code, stderr)
	}
	done()
	if got := state(t, db, r.ID); got.Generation != before.Generation+2 || got.Pending != 0 {
		t.Errorf("after committed: %+v (before %+v)", got, before)
	}
	if repo, err := db.RepoByID(ctx, r.ID); err != nil || repo.PushedAt.IsZero() {
		t.Errorf("PushedAt not set by a committed transaction: %+v, %v", repo, err)
	}

	// A crash between prepared and committed leaves a record that the next
	// start ends.
	if _, err := db.BeginRefTxn(ctx, r.ID, "node-1", "previous-run", in); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := state(t, db, r.ID); got.Generation != before.Generation+4 || got.Pending != 0 {
		t.Errorf("after Reconcile: %+v (before %+v)", got, before)
	}
}

func TestSilentPeers(t *testing.T) {
	t.Run("client gives up on a silent server", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "s.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer c.Close()
				io.Copy(io.Discard, c) // reads, never answers
			}
		}()
		start := time.Now()
		_, err = hookclient.Call(sock, &hookclient.Request{Token: "x", Hook: "pre-receive"}, 200*time.Millisecond)
		if err == nil {
			t.Fatal("call to a silent server succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("call took %v, want about its 200ms timeout", d)
		}
	})
	t.Run("close does not wait for a silent client", func(t *testing.T) {
		s, err := NewServer(Config{SocketDir: t.TempDir(), NodeID: "n"}, newFakeStore(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", s.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte(`{"token":`)) // and nothing more
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		s.Close()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close took %v", d)
		}
	})
}

// TestPreservesRefs: pack-refs' transactions (ref added to packed-refs,
// then its loose file deleted) neither record anything nor move the
// generation, and listeners hear nothing: nothing a reader sees changed.
func TestPreservesRefs(t *testing.T) {
	s := newTestServer(t, Config{})
	var heard int
	s.OnRefsChanged(func(int64, []RefUpdate) { heard++ })
	env, done := s.Register(Request{RepoID: 7, PreservesRefs: true})
	defer done()
	for _, in := range []string{line(zero, oidA, "refs/heads/main"), line(oidA, zero, "refs/heads/main")} {
		for _, phase := range []string{"prepared", "committed"} {
			if code, stderr := run(t, env, "reference-transaction", []string{phase}, in); code != 0 {
				t.Fatalf("%s: exit %d, %q", phase, code, stderr)
			}
		}
	}
	if got := state(t, s.st, 7); got != (store.RepoState{}) || heard != 0 {
		t.Errorf("state %+v, listeners called %d times; want nothing recorded", got, heard)
	}
}

func TestQuarantineEnvCleaned(t *testing.T) {
	objects := "/repos/007/7.git/objects"
	for _, tc := range []struct {
		name    string
		in      []string
		objects string
		want    []string
		wantErr string
	}{
		{name: "git's dot paths are cleaned",
			in: []string{"GIT_QUARANTINE_PATH=/repos/007/7.git/./objects/tmp_objdir-incoming-x",
				"GIT_OBJECT_DIRECTORY=/repos/007/7.git/./objects/tmp_objdir-incoming-x",
				"GIT_ALTERNATE_OBJECT_DIRECTORIES=/repos/007/7.git/./objects"},
			objects: objects,
			want: []string{"GIT_QUARANTINE_PATH=/repos/007/7.git/objects/tmp_objdir-incoming-x",
				"GIT_OBJECT_DIRECTORY=/repos/007/7.git/objects/tmp_objdir-incoming-x",
				"GIT_ALTERNATE_OBJECT_DIRECTORIES=/repos/007/7.git/objects"}},
		{name: "another repository's objects", objects: objects,
			in: []string{"GIT_OBJECT_DIRECTORY=/repos/008/8.git/objects"}, wantErr: "outside"},
		{name: "climbing out with dot-dot", objects: objects,
			in: []string{"GIT_ALTERNATE_OBJECT_DIRECTORIES=/repos/007/7.git/objects/../../008/8.git/objects"}, wantErr: "outside"},
		{name: "a sibling with a common prefix", objects: objects,
			in: []string{"GIT_OBJECT_DIRECTORY=/repos/007/7.git/objects2"}, wantErr: "outside"},
		{name: "one bad alternate of two", objects: objects,
			in: []string{"GIT_ALTERNATE_OBJECT_DIRECTORIES=/repos/007/7.git/objects:/etc"}, wantErr: "outside"},
		{name: "relative", in: []string{"GIT_OBJECT_DIRECTORY=objects"}, wantErr: "not absolute"},
		{name: "unknown variable", in: []string{"LD_PRELOAD=/x.so"}, wantErr: "unexpected"},
		{name: "no repository known: cleaned only",
			in: []string{"GIT_OBJECT_DIRECTORY=/a/./b//c"}, want: []string{"GIT_OBJECT_DIRECTORY=/a/b/c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := quarantineEnv(tc.in, tc.objects)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("quarantineEnv = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestPreparedJudgesUserMoves: a user's move outside a push is judged in
// the prepared phase (refused with the rule, nothing recorded); what
// pre-receive judged is not judged twice; system moves are not judged; a
// request with no actor moves nothing.
func TestPreparedJudgesUserMoves(t *testing.T) {
	s := newTestServer(t, Config{})
	pol := &recordingPolicy{err: problem.New(problem.Forbidden, `branch "main" is read-only (branch permission #4: read-only on main)`)}
	s.SetPolicy(pol)
	user := &auth.Principal{UserID: 3, Name: "bob"}
	in := line(oidA, oidB, "refs/heads/main") + line(oidA, oidB, "HEAD")

	env, done := s.Register(Request{RepoID: 1, Principal: user, Transport: "rest"})
	code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, in)
	done()
	if code == 0 {
		t.Fatalf("refused move went through")
	}
	msg, ok := Refusal(stderr)
	if !ok || !strings.Contains(msg, "branch permission #4") {
		t.Errorf("refusal %q (%v) from stderr %q", msg, ok, stderr)
	}
	if len(pol.updates) != 1 || pol.updates[0].Ref != "refs/heads/main" || pol.qenv != nil {
		t.Errorf("policy saw %+v, qenv %v; want the branch alone, no quarantine", pol.updates, pol.qenv)
	}
	if got := state(t, s.st, 1); got.Generation != 0 || got.Pending != 0 {
		t.Errorf("refused move recorded: %+v", got)
	}

	// A merge carries ViaPullRequest to the policy.
	pol.err = nil
	env, done = s.Register(Request{RepoID: 1, Principal: user, Transport: "pull", ViaPullRequest: true})
	if code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, in); code != 0 {
		t.Fatalf("allowed merge: exit %d %q", code, stderr)
	}
	if !pol.req.ViaPullRequest {
		t.Errorf("policy did not hear the move is a merge")
	}
	run(t, env, "reference-transaction", []string{"committed"}, in)
	done()

	// Judged once: pre-receive passed it, prepared does not ask again.
	env, done = s.Register(Request{RepoID: 1, Principal: user, Transport: "http"})
	if code, _ := run(t, env, "pre-receive", nil, line(oidB, oidA, "refs/heads/main")); code != 0 {
		t.Fatalf("pre-receive refused")
	}
	pol.err = errors.New("must not be asked again")
	if code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, line(oidB, oidA, "refs/heads/main")); code != 0 {
		t.Fatalf("prepared after pre-receive: exit %d %q", code, stderr)
	}
	run(t, env, "reference-transaction", []string{"committed"}, line(oidB, oidA, "refs/heads/main"))
	done()

	// The server's own moves are recorded, not judged.
	pol.updates = nil
	env, done = s.Register(Request{RepoID: 2, System: true, Transport: "pull"})
	if code, stderr := run(t, env, "reference-transaction", []string{"prepared"}, line(zero, oidA, "refs/pull-requests/1/from")); code != 0 {
		t.Fatalf("system move: exit %d %q", code, stderr)
	}
	done()
	if pol.updates != nil {
		t.Errorf("system move judged: %+v", pol.updates)
	}
	if got := state(t, s.st, 2); got.Generation == 0 {
		t.Errorf("system move not recorded: %+v", got)
	}

	// No actor, no move.
	env, done = s.Register(Request{RepoID: 3, Transport: "api"})
	defer done()
	if code, _ := run(t, env, "reference-transaction", []string{"prepared"}, line(zero, oidA, "refs/heads/x")); code == 0 {
		t.Errorf("a move with no actor went through")
	}
}

// A crashed process's hook socket (nobody listens on it) is removed when
// the next server starts in the same directory; a live one is kept.
func TestDeadSocketsRemoved(t *testing.T) {
	dir := t.TempDir()
	live, err := NewServer(Config{NodeID: "n", SocketDir: dir}, newFakeStore(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dead := filepath.Join(dir, "hooks-dead.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: dead, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // as a killed process leaves it
	ln.Close()
	// A temporary socket directory a crashed process left (its data
	// directory's path was too long for a socket).
	tmpDir, err := os.MkdirTemp("", "sluice-hooks-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmpDir)
	ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(tmpDir, "hooks-x.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()

	next, err := NewServer(Config{NodeID: "n", SocketDir: dir}, newFakeStore(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("dead socket still there: %v", err)
	}
	if _, err := os.Lstat(tmpDir); !os.IsNotExist(err) {
		t.Errorf("dead socket directory still there: %v", err)
	}
	if _, err := os.Lstat(live.SocketPath()); err != nil {
		t.Errorf("live socket removed: %v", err)
	}
}
