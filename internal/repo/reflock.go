package repo

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sluice-scm/sluice/internal/problem"
)

// Ref files read without git, for crash reconciliation (internal/hooks).
//
// A process that dies while git holds refs/heads/X.lock (from taking the
// lock, through the reference-transaction's prepared hook, to the rename
// that commits it) leaves the lock behind, and every later update of X
// fails with "Unable to create …/X.lock: File exists". Housekeeping removes
// locks only after an hour, because a lock carries no owner. The
// reconciler knows more: the dead process's recorded transaction names the
// ref and the value git was about to write, and git writes exactly that
// value into the lock before the prepared hook runs. RemoveDeadRefLock
// removes a lock only when its content is that value, so a lock a live git
// took since (for another value) is never touched; the reconciler calls it
// only while the ref still holds the transaction's old value, which proves
// the dead git never renamed its lock and so no other git could take one.

// ReadRef returns the object id ref points at in repository id, read from
// the loose ref file or packed-refs, or "" when the ref does not exist.
// Symbolic refs are not followed (their value is not an object id).
func (m *Manager) ReadRef(id int64, ref string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	if err := checkRefPath(ref); err != nil {
		return "", err
	}
	dir := m.Path(id)
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(ref)))
	switch {
	case err == nil:
		v := strings.TrimSpace(string(b))
		if strings.HasPrefix(v, "ref:") {
			return "", problem.New(problem.Invalid, "ref %q is symbolic", ref)
		}
		if !validOID(v) {
			return "", fmt.Errorf("read ref %q: malformed value", ref)
		}
		return v, nil
	case errors.Is(err, fs.ErrNotExist), isNotDir(err):
		// Not loose; maybe packed.
	default:
		return "", fmt.Errorf("read ref %q: %w", ref, err)
	}
	packed, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read packed-refs: %w", err)
	}
	for _, line := range bytes.Split(packed, []byte("\n")) {
		oid, name, ok := bytes.Cut(line, []byte(" "))
		if ok && string(name) == ref && validOID(string(oid)) {
			return string(oid), nil
		}
	}
	return "", nil
}

// RemoveDeadRefLock removes ref's lock file in repository id when it holds
// want, the value a dead git was about to write (the zero id or "" for a
// deletion, whose lock git leaves empty). It reports whether it removed
// one. See the comment at the top of this file for why only then.
func (m *Manager) RemoveDeadRefLock(id int64, ref, want string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if err := checkRefPath(ref); err != nil {
		return false, err
	}
	lock := filepath.Join(m.Path(id), filepath.FromSlash(ref)+".lock")
	fi, err := os.Lstat(lock)
	if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat ref lock: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return false, nil
	}
	b, err := os.ReadFile(lock)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read ref lock: %w", err)
	}
	got := strings.TrimSpace(string(b))
	if want == strings.Repeat("0", len(want)) {
		want = ""
	}
	if got != want {
		return false, nil
	}
	if err := os.Remove(lock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove ref lock: %w", err)
	}
	m.logger.Warn("removed the ref lock a dead process left", "repo_id", id, "ref", ref)
	return true, nil
}

// checkRefPath accepts a full ref name that stays inside refs/ as a path.
// The names come from git, through the database, but become paths here.
func checkRefPath(ref string) error {
	if !strings.HasPrefix(ref, "refs/") || path.Clean(ref) != ref || strings.HasSuffix(ref, ".lock") ||
		strings.ContainsAny(ref, "\x00\\") || strings.Contains(ref, "/../") || strings.Contains(ref, "/./") {
		return problem.New(problem.Invalid, "invalid ref name %q", ref)
	}
	return nil
}

// isNotDir is the error of a path through a file: refs/heads/a when
// refs/heads/a/b is asked for.
func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
