package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluice-scm/sluice/internal/problem"
)

// ServerLock is the single-server lock of an SQLite database.
type ServerLock struct {
	f *os.File
}

// LockPath is the lock file of the SQLite database at dbPath.
func LockPath(dbPath string) string { return dbPath + ".server.lock" }

// LockSQLite takes the exclusive server lock of the SQLite database at
// dbPath (an absolute path) for this process, or fails with Unavailable
// naming the server that holds it. The lock is an flock(2): the kernel
// drops it when the holder dies, however it dies, so a stale lock file
// never blocks a restart. The holder's pid is written into the file for
// the message only. Hold the lock until the server has stopped.
func LockSQLite(dbPath string) (*ServerLock, error) {
	path := LockPath(dbPath)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open server lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		holder := "unknown pid"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		return nil, problem.New(problem.Unavailable,
			"another sluice server is using %s (%s); SQLite supports one server — use PostgreSQL for a cluster", dbPath, holder)
	}
	// Holding the lock now: record who holds it.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &ServerLock{f: f}, nil
}

// Release drops the lock. The file stays: removing it would let a
// starting server lock a fresh inode while another still holds the old one.
func (l *ServerLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return err
}
