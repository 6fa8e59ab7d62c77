package hooks

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// crashBed is a bare repository served by hooks servers sharing one store,
// as the nodes of a cluster share the database and the repositories.
type crashBed struct {
	t        *testing.T
	st       *fakeStore
	refs     *repo.Manager
	env      []string
	hooksDir string
	remote   string
	work     string

	mu      sync.Mutex
	changed []RefUpdate
	pushed  []Request
	updates []RefUpdate
}

func newCrashBed(t *testing.T) *crashBed {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	tmp := t.TempDir()
	b := &crashBed{t: t, st: newFakeStore(), env: gitEnv(tmp), hooksDir: installHooks(t, tmp), work: filepath.Join(tmp, "work")}
	b.refs = repo.NewManager(filepath.Join(tmp, "repos"), nil, slog.New(slog.DiscardHandler))
	b.remote = b.refs.Path(1)
	mustGit(t, tmp, b.env, "init", "-q", "--bare", b.remote)
	mustGit(t, tmp, b.env, "init", "-q", "-b", "main", b.work)
	return b
}

// server starts a node's hooks server with the reconciler wired as app
// wires it.
func (b *crashBed) server(cfg Config) *Server {
	b.t.Helper()
	cfg.SocketDir = b.t.TempDir()
	cfg.Refs = b.refs
	s, err := NewServer(cfg, b.st, nil, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { s.Close() })
	s.OnRefsChanged(func(_ int64, u []RefUpdate) {
		b.mu.Lock()
		b.changed = append(b.changed, u...)
		b.mu.Unlock()
	})
	s.OnPushed(func(req Request, u []RefUpdate) {
		b.mu.Lock()
		b.pushed = append(b.pushed, req)
		b.updates = append(b.updates, u...)
		b.mu.Unlock()
	})
	return s
}

func (b *crashBed) commit(msg string) string {
	b.t.Helper()
	os.WriteFile(filepath.Join(b.work, "f"), []byte(msg), 0o644)
	mustGit(b.t, b.work, b.env, "add", "f")
	mustGit(b.t, b.work, b.env, "commit", "-q", "-m", msg)
	return strings.TrimSpace(mustGit(b.t, b.work, b.env, "rev-parse", "HEAD"))
}

// pushCmd is a push of HEAD to main through s, in a process group of its
// own so that a test can kill git with every child, like a node dying
// with its processes.
func (b *crashBed) pushCmd(s *Server) (*exec.Cmd, func()) {
	hookEnv, done := s.Register(Request{RepoID: 1, Transport: "test", Principal: &auth.Principal{Name: "bob"}, System: true})
	receivePack := "git -c core.hooksPath='" + b.hooksDir + "' receive-pack"
	cmd := exec.Command("git", "push", "--receive-pack="+receivePack, b.remote, "HEAD:refs/heads/main")
	cmd.Dir = b.work
	cmd.Env = append(b.env, hookEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, done
}

func (b *crashBed) push(s *Server) error {
	b.t.Helper()
	cmd, done := b.pushCmd(s)
	defer done()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errors.New(string(out))
	}
	return nil
}

// killInside pushes through s and kills git and its children while they
// are inside phase, then lets s's call return as a dead node's never
// would be answered. done is never called: the node is gone.
func (b *crashBed) killInside(cfg Config, phase string) *Server {
	b.t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfg.TestPhaseHook = func(p string, _ int64) error {
		if p != phase {
			return nil
		}
		once.Do(func() { close(entered) })
		<-release
		return errors.New("node died")
	}
	s := b.server(cfg)
	defer close(release)
	cmd, _ := b.pushCmd(s)
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		b.t.Fatalf("git never reached %s", phase)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	return s
}

func (b *crashBed) rev(ref string) string {
	out, _ := git(b.t, b.remote, b.env, "rev-parse", "--verify", "-q", ref)
	return strings.TrimSpace(out)
}

