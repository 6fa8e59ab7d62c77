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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBinDir holds initdb and pg_ctl (Debian's postgresql-15).
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

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
	pg.adminURL, pg.started = srv.url, true
	return func() {
		pg.mu.Lock()
		pg.adminURL, pg.started = "", false
		pg.mu.Unlock()
		srv.stop()
	}, nil
}

// Main is a whole TestMain: it starts PostgreSQL, runs the
// tests, stops the server and exits. A server that cannot start fails the
// package loudly.
func Main(m *testing.M) {
	stop, err := StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "FAIL: PostgreSQL is required for these tests")
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
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

type server struct {
	dir     string
	dataDir string
	url     string
	asUser  []string // runuser prefix when root
}

func startServer() (*server, error) {
	for _, b := range []string{"initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(PostgresBinDir, b)); err != nil {
			return nil, fmt.Errorf("%s not found (install postgresql-15): %w", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, dataDir: filepath.Join(dir, "data")}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if os.Geteuid() == 0 {
		if err := s.handToPostgresUser(); err != nil {
			return nil, err
		}
	}
	if out, err := s.run("initdb", "-D", s.dataDir, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	// The port is picked by binding :0 and closing; another process may grab
	// it before postgres does, hence a few tries.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		opts := strings.Join([]string{
			"-c listen_addresses=127.0.0.1", "-p " + strconv.Itoa(port), "-k " + dir,
			"-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
			"-c max_connections=200", "-c shared_buffers=32MB",
		}, " ")
		out, err := s.run("pg_ctl", "-D", s.dataDir, "-l", filepath.Join(dir, "postgres.log"),
			"-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			ok = true
			return s, nil
		}
		log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		lastErr = fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, tail(log, 2000))
		// A failed start may leave a half-started postmaster behind.
		s.run("pg_ctl", "-D", s.dataDir, "-m", "immediate", "-w", "stop")
	}
	return nil, lastErr
}

// handToPostgresUser gives the server's directory to the postgres user.
// os.MkdirTemp made it 0700 and root's; its parent (os.TempDir) must let
// that user through, which /tmp does.
func (s *server) handToPostgresUser() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(s.dir, uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return err
	}
	for d := filepath.Dir(s.dir); d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by the postgres user: set TMPDIR to a directory it can enter", d)
		}
	}
	s.asUser = []string{"runuser", "-u", "postgres", "--"}
	return nil
}

func (s *server) run(bin string, args ...string) ([]byte, error) {
	argv := append(append([]string{}, s.asUser...), filepath.Join(PostgresBinDir, bin))
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	// pg_ctl's postmaster must not share the test's process group: a ^C
	// meant for go test would otherwise hit it before stop runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (s *server) stop() {
	if out, err := s.run("pg_ctl", "-D", s.dataDir, "-m", "immediate", "-w", "stop"); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
