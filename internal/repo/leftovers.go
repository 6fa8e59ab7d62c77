package repo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Leftovers of dead git processes, removed by the crash reconciler
// (internal/hooks) instead of housekeeping's hour.
//
// git takes a push's ref locks (refs/**.lock, packed-refs.lock) and
// receives its pack into a quarantine (objects/tmp_objdir-incoming-*)
// before any hook records what it does, so a process killed there leaves
// files that name no owner. The reconciler knows from its records of
// running git processes (store.GitRun) which repository a dead process
// worked in, when it was dead at the latest, and when the oldest live git
// of that repository started; every file older than both is a dead
// process's: a live git's lock or quarantine is younger than the git.
// RemoveDeadLeftovers removes exactly those, and the caller computes the
// cutoff.

// RemoveDeadLeftovers removes, in repository id, the ref lock files and
// push quarantine directories last modified before cutoff, except the
// locks of the refs in keep (full names: refs named by a live process's
// pending ref transaction). It returns the paths it removed, relative to
// the repository. A missing repository has nothing to remove.
func (m *Manager) RemoveDeadLeftovers(id int64, cutoff time.Time, keep map[string]bool) ([]string, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	dir := m.Path(id)
	var removed []string
	var errs []error
	stale := func(fi fs.FileInfo) bool { return fi.ModTime().Before(cutoff) }

	// Ref locks: packed-refs.lock and any *.lock under refs/ (a ref name
	// never ends in .lock, git check-ref-format refuses it).
	locks := []string{"packed-refs.lock"}
	err := filepath.WalkDir(filepath.Join(dir, "refs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".lock") {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			if !keep[strings.TrimSuffix(filepath.ToSlash(rel), ".lock")] {
				locks = append(locks, rel)
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("list ref locks: %w", err))
	}
	for _, rel := range locks {
		ok, err := removeStaleFile(filepath.Join(dir, rel), stale)
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", rel, err))
		}
		if ok {
			removed = append(removed, filepath.ToSlash(rel))
		}
	}

	// Quarantines: a live push keeps writing into its own, so the newest
	// file inside decides.
	entries, err := os.ReadDir(filepath.Join(dir, "objects"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("list quarantines: %w", err))
	}
	for _, e := range entries {
		if !e.IsDir() || !isPushQuarantine(e.Name()) {
			continue
		}
		p := filepath.Join(dir, "objects", e.Name())
		newest, err := newestModTime(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("read quarantine %s: %w", e.Name(), err))
			continue
		}
		if newest.IsZero() || !newest.Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove quarantine %s: %w", e.Name(), err))
			continue
		}
		removed = append(removed, "objects/"+e.Name())
	}
	return removed, errors.Join(errs...)
}

// removeStaleFile removes the regular file p when stale says so.
func removeStaleFile(p string, stale func(fs.FileInfo) bool) (bool, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || !stale(fi) {
		return false, nil
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// isPushQuarantine matches receive-pack's quarantine directories only
// (tmp_objdir-incoming-* since git 2.11, incoming-* before), not other
// temporary object directories.
func isPushQuarantine(name string) bool {
	return strings.HasPrefix(name, "tmp_objdir-incoming-") || strings.HasPrefix(name, "incoming-")
}