// A node killed with its git inside the prepared window leaves main.lock
// and a pending transaction; restarting the node removes the lock at once
// and the next push to main succeeds.
func TestReconcileDeadLockAfterRestart(t *testing.T) {
	b := newCrashBed(t)
	c1 := b.commit("one")
	first := b.server(Config{NodeID: "node-1"})
	if err := b.push(first); err != nil {
		t.Fatalf("first push: %v", err)
	}
	c2 := b.commit("two")
	b.killInside(Config{NodeID: "node-1", Instance: "run-1"}, "prepared")
	lock := filepath.Join(b.remote, "refs", "heads", "main.lock")
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("no lock left behind; the test proves nothing: %v", err)
	}
	if got := state(t, b.st, 1); got.Pending != 1 {
		t.Fatalf("state = %+v, want the killed transaction pending", got)
	}
	if err := b.push(first); err == nil || !strings.Contains(err.Error(), "File exists") {
		t.Fatalf("push past the dead lock: %v; want git's lock error", err)
	}

	// The node restarts: a new process of node-1.
	start := time.Now()
	restarted := b.server(Config{NodeID: "node-1", Instance: "run-2"})
	if err := restarted.Reconcile(context.Background()); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := state(t, b.st, 1); got.Pending != 0 {
		t.Errorf("state = %+v, want nothing pending", got)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("dead lock still there: %v", err)
	}
	if err := b.push(restarted); err != nil {
		t.Fatalf("push after the restart: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the branch took %v to take pushes again", took)
	}
	if got := b.rev("refs/heads/main"); got != c2 {
		t.Errorf("main = %s, want %s (was %s)", got, c2, c1)
	}
	// The killed transaction aborted: only the two real pushes announced.
	// OnPushed listeners run in the background, after the push returns.
	wait.For(t, "the two pushes announced", 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pushed) >= 2
	})
	restarted.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pushed) != 2 {
		t.Errorf("OnPushed ran %d times, want 2 (the aborted transaction moved nothing)", len(b.pushed))
	}
}

// A node killed between git's rename and the record: the ref moved and
// nobody heard. A live node, once the dead one is gone and the transaction
// old enough, announces it as committed; a live node's transaction is
// never touched.
func TestReconcileCommittedForGoneNode(t *testing.T) {
	b := newCrashBed(t)
	c1 := b.commit("one")
	b.killInside(Config{NodeID: "node-1", Instance: "dead"}, "committed")
	if got := b.rev("refs/heads/main"); got != c1 {
		t.Fatalf("main = %q, want the killed push's %s (git renamed before committed)", got, c1)
	}
	ctx := context.Background()
	liveID, _ := b.st.BeginRefTxn(ctx, 1, "node-3", "alive", line(c1, oidB, "refs/heads/other"))
	b.mu.Lock()
	b.changed, b.pushed, b.updates = nil, nil, nil
	b.mu.Unlock()

	var asked []string
	live := b.server(Config{NodeID: "node-2", AbandonAfter: time.Nanosecond,
		ProcessLive: func(_ context.Context, node, instance string) (bool, error) {
			asked = append(asked, node+"/"+instance)
			return instance == "alive", nil
		}})
	if err := live.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := state(t, b.st, 1); got.Pending != 1 {
		t.Errorf("state = %+v, want only the live node's transaction pending", got)
	}
	if _, ok := b.st.ended[liveID]; ok {
		t.Error("a live node's transaction was ended")
	}
	var deadID int64
	for id, committed := range b.st.ended {
		deadID = id
		if !committed {
			t.Errorf("txn %d ended as not committed; main moved", id)
		}
	}
	if deadID == 0 {
		t.Fatal("the dead node's transaction was not ended")
	}
	want := RefUpdate{Old: zero, New: c1, Ref: "refs/heads/main"}
	b.mu.Lock()
	if len(b.changed) != 1 || b.changed[0] != want || len(b.updates) != 1 || b.updates[0] != want ||
		!b.pushed[0].System || b.pushed[0].RepoID != 1 {
		t.Errorf("announced changed=%v pushed=%v %v; want %v once", b.changed, b.pushed, b.updates, want)
	}
	b.mu.Unlock()
	slices.Sort(asked)
	if strings.Join(asked, ",") != "node-1/dead,node-3/alive" {
		t.Errorf("ProcessLive asked %v", asked)
	}

	// Too young: a node that is only paused may still have git inside
	// its hook.
	young := b.server(Config{NodeID: "node-4", AbandonAfter: time.Hour,
		ProcessLive: func(context.Context, string, string) (bool, error) { return false, nil }})
	if err := young.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.st.ended[liveID]; ok {
		t.Error("a transaction younger than AbandonAfter was ended")
	}
}

// The database is away when committed runs: the push succeeds, the record
// stays pending and nobody is told. Once the database is back, the
// background reconciler announces the move, with the pusher, and ends it.
func TestReconcileAfterDatabaseOutage(t *testing.T) {
	b := newCrashBed(t)
	c1 := b.commit("one")
	s := b.server(Config{NodeID: "node-1", ReconcileInterval: 20 * time.Millisecond})
	b.st.set(func() { b.st.failEnd = true })
	if err := b.push(s); err != nil {
		t.Fatalf("push: %v", err)
	}
	if got := b.rev("refs/heads/main"); got != c1 {
		t.Fatalf("main = %q, want %s", got, c1)
	}
	// Let the reconciler make a few passes while the database is away.
	var passes int
	b.st.set(func() { passes = b.st.lists })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var now int
		b.st.set(func() { now = b.st.lists })
		if now >= passes+3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background reconciler does not run")
		}
	}
	if got := state(t, b.st, 1); got.Pending != 1 {
		t.Fatalf("state = %+v, want the transaction pending while the database is away", got)
	}
	b.mu.Lock()
	if len(b.pushed) != 0 {
		t.Fatalf("announced while the database was away: %v", b.updates)
	}
	b.mu.Unlock()

	b.st.set(func() { b.st.failEnd = false })
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.pushed)
		b.mu.Unlock()
		if n > 0 && state(t, b.st, 1).Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not reconciled within 5s of the database's return: state %+v, %d announcements", state(t, b.st, 1), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	want := RefUpdate{Old: zero, New: c1, Ref: "refs/heads/main"}
	if len(b.updates) != 1 || b.updates[0] != want || b.pushed[0].Principal == nil || b.pushed[0].Principal.Name != "bob" {
		t.Errorf("OnPushed got %v %v, want %v by bob", b.pushed, b.updates, want)
	}
	for id, committed := range b.st.ended {
		if !committed {
			t.Errorf("txn %d ended as not committed", id)
		}
	}
}

