package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/pgtest"
)

// TestPostgresAcquireTimeout: with every pooled connection held (slow
// queries, a database that stopped answering), a query waits
// database.acquire_timeout for one and then fails with Unavailable, not
// as long as its caller's context allows; once a connection is free again
// queries run.
func TestPostgresAcquireTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	db, err := store.Open(context.Background(), pgtest.URL(t), nil,
		store.WithMaxOpenConns(3), store.WithAcquireTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The caller's own deadline is far away: only the acquire timeout
	// can end the wait in time.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := holdAll(t, db, 3)
	// Released before db.Close, which waits for them.
	defer func() {
		for _, c := range held {
			if c != nil {
				c.Release()
			}
		}
	}()
	start := time.Now()
	_, err = db.UserByName(ctx, "x")
	waited := time.Since(start)
	if problem.KindOf(err) != problem.Unavailable {
		t.Fatalf("query on an exhausted pool: %v (%v), want Unavailable", problem.KindOf(err), err)
	}
	if waited < timeout || waited > timeout+5*time.Second {
		t.Errorf("query on an exhausted pool failed after %s, want about %s", waited, timeout)
	}
	if msg := problem.Message(err); msg != "database unavailable: no connection free within 300ms (database.acquire_timeout)" {
		t.Errorf("message %q", msg)
	}
	if problem.RetryAfter(err) < 1 {
		t.Errorf("retry after %d, want at least 1", problem.RetryAfter(err))
	}
	held[0].Release()
	held[0] = nil
	if _, err := db.UserByName(ctx, "x"); problem.KindOf(err) != problem.NotFound {
		t.Fatalf("query with a connection free: %v", err)
	}
}

// holdAll takes n connections straight from the pgx pool, as n slow
// queries would.
func holdAll(t *testing.T, db *store.DB, n int) []*pgxpool.Conn {
	t.Helper()
	var held []*pgxpool.Conn
	for range n {
		c, err := db.Pgx().Acquire(context.Background())
		if err != nil {
			for _, c := range held {
				c.Release()
			}
			t.Fatal(err)
		}
		held = append(held, c)
	}
	return held
}

// TestPostgresCallerDeadlineIsNotUnavailable: a caller whose own context
// ends while waiting for a connection gets its own deadline back, not the
// acquire timeout's 503.
func TestPostgresCallerDeadlineIsNotUnavailable(t *testing.T) {
	t.Parallel()
	db, err := store.Open(context.Background(), pgtest.URL(t), nil,
		store.WithMaxOpenConns(3), store.WithAcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	held := holdAll(t, db, 3)
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := db.UserByName(ctx, "x"); problem.KindOf(err) == problem.Unavailable {
		t.Fatalf("caller's deadline reported as %v", err)
	}
}
