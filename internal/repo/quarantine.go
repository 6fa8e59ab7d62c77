package repo

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// Push quarantines of aborted pushes.
//
// receive-pack writes a push's objects into a quarantine directory under
// objects/ and removes it when it exits, unless it is killed first: a push
// cancelled mid-pack (its client gone) leaves one behind, and housekeeping
// removes it only after staleAfter, because a quarantine carries no owner.
// The process that ran the push knows more (hosting): which directories
// appeared while its receive-pack ran and whether any other receive-pack
// ran beside it. These two functions let it remove its own at once.

// QuarantineDirs returns the names of the push quarantine directories in
// repository id's objects directory.
func (m *Manager) QuarantineDirs(id int64) (map[string]bool, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(m.Path(id), "objects"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && isQuarantineName(e.Name()) {
			out[e.Name()] = true
		}
	}
	return out, nil
}

// RemoveAbortedQuarantine removes quarantine directory name of repository
// id unless anything in it was modified after since (the moment its
// receive-pack exited): a directory still being written belongs to a live
// push. It reports whether it removed the directory.
func (m *Manager) RemoveAbortedQuarantine(id int64, name string, since time.Time) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if !isQuarantineName(name) || strings.ContainsAny(name, "/\\") {
		return false, problem.New(problem.Invalid, "not a quarantine directory: %q", name)
	}
	path := filepath.Join(m.Path(id), "objects", name)
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	newest, err := newestModTime(path)
	if err != nil {
		return false, err
	}
	if newest.After(since) {
		return false, nil
	}
	if err := os.RemoveAll(path); err != nil {
		return false, err
	}
	return true, nil
}

func isQuarantineName(name string) bool {
	return strings.HasPrefix(name, "tmp_objdir-") || strings.HasPrefix(name, "incoming-")
}