// A node killed after git locked the ref and before the prepared hook
// recorded the transaction leaves main.lock that no transaction names; the
// restarted node finds it through the dead process's git run and removes
// it at once.
func TestReconcileUnrecordedLockAfterRestart(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	first := b.server(Config{NodeID: "node-1"})
	if err := b.push(first); err != nil {
		t.Fatalf("first push: %v", err)
	}
	c2 := b.commit("two")
	b.killInside(Config{NodeID: "node-1", Instance: "run-1"}, "preparing")
	lock := filepath.Join(b.remote, "refs", "heads", "main.lock")
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("no lock left behind; the test proves nothing: %v", err)
	}
	if got := state(t, b.st, 1); got.Pending != 0 {
		t.Fatalf("state = %+v, want no transaction recorded", got)
	}
	if err := b.push(first); err == nil || !strings.Contains(err.Error(), "File exists") {
		t.Fatalf("push past the dead lock: %v; want git's lock error", err)
	}

	restarted := b.server(Config{NodeID: "node-1", Instance: "run-2"})
	if err := restarted.Reconcile(context.Background()); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("dead lock still there: %v", err)
	}
	if runs, _ := b.st.GitRuns(context.Background()); len(runs) != 0 {
		t.Errorf("git runs left: %+v", runs)
	}
	if err := b.push(restarted); err != nil {
		t.Fatalf("push after the restart: %v", err)
	}
	if got := b.rev("refs/heads/main"); got != c2 {
		t.Errorf("main = %s, want %s", got, c2)
	}
}

// quarantines lists the push quarantines of the bed's repository.
func (b *crashBed) quarantines() []string {
	b.t.Helper()
	m, _ := filepath.Glob(filepath.Join(b.remote, "objects", "tmp_objdir-incoming-*"))
	return m
}

// A node killed while its push's objects are in quarantine leaves the
// quarantine; the restarted node removes it.
func TestReconcileDeadQuarantineAfterRestart(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	b.killInside(Config{NodeID: "node-1", Instance: "run-1"}, "pre-receive")
	if len(b.quarantines()) == 0 {
		t.Fatal("no quarantine left behind; the test proves nothing")
	}
	restarted := b.server(Config{NodeID: "node-1", Instance: "run-2"})
	if err := restarted.Reconcile(context.Background()); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if q := b.quarantines(); len(q) != 0 {
		t.Errorf("quarantine still there: %v", q)
	}
}

// Another node's dead git run is cleaned up by a live node once it is
// AbandonAfter old and its process gone, but not while a live git of the
// repository started before the leftover: that git could own it.
func TestReconcileDeadRunOfGoneNode(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	b.killInside(Config{NodeID: "node-1", Instance: "dead"}, "preparing")
	lock := filepath.Join(b.remote, "refs", "heads", "main.lock")
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("no lock left behind: %v", err)
	}
	ctx := context.Background()
	// A live node's git of the same repository, older than the lock.
	var liveRun int64
	b.st.set(func() {
		b.st.nextRun++
		liveRun = b.st.nextRun
		b.st.runs[liveRun] = store.GitRun{ID: liveRun, RepoID: 1, NodeID: "node-3", Instance: "alive", StartedAt: time.Now().Add(-time.Minute)}
	})
	processLive := func(_ context.Context, _, instance string) (bool, error) { return instance == "alive", nil }

	young := b.server(Config{NodeID: "node-2", AbandonAfter: time.Hour, ProcessLive: processLive})
	if err := young.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("a lock of a run younger than AbandonAfter was removed: %v", err)
	}

	live := b.server(Config{NodeID: "node-2", AbandonAfter: time.Nanosecond, ProcessLive: processLive})
	if err := live.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("a lock younger than a live git's start was removed: %v", err)
	}
	if runs, _ := b.st.GitRuns(ctx); len(runs) != 2 {
		t.Fatalf("git runs = %+v, want the dead one kept for a later pass and the live one", runs)
	}

	b.st.EndGitRun(ctx, liveRun)
	if err := live.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("dead lock still there once no live git could own it: %v", err)
	}
	if runs, _ := b.st.GitRuns(ctx); len(runs) != 0 {
		t.Errorf("git runs left: %+v", runs)
	}
}

