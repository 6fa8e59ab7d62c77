package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/pgtest"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// TestMain runs the tests against a PostgreSQL server and then fails the
// package if a goroutine they started is still running.
func TestMain(m *testing.M) { pgtest.Main(m, func() error { return goleak.Find() }) }

func openStore(t *testing.T, dialect string) *store.DB {
	t.Helper()
	url := "sqlite://" + filepath.Join(t.TempDir(), "sluice.db")
	if dialect == "postgres" {
		url = pgtest.URL(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func nodeByID(t *testing.T, nodes []store.Node, id string) store.Node {
	t.Helper()
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("node %q not listed in %+v", id, nodes)
	return store.Node{}
}

func TestRegistry(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			db := openStore(t, dialect)
			ctx := context.Background()
			newReg := func(id string, beat, gone time.Duration) *Registry {
				r, err := NewRegistry(db, Config{NodeID: id, Address: "10.0.0.1:7990", SSHAddress: "10.0.0.1:7999",
					Version: "v-test", HeartbeatInterval: beat, GoneAfter: gone}, nil, prometheus.NewRegistry())
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			// a beats fast; b never beats within the test, so it goes gone.
			a := newReg("a", 50*time.Millisecond, 400*time.Millisecond)
			b := newReg("b", time.Hour, 400*time.Millisecond)
			for _, r := range []*Registry{a, b} {
				if err := r.Start(ctx); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { a.Stop(ctx); b.Stop(ctx) })

			nodes, err := a.Nodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(nodes) != 2 {
				t.Fatalf("got %d nodes, want 2", len(nodes))
			}
			na := nodeByID(t, nodes, "a")
			if !na.Live || State(na) != "live" || na.Address != "10.0.0.1:7990" || na.SSHAddress != "10.0.0.1:7999" || na.Version != "v-test" {
				t.Fatalf("node a = %+v", na)
			}
			if d := time.Since(na.StartedAt); d < -time.Minute || d > time.Minute {
				t.Errorf("started_at %v is not about now", na.StartedAt)
			}

			time.Sleep(700 * time.Millisecond)
			nodes, err = a.Nodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			na, nb := nodeByID(t, nodes, "a"), nodeByID(t, nodes, "b")
			if !na.Live {
				t.Errorf("heart-beating node a is %s (age %v)", State(na), na.HeartbeatAge)
			}
			if nb.Live || nb.HeartbeatAge < 400*time.Millisecond {
				t.Errorf("silent node b is %s (age %v), want gone", State(nb), nb.HeartbeatAge)
			}
			if !na.HeartbeatAt.After(na.StartedAt) {
				t.Errorf("a's heartbeat %v did not move past its start %v", na.HeartbeatAt, na.StartedAt)
			}

			// A row that vanished (pruned by another node) is re-created
			// by the next heartbeat.
			if _, err := db.PruneNodes(ctx, 0); err != nil {
				t.Fatal(err)
			}
			wait.For(t, "the condition", 5*time.Second, func() bool {
				nodes, err := a.Nodes(ctx)
				return err == nil && len(nodes) == 1 && nodes[0].ID == "a" && nodes[0].Live
			})

			// Clean shutdown deregisters.
			if err := a.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			nodes, err = b.Nodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(nodes) != 0 {
				t.Fatalf("after a stopped, nodes = %+v", nodes)
			}
		})
	}
}

// A process that restarts under the same id replaces the old registration;
// the old instance's heartbeat no longer refreshes it.
func TestRegistryInstance(t *testing.T) {
	db := openStore(t, "sqlite")
	ctx := context.Background()
	if err := db.RegisterNode(ctx, store.Node{ID: "n"}, "old"); err != nil {
		t.Fatal(err)
	}
	if err := db.RegisterNode(ctx, store.Node{ID: "n", Address: "new:1"}, "new"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		instance string
		want     bool
	}{{"old", false}, {"new", true}} {
		ok, err := db.HeartbeatNode(ctx, "n", tc.instance)
		if err != nil || ok != tc.want {
			t.Errorf("HeartbeatNode(%s) = %v, %v; want %v", tc.instance, ok, err, tc.want)
		}
	}
	if err := db.DeregisterNode(ctx, "n", "old"); err != nil {
		t.Fatal(err)
	}
	n, err := db.NodeByID(ctx, "n", time.Minute)
	if err != nil || n.Address != "new:1" {
		t.Fatalf("NodeByID = %+v, %v", n, err)
	}
	if _, err := db.NodeByID(ctx, "missing", time.Minute); !problem.Is(err, problem.NotFound) {
		t.Fatalf("missing node: %v", err)
	}
}

// recorder collects a topic's payloads.
type recorder struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 100)} }

func (r *recorder) fn(p []byte) {
	r.mu.Lock()
	r.got = append(r.got, string(p))
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *recorder) wait(t *testing.T, want ...string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got := strings.Join(r.got, ",")
		r.mu.Unlock()
		if got == strings.Join(want, ",") {
			return
		}
		select {
		case <-r.ch:
		case <-timeout:
			t.Fatalf("received %q, want %q", got, want)
		}
	}
}

