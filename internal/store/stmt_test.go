package store

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

func openTestSQLite(t *testing.T) *DB {
	t.Helper()
	d, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func (c *stmtCache) len() int {
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	return n
}

// TestStatementsReused: on SQLite a query text is prepared once and its
// statement reused, whatever the arguments; queries built from their
// arguments stay out of the cache; a bad query still fails as before.
func TestStatementsReused(t *testing.T) {
	t.Parallel()
	d := openTestSQLite(t)
	ctx := context.Background()
	for i := range 3 {
		u := &User{Name: fmt.Sprintf("u%d", i), DisplayName: "U", Email: fmt.Sprintf("u%d@example.com", i), Active: true}
		if err := d.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	before := d.stmts.len()
	for i := range 20 {
		if _, err := d.UserByName(ctx, fmt.Sprintf("u%d", i%3)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.UserByName(ctx, "nobody"); !problem.Is(err, problem.NotFound) {
		t.Fatalf("unknown user: %v", err)
	}
	if got := d.stmts.len(); got != before+1 {
		t.Errorf("statements after 21 reads of one query: %d, want %d", got, before+1)
	}

	before = d.stmts.len()
	for n := 1; n <= 5; n++ {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(1000 + i)
		}
		if _, err := d.MarkNotificationsRead(ctx, 1, ids); err != nil {
			t.Fatal(err)
		}
		refs := make([]string, n)
		for i := range refs {
			refs[i] = fmt.Sprintf("refs/heads/b%d", i)
		}
		if _, err := d.OpenPullRequestsTouching(ctx, 1, refs); err != nil {
			t.Fatal(err)
		}
	}
	// The one-branch lookup every push makes is the one text kept.
	if got := d.stmts.len(); got != before+1 {
		t.Errorf("argument-built queries were cached: %d statements, want %d", got, before+1)
	}

	before = d.stmts.len()
	if err := d.queryRow(ctx, "SELECT no_such_column FROM users").Scan(new(int)); err == nil {
		t.Error("a bad query succeeded")
	}
	if got := d.stmts.len(); got != before {
		t.Errorf("a bad query was cached")
	}
}

// TestStatementCacheFull: past the bound, queries run unprepared and
// still answer.
func TestStatementCacheFull(t *testing.T) {
	t.Parallel()
	d := openTestSQLite(t)
	ctx := context.Background()
	d.stmts.n.Store(maxStmts)
	before := d.stmts.len()
	var n int
	if err := d.queryRow(ctx, "SELECT COUNT(*) + 41 FROM users").Scan(&n); err != nil || n != 41 {
		t.Fatalf("query past the bound: %d, %v", n, err)
	}
	if got := d.stmts.len(); got != before {
		t.Errorf("cache grew past its bound: %d, want %d", got, before)
	}
}
