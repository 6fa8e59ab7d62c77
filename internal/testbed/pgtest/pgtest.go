// Package pgtest runs throw-away PostgreSQL servers for tests. It is a leaf
// (it imports no Sluice package) so that low packages such as store can
// test against PostgreSQL without compiling the whole server; package
// testbed re-exports it for everything else.
//
// One server per test package, started from TestMain with StartPostgres
// (or Main), and one fresh database per test from URL. The server lives in
// its own temporary directory (data, unix socket, log), listens on a random
// 127.0.0.1 port,
// trusts local connections and runs with fsync, synchronous_commit and
// full_page_writes off: nothing in it has to survive the test binary. When
// the tests run as root the server runs as the "postgres" user (initdb and
// postgres refuse root), so its directory is created outside any
// root-only tree and handed to that user.
//
// SLUICE_TEST_POSTGRES_URL points the tests at an existing server instead
// (its user must be allowed to CREATE DATABASE). A PostgreSQL that cannot
// start is a failure, never a skip: only a developer without PostgreSQL
// may set SLUICE_TEST_NO_POSTGRES=1 by hand to skip those tests, and CI
// (CI=true) refuses even that.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-scm/sluice/internal/pgserver"
)

// PostgresBinDir holds initdb and pg_ctl (Debian's postgresql-15).
const PostgresBinDir = pgserver.BinDir

var pg struct {
	mu       sync.Mutex
	adminURL string // server URL, database "postgres"
	skip     string // why PostgreSQL tests skip; "" when they run
	started  bool
}

// StartPostgres starts the package's throw-away PostgreSQL server (or
// adopts SLUICE_TEST_POSTGRES_URL) for URL. Call it once, from
// TestMain, and call stop after m.Run.
func StartPostgres() (stop func(), err error) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.started {
		return nil, errors.New("pgtest: StartPostgres called twice")
	}
	if u := os.Getenv("SLUICE_TEST_POSTGRES_URL"); u != "" {
		pg.adminURL, pg.started = u, true
		return func() {}, nil
	}
	if os.Getenv("SLUICE_TEST_NO_POSTGRES") == "1" {
		if os.Getenv("CI") != "" {
			return nil, errors.New("pgtest: SLUICE_TEST_NO_POSTGRES=1 is not allowed in CI: PostgreSQL tests must run")
		}
		pg.skip, pg.started = "SLUICE_TEST_NO_POSTGRES=1: PostgreSQL tests skipped", true
		return func() {}, nil
	}
	srv, err := startServer()
	if err != nil {
		return nil, fmt.Errorf("pgtest: start postgres (set SLUICE_TEST_POSTGRES_URL to use a running server): %w", err)
	}
	pg.adminURL, pg.started = srv.URL(), true
	return func() {
		pg.mu.Lock()
		pg.adminURL, pg.started = "", false
		pg.mu.Unlock()
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}, nil
}

// Main is a whole TestMain: it starts PostgreSQL, runs the
// tests, stops the server and exits. A server that cannot start fails the
// package loudly.
//
// Each of after runs once the tests passed and the server is stopped (a
// goroutine-leak check, say); an error it returns fails the package.
func Main(m *testing.M, after ...func() error) {
	// -short (make test-short) runs unit tests only: no server is
	// started, and tests that need one skip (URL).
	flag.Parse()
	if testing.Short() {
		pg.mu.Lock()
		pg.skip, pg.started = "-short: PostgreSQL tests skipped", true
		pg.mu.Unlock()
		os.Exit(runAfter(m.Run(), after))
	}
	stop, err := StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "FAIL: PostgreSQL is required for these tests")
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(runAfter(code, after))
}

// runAfter runs the post-run checks when the tests passed and returns the
// exit code.
func runAfter(code int, after []func() error) int {
	if code != 0 {
		return code
	}
	for _, check := range after {
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			fmt.Fprintln(os.Stderr, "FAIL")
			return 1
		}
	}
	return code
}

// URL creates an empty database for t on the package's server and
// drops it when t ends. It skips t only when a developer set
// SLUICE_TEST_NO_POSTGRES=1.
func URL(t testing.TB) string {
	t.Helper()
	pg.mu.Lock()
	admin, skip, started := pg.adminURL, pg.skip, pg.started
	pg.mu.Unlock()
	switch {
	case skip != "":
		t.Skip(skip)
	case !started:
		t.Fatal("pgtest: URL needs StartPostgres in TestMain")
	}
	name := "t_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adminExec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE: a pool the test forgot to close must not keep the
		// database (and the server's disk) alive.
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: postgres url: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// startServer starts the package's server; the startup itself is
// pgserver's, shared with the performance lab.
func startServer() (*pgserver.Server, error) { return pgserver.Start(pgserver.Options{}) }
