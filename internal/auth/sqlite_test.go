package auth

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
)

// openSQLite opens a fresh real store in a temporary directory.
func openSQLite(t *testing.T) store.Store {
	t.Helper()
	db, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// eachStore runs fn on the fake and on a real SQLite store, so the fake's
// reading of the store contract is checked against the real one.
func eachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("fake", func(t *testing.T) { fn(t, newFakeStore()) })
	t.Run("sqlite", func(t *testing.T) { fn(t, openSQLite(t)) })
}