func TestLocalBus(t *testing.T) {
	b, err := NewLocalBus(nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	refs, settings := newRecorder(), newRecorder()
	b.Subscribe(TopicRefs, refs.fn)
	b.Subscribe(TopicSettings, settings.fn)
	ctx := context.Background()
	for _, ev := range [][2]string{{TopicRefs, "1"}, {TopicSettings, "rate_limits"}, {TopicRefs, "2"}, {"nobody", "x"}} {
		if err := b.Publish(ctx, ev[0], []byte(ev[1])); err != nil {
			t.Fatal(err)
		}
	}
	refs.wait(t, "1", "2")
	settings.wait(t, "rate_limits")
}

func TestEventValidation(t *testing.T) {
	b, _ := NewLocalBus(nil, nil)
	for _, tc := range []struct {
		topic   string
		payload int
		ok      bool
	}{
		{"refs", 10, true},
		{"refs", MaxPayload, true},
		{"refs", MaxPayload + 1, false},
		{"", 1, false},
		{"Refs", 1, false},
		{"re fs", 1, false},
		{"refs;drop", 1, false},
		{strings.Repeat("a", 41), 1, false},
	} {
		err := b.Publish(context.Background(), tc.topic, make([]byte, tc.payload))
		if (err == nil) != tc.ok {
			t.Errorf("Publish(%q, %d bytes) = %v, want ok=%v", tc.topic, tc.payload, err, tc.ok)
		}
	}
}

func TestPGBus(t *testing.T) {
	db1, db2 := openStore(t, "postgres"), (*store.DB)(nil)
	// A second pool on the same database stands for a second node.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := db1.Pgx().Config().ConnString()
	db2, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()

	newBus := func(db *store.DB) *PGBus {
		b, err := NewPGBus(db.Pgx(), nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b1, b2 := newBus(db1), newBus(db2)
	refs1, refs2, settings2 := newRecorder(), newRecorder(), newRecorder()
	b1.Subscribe(TopicRefs, refs1.fn)
	b2.Subscribe(TopicRefs, refs2.fn)
	resynced, lost := make(chan struct{}, 10), make(chan struct{}, 10)
	b2.OnResync(func() { resynced <- struct{}{} })
	b2.OnLost(func() { lost <- struct{}{} })
	for _, b := range []*PGBus{b1, b2} {
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Any bytes survive the trip, NUL included.
	if err := b1.Publish(ctx, TopicRefs, []byte("42\x00é")); err != nil {
		t.Fatal(err)
	}
	refs1.wait(t, "42\x00é")
	refs2.wait(t, "42\x00é")

	// Subscribing after Start LISTENs on the running connection.
	b2.Subscribe(TopicSettings, settings2.fn)
	wait.For(t, "the condition", 10*time.Second, func() bool {
		if err := b1.Publish(ctx, TopicSettings, []byte("rate_limits")); err != nil {
			t.Fatal(err)
		}
		settings2.mu.Lock()
		defer settings2.mu.Unlock()
		return len(settings2.got) > 0
	})

	select {
	case <-lost:
		t.Fatal("lost callback before any connection was lost")
	default:
	}
	// Kill b2's listening session: it calls the lost callbacks, reconnects
	// by itself, calls the resync callbacks, and receives events again.
	if _, err := db1.Pgx().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("no lost callback after the listener's session was killed")
	}
	select {
	case <-resynced:
	case <-ctx.Done():
		t.Fatal("no resync after the listener's session was killed")
	}
	if err := b2.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	// b1's session may have been killed too; publish until b2 hears.
	wait.For(t, "the condition", 10*time.Second, func() bool {
		b1.Publish(ctx, TopicRefs, []byte("43"))
		refs2.mu.Lock()
		defer refs2.mu.Unlock()
		return len(refs2.got) > 0 && refs2.got[len(refs2.got)-1] == "43"
	})
}

func TestLockSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	l1, err := LockSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockSQLite(path)
	if !problem.Is(err, problem.Unavailable) {
		t.Fatalf("second lock: %v, want Unavailable", err)
	}
	msg := problem.Message(err)
	for _, want := range []string{"another sluice server is using " + path, "pid ", "use PostgreSQL for a cluster"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if err := l1.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockSQLite(path)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

// ProcessLive tells a running process start from one whose node restarted,
// deregistered or stopped beating: what the hooks reconciler needs before
// it finishes a ref transaction that process recorded.
func TestProcessLive(t *testing.T) {
	db := openStore(t, "sqlite")
	ctx := context.Background()
	self, err := NewRegistry(db, Config{NodeID: "self", Instance: "self-1", GoneAfter: 300 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if self.Instance() != "self-1" {
		t.Fatalf("Instance = %q", self.Instance())
	}
	if err := db.RegisterNode(ctx, store.Node{ID: "n"}, "n-1"); err != nil {
		t.Fatal(err)
	}
	if err := db.RegisterNode(ctx, store.Node{ID: "n"}, "n-2"); err != nil { // n restarted
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node, instance string
		want           bool
	}{
		{"self", "self-1", true}, // this process, registered or not
		{"n", "n-2", true},
		{"n", "n-1", false}, // replaced by the restart
		{"gone", "g-1", false},
		{"n", "", true}, // an old release's record: judged by node id
		{"gone", "", false},
	} {
		got, err := self.ProcessLive(ctx, tc.node, tc.instance)
		if err != nil || got != tc.want {
			t.Errorf("ProcessLive(%q, %q) = %v, %v; want %v", tc.node, tc.instance, got, err, tc.want)
		}
	}
	// Without heartbeats, n's process counts as gone after GoneAfter.
	wait.For(t, "the condition", 5*time.Second, func() bool {
		live, err := self.ProcessLive(ctx, "n", "n-2")
		return err == nil && !live
	})
	if a, _ := NewRegistry(db, Config{NodeID: "x"}, nil, nil); len(a.Instance()) != 16 {
		t.Errorf("default instance = %q, want 16 random hex digits", a.Instance())
	}
}
