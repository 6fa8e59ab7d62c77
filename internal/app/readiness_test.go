package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDB is a database whose pings fail while down, counting them.
type fakeDB struct {
	down  atomic.Bool
	pings atomic.Int32
	// block, when set, holds every ping until it is closed.
	block chan struct{}
}

func (f *fakeDB) ping(ctx context.Context) error {
	f.pings.Add(1)
	if f.block != nil {
		<-f.block
	}
	if f.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, r *readiness) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// TestReadinessStates: /readyz answers 200 "ok" with the database, and
// 503 "read-only" without it when cached reads can be served, 503
// "unavailable" when they cannot; ReadOnly follows.
func TestReadinessStates(t *testing.T) {
	for _, tc := range []struct {
		name        string
		down        bool
		cachedReads bool
		status      int
		body        string
	}{
		{"database up", false, true, 200, "ok\n"},
		{"database up, no cached reads", false, false, 200, "ok\n"},
		{"database down", true, true, 503, "read-only\n"},
		{"database down, no cached reads", true, false, 503, "unavailable\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &fakeDB{}
			db.down.Store(tc.down)
			r := newReadiness(db.ping, tc.cachedReads, slog.New(slog.DiscardHandler))
			status, body := readyz(t, r)
			if status != tc.status || body != tc.body {
				t.Errorf("/readyz = %d %q, want %d %q", status, body, tc.status, tc.body)
			}
			if got := r.ReadOnly(context.Background()); got != tc.down {
				t.Errorf("ReadOnly = %v, want %v", got, tc.down)
			}
		})
	}
}

// TestReadinessProbesAtMostEverySecond: however many checks arrive, the
// database is pinged at most once per readinessEvery, and a change shows
// at the first check after that: recovery within 2 s of the database
// returning takes a probe at most a second old and HAProxy's 1 s checks.
func TestReadinessProbesAtMostEverySecond(t *testing.T) {
	db := &fakeDB{}
	db.down.Store(true)
	r := newReadiness(db.ping, true, slog.New(slog.DiscardHandler))
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }

	for range 50 {
		r.State(context.Background())
	}
	if got := db.pings.Load(); got != 1 {
		t.Fatalf("%d pings for 50 checks within a second, want 1", got)
	}
	db.down.Store(false)
	now = now.Add(readinessEvery - time.Millisecond)
	if s := r.State(context.Background()); s != stateReadOnly {
		t.Fatalf("state %q before the probe is a second old, want the cached %q", s, stateReadOnly)
	}
	now = now.Add(time.Millisecond)
	if s := r.State(context.Background()); s != stateOK {
		t.Fatalf("state %q once the probe is a second old and the database is back, want %q", s, stateOK)
	}
	if got := db.pings.Load(); got != 2 {
		t.Fatalf("%d pings, want 2", got)
	}
}

// TestReadinessDoesNotQueueBehindAProbe: while a probe hangs on a database
// that does not answer, other checks get the last answer at once instead
// of waiting for the probe's timeout (HAProxy would count a timed-out
// check as a failure of the read backend as well).
func TestReadinessDoesNotQueueBehindAProbe(t *testing.T) {
	db := &fakeDB{}
	r := newReadiness(db.ping, true, slog.New(slog.DiscardHandler))
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	if s := r.State(context.Background()); s != stateOK {
		t.Fatalf("first state %q", s)
	}
	mu.Lock()
	now = now.Add(2 * readinessEvery)
	mu.Unlock()
	db.block = make(chan struct{})
	db.down.Store(true)
	probing := make(chan string)
	go func() { probing <- r.State(context.Background()) }()
	for db.pings.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if s := r.State(context.Background()); s != stateOK {
		t.Errorf("state during a probe %q, want the last answer %q", s, stateOK)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a check during a probe took %v", d)
	}
	close(db.block)
	if s := <-probing; s != stateReadOnly {
		t.Errorf("the probe found %q, want %q", s, stateReadOnly)
	}
}

// TestReadinessIgnoresClientHangUp: a health check that hangs up while
// the probe runs does not record the database as down.
func TestReadinessIgnoresClientHangUp(t *testing.T) {
	r := newReadiness(func(ctx context.Context) error {
		time.Sleep(20 * time.Millisecond)
		return ctx.Err()
	}, true, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s := r.State(ctx); s != stateOK {
		t.Errorf("state %q after a canceled check, want %q", s, stateOK)
	}
}

var _ http.Handler = (*readiness)(nil)
