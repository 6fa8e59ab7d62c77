package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/store/storetest"
	"github.com/sluice-scm/sluice/internal/testbed/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openSQLite(t *testing.T) store.Store {
	db, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t *testing.T) store.Store {
	db, err := store.Open(context.Background(), pgtest.URL(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, openSQLite)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	storetest.Run(t, openPostgres)
}

func TestOpenSQLitePragmasOnEveryConnection(t *testing.T) {
	t.Parallel()
	db := openSQLite(t).(*store.DB)
	if db.Pgx() != nil {
		t.Error("Pgx() on SQLite is not nil")
	}
	ctx := context.Background()
	// Hold several connections at once so the pool has to open new ones.
	var conns []*sql.Conn
	for range 4 {
		c, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		for _, tc := range []struct{ pragma, want string }{
			{"journal_mode", "wal"},
			{"synchronous", "2"}, // FULL
			{"foreign_keys", "1"},
			{"busy_timeout", "10000"},
		} {
			var got string
			if err := c.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("conn %d: PRAGMA %s = %q, want %q", i, tc.pragma, got, tc.want)
			}
		}
		c.Close()
	}
}

func TestOpenSQLiteReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// '%' and '#' in the path are taken literally, not as URI syntax.
	path := filepath.Join(t.TempDir(), "data 100%#x", "sluice.db") // Open creates the directory
	url := "sqlite://" + path
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// A second Open finds the schema current and migrates nothing.
	db, err = store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.UserByName(ctx, "alice"); err != nil {
		t.Fatalf("user lost across reopen: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("database not at the configured path: %v", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("database file mode %v, want 0600 (it holds credential hashes)", perm)
	}
}

// TestOpenPostgresConcurrently: nodes starting together must not run the
// migrations twice (the advisory lock serialises them).
func TestOpenPostgresConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	dbs := make([]*store.DB, 4)
	for i := range dbs {
		wg.Go(func() { dbs[i], errs[i] = store.Open(ctx, url, nil, store.WithMaxOpenConns(1)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer dbs[i].Close()
	}
	if dbs[0].Pgx() == nil {
		t.Error("Pgx() on PostgreSQL is nil")
	}
	var applied, distinct int
	if err := dbs[0].SQL().QueryRowContext(ctx,
		"SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0").Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != distinct || applied == 0 {
		t.Errorf("goose_db_version: %d rows for %d versions", applied, distinct)
	}
	if err := dbs[3].CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	tests := []struct {
		url  string
		kind problem.Kind
	}{
		{"mysql://localhost/x", problem.Invalid},
		{"sqlite://relative/sluice.db", problem.Invalid},
		{"sqlite://", problem.Invalid},
		{"sqlite:///tmp/a?mode=memory", problem.Invalid},
		{fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?connect_timeout=5&sslmode=disable", deadPort), problem.Unavailable},
	}
	for _, tc := range tests {
		db, err := store.Open(context.Background(), tc.url, nil)
		if err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if got := problem.KindOf(err); got != tc.kind {
			t.Errorf("Open(%q) = %v (%v), want %v", tc.url, got, err, tc.kind)
		}
	}
}

// TestMigrationParity: both dialects have the same migration versions, so
// a schema change is never made for one and forgotten for the other.
func TestMigrationParity(t *testing.T) {
	list := func(dialect string) []string {
		entries, err := os.ReadDir(filepath.Join("migrations", dialect))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	lite, pg := list("sqlite"), list("postgres")
	if len(lite) == 0 || !slices.Equal(lite, pg) {
		t.Errorf("migrations differ: sqlite %v, postgres %v", lite, pg)
	}
}

// terminateSessions has the server end every session of url's database
// but the one asking, as a restart or failover would.
func terminateSessions(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	admin, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.SQL().ExecContext(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresSessionLoss: when the server drops the store's sessions (a
// failover, an admin), what fails is reported Unavailable, never Internal,
// and the store recovers by itself.
func TestPostgresSessionLoss(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	terminateSessions(t, url)
	// The first query on a dead session fails; that failure marks every
	// pooled session suspect, so the next query finds a live one.
	for i := 0; ; i++ {
		_, err := db.UserByName(ctx, "x")
		k := problem.KindOf(err)
		if k == problem.NotFound {
			break
		}
		if k != problem.Unavailable {
			t.Fatalf("after session loss: %v (%v), want Unavailable", k, err)
		}
		if i == 1 {
			t.Fatalf("a second query failed after session loss: %v", err)
		}
	}
}

// TestPostgresConnectionsSuspect: told that its sessions may be dead (the
// event bus saw the server drop its own), the store pings each before its
// next use, and no request fails once the server is back.
func TestPostgresConnectionsSuspect(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ctx := context.Background()
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Several sessions in the pool, all used within the last second.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err == nil {
				time.Sleep(50 * time.Millisecond)
				tx.Rollback()
			}
		})
	}
	wg.Wait()
	terminateSessions(t, url)
	db.ConnectionsSuspect()
	for i := range 8 {
		if _, err := db.UserByName(ctx, "x"); problem.KindOf(err) != problem.NotFound {
			t.Fatalf("query %d after the sessions were marked suspect: %v", i, err)
		}
	}
}

// A personal project key ("~ALICE") is accepted only for a user who
// exists, on both back ends.
func TestPersonalProjectKeyNeedsUser(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, ctx := open(t), context.Background()
			if err := db.CreateProject(ctx, &store.Project{Key: "~nobody", Name: "x"}); !problem.Is(err, problem.Invalid) {
				t.Fatalf("~nobody: %v, want Invalid", err)
			}
			if err := db.CreateUser(ctx, &store.User{Name: "Alice"}); err != nil {
				t.Fatal(err)
			}
			p := &store.Project{Key: "~alice", Name: "Alice"}
			if err := db.CreateProject(ctx, p); err != nil {
				t.Fatal(err)
			}
			if p.Key != "~ALICE" {
				t.Fatalf("key %q", p.Key)
			}
			q := &store.Project{Key: "PLAIN", Name: "x"}
			if err := db.CreateProject(ctx, q); err != nil {
				t.Fatal(err)
			}
			q.Key = "~bob"
			if err := db.UpdateProject(ctx, q); !problem.Is(err, problem.Invalid) {
				t.Fatalf("rename to ~bob: %v, want Invalid", err)
			}
		})
	}
}
