package repo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// housekeepingLockName is held (flock) while a repository is housekept, so
// the background job and `sluice admin repo gc` — different processes,
// possibly different nodes — never repack one repository at once (two
// repacks race on multi-pack-index.lock and one fails). The name has no
// ".lock" suffix, so stale-lock cleanup never deletes it.
const housekeepingLockName = "sluice-housekeeping"

// errBusy is returned by tryLockHousekeeping when another process holds it.
var errBusy = errors.New("housekeeping already running")

// lockHousekeeping takes the repository's housekeeping lock. With wait it
// retries until ctx ends; without, it returns errBusy at once.
func lockHousekeeping(ctx context.Context, dir string, wait bool) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, housekeepingLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open housekeeping lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock housekeeping: %w", err)
		}
		if !wait {
			f.Close()
			return nil, errBusy
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Thresholds for HousekeepIfNeeded. Geometric repacking keeps the number of
// packs logarithmic in the repository size, so a handful of packs is the
// steady state; git gc --auto's own defaults are 6700 loose objects and 50
// packs, too lax for a server that wants bitmaps current for clones.
const (
	maxPacksBeforeRepack = 8
	maxLooseBeforeRepack = 256
)

// NeedsHousekeeping reports whether repository id has drifted from its
// housekept shape: too many packs, too many loose objects (estimated from
// one fan-out directory, as git gc --auto does), or no commit-graph.
func (m *Manager) NeedsHousekeeping(id int64) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	dir := m.Path(id)
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	if err != nil {
		return false, err
	}
	if len(packs) > maxPacksBeforeRepack {
		return true, nil
	}
	// Objects are spread evenly over 256 fan-out directories by hash.
	entries, err := os.ReadDir(filepath.Join(dir, "objects", "17"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	loose := 0
	for _, e := range entries {
		if len(e.Name()) == 38 && !strings.HasPrefix(e.Name(), "tmp_") {
			loose++
		}
	}
	if loose*256 > maxLooseBeforeRepack {
		return true, nil
	}
	if len(packs) > 1 {
		return true, nil
	}
	for _, p := range []string{
		filepath.Join(dir, "objects", "info", "commit-graph"),
		filepath.Join(dir, "objects", "info", "commit-graphs", "commit-graph-chain"),
	} {
		if _, err := os.Stat(p); err == nil {
			return false, nil
		}
	}
	return len(packs) > 0, nil
}

// HousekeepIfNeeded is what the background job runs after pushes: it does
// nothing when another housekeeping of the repository is running or when
// the repository is still in shape (NeedsHousekeeping), so a stream of
// pushes does not turn into a stream of repacks.
func (m *Manager) HousekeepIfNeeded(ctx context.Context, id int64) (ran bool, err error) {
	need, err := m.NeedsHousekeeping(id)
	if err != nil || !need {
		return false, err
	}
	unlock, err := lockHousekeeping(ctx, m.Path(id), false)
	if errors.Is(err, errBusy) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unlock()
	_, err = m.housekeep(ctx, id)
	return err == nil, err
}