// A registration whose git run cannot be recorded moves nothing: its
// hooks refuse, so no unrecorded git can leave a lock behind.
func TestUnrecordedRunRefused(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	s := b.server(Config{NodeID: "node-1"})
	b.st.set(func() { b.st.failRuns = true })
	err := b.push(s)
	if err == nil || !strings.Contains(err.Error(), "could not be recorded") {
		t.Fatalf("push without a git run record: %v; want it refused", err)
	}
	if got := b.rev("refs/heads/main"); got != "" {
		t.Errorf("main moved to %s", got)
	}
	b.st.set(func() { b.st.failRuns = false })
	if err := b.push(s); err != nil {
		t.Fatalf("push once the database is back: %v", err)
	}
	if runs, _ := b.st.GitRuns(context.Background()); len(runs) != 0 {
		t.Errorf("git runs left after the push: %+v", runs)
	}
}

// A run whose end could not be recorded is ended by the reconciler.
func TestEndedRunRetried(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	s := b.server(Config{NodeID: "node-1"})
	cmd, done := b.pushCmd(s)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("push: %v: %s", err, out)
	}
	b.st.set(func() { b.st.failRuns = true })
	done()
	b.st.set(func() { b.st.failRuns = false })
	if runs, _ := b.st.GitRuns(context.Background()); len(runs) != 1 {
		t.Fatalf("git runs = %+v, want the unended one", runs)
	}
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if runs, _ := b.st.GitRuns(context.Background()); len(runs) != 0 {
		t.Errorf("git runs left: %+v", runs)
	}
}

// A dead lock that a live git's run bounds at the restart (a push in
// flight on another node right after the crash) is removed by the
// background reconciler once that run has ended, after clockMargin, not a
// whole ReconcileInterval later.
func TestReconcileDeadRunRetriedSoon(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	b.killInside(Config{NodeID: "node-1", Instance: "run-1"}, "preparing")
	lock := filepath.Join(b.remote, "refs", "heads", "main.lock")
	ctx := context.Background()
	fi, err := os.Stat(lock)
	if err != nil {
		t.Fatalf("no lock left behind: %v", err)
	}
	// A live run that started before the lock was taken could own it, so
	// it bounds the cleanup, however loaded the machine running the test.
	var liveRun int64
	b.st.set(func() {
		b.st.nextRun++
		liveRun = b.st.nextRun
		b.st.runs[liveRun] = store.GitRun{ID: liveRun, RepoID: 1, NodeID: "node-3", Instance: "alive", StartedAt: fi.ModTime().Add(-time.Second)}
	})
	restarted := b.server(Config{NodeID: "node-1", Instance: "run-2", ReconcileInterval: time.Hour,
		ProcessLive: func(_ context.Context, _, instance string) (bool, error) { return instance == "alive", nil }})
	if err := restarted.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("removed while a live run bounds it: %v", err)
	}
	b.st.EndGitRun(ctx, liveRun)
	wait.For(t, "the dead lock removed by the background reconciler", 10*time.Second, func() bool {
		_, err := os.Stat(lock)
		return os.IsNotExist(err)
	})
}

// A run of another node that restarted since (its process is dead, its
// node live under another instance) does not hold up the cleanup of this
// node's dead run, although it is too young for this node to clean.
func TestReplacedRunDoesNotBound(t *testing.T) {
	b := newCrashBed(t)
	b.commit("one")
	b.killInside(Config{NodeID: "node-2", Instance: "run-1"}, "preparing")
	lock := filepath.Join(b.remote, "refs", "heads", "main.lock")
	ctx := context.Background()
	var replaced int64
	b.st.set(func() {
		b.st.nextRun++
		replaced = b.st.nextRun
		b.st.runs[replaced] = store.GitRun{ID: replaced, RepoID: 1, NodeID: "node-1", Instance: "old", StartedAt: time.Now().Add(-10 * time.Second)}
	})
	restarted := b.server(Config{NodeID: "node-2", Instance: "run-2", AbandonAfter: time.Hour,
		ProcessLive: func(_ context.Context, node, instance string) (bool, error) {
			return node == "node-1" && instance == "", nil // node-1 runs a new process
		}})
	if err := restarted.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Errorf("dead lock still there: %v", err)
	}
	runs, _ := b.st.GitRuns(ctx)
	if len(runs) != 1 || runs[0].ID != replaced {
		t.Errorf("git runs = %+v, want only the replaced one, left to its own node", runs)
	}
}
