// Package pgserver runs a throw-away PostgreSQL server: initdb and pg_ctl
// in a temporary directory (data, unix socket, log), listening on a random
// 127.0.0.1 port, trusting local connections, with fsync,
// synchronous_commit and full_page_writes off — nothing in it has to
// survive the process that started it.
//
// It is plain Go with no test dependency so that both the tests (through
// internal/testbed/pgtest) and the performance lab (`sluice e3`, which
// provisions instances on PostgreSQL) start servers the same way. When run
// as root the server runs as the "postgres" user (initdb and postgres
// refuse root), so its directory is created outside any root-only tree and
// handed to that user.
package pgserver

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// BinDir holds initdb and pg_ctl (Debian's postgresql-15).
const BinDir = "/usr/lib/postgresql/15/bin"

// Options tune Start.
type Options struct {
	// MaxConnections is max_connections; default 200 (several nodes each
	// with a pool of 20, plus River).
	MaxConnections int
	// SharedBuffers is shared_buffers; default "32MB".
	SharedBuffers string
}

// Server is a running throw-away PostgreSQL.
type Server struct {
	dir     string
	dataDir string
	url     string
	asUser  []string // runuser prefix when root
}

// URL is the server's connection URL for database "postgres" as the
// superuser "postgres".
func (s *Server) URL() string { return s.url }

// Start initialises and starts a server.
func Start(opts Options) (*Server, error) {
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 200
	}
	if opts.SharedBuffers == "" {
		opts.SharedBuffers = "32MB"
	}
	for _, b := range []string{"initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s not found (install postgresql-15): %w", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, dataDir: filepath.Join(dir, "data")}
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
		o := strings.Join([]string{
			"-c listen_addresses=127.0.0.1", "-p " + strconv.Itoa(port), "-k " + dir,
			"-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
			"-c max_connections=" + strconv.Itoa(opts.MaxConnections), "-c shared_buffers=" + opts.SharedBuffers,
		}, " ")
		out, err := s.run("pg_ctl", "-D", s.dataDir, "-l", filepath.Join(dir, "postgres.log"),
			"-w", "-t", "60", "-o", o, "start")
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
func (s *Server) handToPostgresUser() error {
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

func (s *Server) run(bin string, args ...string) ([]byte, error) {
	argv := append(append([]string{}, s.asUser...), filepath.Join(BinDir, bin))
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	// pg_ctl's postmaster must not share the caller's process group: a ^C
	// meant for the caller would otherwise hit it before Stop runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Stop stops the server immediately and removes its directory.
func (s *Server) Stop() error {
	var err error
	if out, rerr := s.run("pg_ctl", "-D", s.dataDir, "-m", "immediate", "-w", "stop"); rerr != nil {
		err = fmt.Errorf("pg_ctl stop: %w\n%s", rerr, out)
	}
	return errors.Join(err, os.RemoveAll(s.dir))
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
