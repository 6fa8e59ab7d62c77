package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestSessions(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSessions(t, open(t).(*store.DB))
		})
	}
}

func testSessions(t *testing.T, db *store.DB) {
	ctx := context.Background()
	u := &store.User{Name: "ann", Active: true}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	now := time.Now().UTC()
	a := &store.Session{Hash: hash("a"), UserID: u.ID, CSRF: "csrf-a", ExpiresAt: now.Add(time.Hour)}
	b := &store.Session{Hash: hash("b"), UserID: u.ID, CSRF: "csrf-b", ExpiresAt: now.Add(time.Hour)}
	old := &store.Session{Hash: hash("old"), UserID: u.ID, CSRF: "csrf-old", ExpiresAt: now.Add(-time.Minute)}
	for _, s := range []*store.Session{a, b, old} {
		if err := db.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.CreateSession(ctx, &store.Session{Hash: hash("a"), UserID: u.ID, CSRF: "x", ExpiresAt: now.Add(time.Hour)}); !problem.Is(err, problem.Conflict) {
		t.Errorf("duplicate session: %v, want conflict", err)
	}
	if err := db.CreateSession(ctx, &store.Session{Hash: hash("c"), UserID: u.ID + 100, CSRF: "x", ExpiresAt: now.Add(time.Hour)}); !problem.Is(err, problem.NotFound) {
		t.Errorf("session of a missing user: %v, want not found", err)
	}

	got, err := db.SessionByHash(ctx, hash("a"), now)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Hash, a.Hash) || got.UserID != u.ID || got.CSRF != "csrf-a" || !got.ExpiresAt.Equal(a.ExpiresAt) {
		t.Errorf("read back %+v, want %+v", got, a)
	}
	if _, err := db.SessionByHash(ctx, hash("old"), now); !problem.Is(err, problem.NotFound) {
		t.Errorf("expired session: %v, want not found", err)
	}
	if _, err := db.SessionByHash(ctx, hash("a"), now.Add(2*time.Hour)); !problem.Is(err, problem.NotFound) {
		t.Errorf("session read after its expiry: %v, want not found", err)
	}

	later := now.Add(3 * time.Hour)
	if err := db.TouchSession(ctx, hash("a"), now, later); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SessionByHash(ctx, hash("a"), now.Add(2*time.Hour)); err != nil {
		t.Errorf("touched session not extended: %v", err)
	}
	if err := db.TouchSession(ctx, hash("nope"), now, later); !problem.Is(err, problem.NotFound) {
		t.Errorf("touch missing session: %v, want not found", err)
	}

	n, err := db.DeleteExpiredSessions(ctx, now)
	if err != nil || n != 1 {
		t.Errorf("DeleteExpiredSessions = %d, %v; want 1", n, err)
	}
	if err := db.DeleteUserSessions(ctx, u.ID, hash("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SessionByHash(ctx, hash("b"), now); !problem.Is(err, problem.NotFound) {
		t.Errorf("other session survived DeleteUserSessions: %v", err)
	}
	if _, err := db.SessionByHash(ctx, hash("a"), now); err != nil {
		t.Errorf("kept session was removed: %v", err)
	}
	if err := db.DeleteSession(ctx, hash("a")); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSession(ctx, hash("a")); err != nil {
		t.Errorf("second sign-out: %v", err)
	}
	if _, err := db.SessionByHash(ctx, hash("a"), now); !problem.Is(err, problem.NotFound) {
		t.Errorf("deleted session still found: %v", err)
	}
	// Deleting the user ends their sessions.
	if err := db.CreateSession(ctx, &store.Session{Hash: hash("d"), UserID: u.ID, CSRF: "x", ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteUser(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SessionByHash(ctx, hash("d"), now); !problem.Is(err, problem.NotFound) {
		t.Errorf("session of a deleted user: %v, want not found", err)
	}
}
