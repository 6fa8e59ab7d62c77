// Package repo owns Sluice's repositories on disk.
//
// A repository lives at a path derived from its internal id only
// (root/<id%1000 as three digits>/<id>.git), never from a project key, a
// slug or any other user-supplied string, so no request can steer a path.
// The three-digit fan-out keeps any one directory at a few thousand entries
// on the shared filesystem of a cluster.
//
// Changes to the set of repositories are atomic from a reader's point of
// view: Create and Fork build the repository in a temporary sibling
// directory and rename it into place, Delete renames it into a trash
// directory before removing it. A half-created or half-deleted repository
// is never visible under its final name.
//
// A fork is a bare repository whose objects/info/alternates points at its
// parent's object directory, so forking costs a few kilobytes whatever the
// parent's size. The fork starts with a copy of the parent's branches and
// tags and from then on only ever advertises its own refs: objects that are
// reachable only from the parent are physically readable through the
// alternate but are never offered to a client (upload-pack advertises the
// fork's refs and uploadpack.allowAnySHA1InWant stays off in gitcmd's
// config), and the read helpers check reachability from the fork's own refs
// (IsReachable) before serving an object named by SHA. Because forks borrow
// objects, housekeeping never deletes an object from any repository (see
// housekeeping.go). Forks are repacked all into one rather than
// geometrically: git before 2.41.0 counts the parent's packs into a fork's
// geometric progression and its multi-pack-index write then crashes
// ("multi-pack-index died of signal 11") when the fork has no pack of its
// own; housekeeping.go has the details.
//
// Every git process is started through gitcmd; user-supplied values are
// validated here (ref names, revisions, paths, archive prefixes) and passed
// as gitcmd Args or Paths, never as options.
package repo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Manager creates, forks, deletes, maintains and reads repositories under
// one root directory.
type Manager struct {
	root    string
	git     *gitcmd.Runner
	logger  *slog.Logger
	hookEnv func(repoID int64) (env []string, done func())

	// See wants.go.
	wantTimeout time.Duration
	onWantCheck func(outcome string)
}

// SetHookEnv gives the Manager the environment that ties a git command to
// the hooks server, for commands that may fire the reference-transaction
// hook (pack-refs). The app sets it to a hooks registration with a system
// principal; without it such commands run with no hook environment.
func (m *Manager) SetHookEnv(fn func(repoID int64) (env []string, done func())) { m.hookEnv = fn }

func (m *Manager) withHookEnv(id int64) ([]string, func()) {
	if m.hookEnv == nil {
		return nil, func() {}
	}
	return m.hookEnv(id)
}

// NewManager returns a Manager for the repositories under root.
func NewManager(root string, git *gitcmd.Runner, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{root: root, git: git, logger: logger.With("component", "repo")}
}

// Path is where repository id lives. It depends on id alone.
func (m *Manager) Path(id int64) string {
	return filepath.Join(m.root, fmt.Sprintf("%03d", id%1000), fmt.Sprintf("%d.git", id))
}

// trashDir holds repositories being deleted. Its name starts with a dot so
// it can never collide with a fan-out directory ("000".."999").
func (m *Manager) trashDir() string { return filepath.Join(m.root, ".trash") }

// Exists reports whether repository id is on disk.
func (m *Manager) Exists(id int64) bool {
	if id <= 0 {
		return false
	}
	fi, err := os.Stat(filepath.Join(m.Path(id), "HEAD"))
	return err == nil && fi.Mode().IsRegular()
}

func checkID(id int64) error {
	if id <= 0 {
		return problem.New(problem.Invalid, "invalid repository id %d", id)
	}
	return nil
}

// Create makes an empty bare repository whose HEAD points at
// refs/heads/<defaultBranch>.
func (m *Manager) Create(ctx context.Context, id int64, defaultBranch string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := ValidateBranchName(defaultBranch); err != nil {
		return err
	}
	return m.build(ctx, id, func(tmp string) error {
		return m.setHead(ctx, tmp, defaultBranch)
	})
}

// build runs git init --bare in a temporary sibling of the final path, lets
// fill populate it and renames it into place.
func (m *Manager) build(ctx context.Context, id int64, fill func(tmp string) error) error {
	final := m.Path(id)
	if _, err := os.Lstat(final); err == nil {
		return problem.New(problem.Conflict, "repository %d already exists", id)
	}
	parent := filepath.Dir(final)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create fan-out directory: %w", err)
	}
	// The temporary name starts with a dot and does not end in ".git", so
	// nothing scanning the root mistakes it for a repository.
	tmp, err := os.MkdirTemp(parent, fmt.Sprintf(".tmp-%d-", id))
	if err != nil {
		return fmt.Errorf("create temporary directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := m.git.Run(ctx, gitcmd.Cmd{Dir: tmp, Name: "init", Flags: []string{"--bare", "--quiet"}}); err != nil {
		return fmt.Errorf("init repository: %w", err)
	}
	if err := fill(tmp); err != nil {
		return err
	}
	// os.Rename onto an existing non-empty directory fails, so two racing
	// creators of the same id cannot both win.
	if err := os.Rename(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return problem.New(problem.Conflict, "repository %d already exists", id)
		}
		return fmt.Errorf("publish repository: %w", err)
	}
	ok = true
	return nil
}

// Delete removes repository id. The directory is first renamed into the
// trash, so readers see it vanish at once even if removing the files takes
// long. Deleting a repository that forks borrow objects from breaks those
// forks: the caller must not do it while forks exist.
func (m *Manager) Delete(ctx context.Context, id int64) error {
	if err := checkID(id); err != nil {
		return err
	}
	path := m.Path(id)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return problem.New(problem.NotFound, "repository %d not found", id)
	}
	if err := os.MkdirAll(m.trashDir(), 0o755); err != nil {
		return fmt.Errorf("create trash directory: %w", err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	trash := filepath.Join(m.trashDir(), fmt.Sprintf("%d-%s", id, hex.EncodeToString(rnd[:])))
	if err := os.Rename(path, trash); err != nil {
		return fmt.Errorf("move repository to trash: %w", err)
	}
	if err := os.RemoveAll(trash); err != nil {
		// The repository is gone for every reader; leftovers in the trash
		// are only disk space.
		m.logger.WarnContext(ctx, "remove trashed repository", "repo_id", id, "error", err)
	}
	return nil
}

// Fork creates repository id as a fork of parentID: its objects come from
// the parent through objects/info/alternates and it starts with a copy of
// the parent's branches, tags and default branch. From then on the fork
// only ever advertises its own refs; objects reachable only from the parent
// stay invisible to the fork's clients (see the package comment).
func (m *Manager) Fork(ctx context.Context, parentID, id int64) error {
	if err := checkID(parentID); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	if parentID == id {
		return problem.New(problem.Invalid, "a repository cannot fork itself")
	}
	if !m.Exists(parentID) {
		return problem.New(problem.NotFound, "repository %d not found", parentID)
	}
	parentPath := m.Path(parentID)
	head, err := m.symbolicHead(ctx, parentPath)
	if err != nil {
		return err
	}
	refs, err := m.forEachRef(ctx, parentPath, "%(objectname) %(refname)", "refs/heads/", "refs/tags/")
	if err != nil {
		return fmt.Errorf("read parent refs: %w", err)
	}
	return m.build(ctx, id, func(tmp string) error {
		// A relative alternate (git resolves it against the fork's objects
		// directory) survives the repository root being mounted elsewhere.
		// The temporary directory is a sibling of the final path, so the
		// same relative path is right before and after the rename.
		rel, err := filepath.Rel(filepath.Join(m.Path(id), "objects"), filepath.Join(parentPath, "objects"))
		if err != nil {
			return fmt.Errorf("alternate path: %w", err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "objects", "info", "alternates"), []byte(rel+"\n"), 0o644); err != nil {
			return fmt.Errorf("write alternates: %w", err)
		}
		// The refs are written as a packed-refs file rather than through
		// git update-ref: update-ref would fire the reference-transaction
		// hook for a repository the store does not know yet, and nobody can
		// read the temporary directory anyway. No header means git assumes
		// neither sorting nor peeling, so it sorts and peels on its own.
		var b strings.Builder
		lines := strings.Split(strings.TrimSpace(string(refs)), "\n")
		sort.Strings(lines)
		for _, line := range lines {
			oid, name, ok := strings.Cut(line, " ")
			if !ok || !validOID(oid) || ValidateRefName(name) != nil {
				continue
			}
			fmt.Fprintf(&b, "%s %s\n", oid, name)
		}
		if err := os.WriteFile(filepath.Join(tmp, "packed-refs"), []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write packed-refs: %w", err)
		}
		if head != "" {
			return m.setHead(ctx, tmp, head)
		}
		return nil
	})
}

// SetDefaultBranch points HEAD of repository id at refs/heads/<branch>. The
// branch need not exist yet, as with an empty repository.
func (m *Manager) SetDefaultBranch(ctx context.Context, id int64, branch string) error {
	if err := ValidateBranchName(branch); err != nil {
		return err
	}
	if !m.Exists(id) {
		return problem.New(problem.NotFound, "repository %d not found", id)
	}
	return m.setHead(ctx, m.Path(id), branch)
}

func (m *Manager) setHead(ctx context.Context, dir, branch string) error {
	// symbolic-ref does not run the reference-transaction hook (git 2.39),
	// so no hook environment is needed.
	err := m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "symbolic-ref", Args: []string{"HEAD", "refs/heads/" + branch}})
	if err != nil {
		return fmt.Errorf("set HEAD: %w", err)
	}
	return nil
}

// symbolicHead returns the branch HEAD points at in dir, "" if HEAD is
// detached or not under refs/heads/.
func (m *Manager) symbolicHead(ctx context.Context, dir string) (string, error) {
	// HEAD is a small file we can read without a process; git itself
	// writes "ref: refs/heads/x\n" for a symbolic HEAD.
	b, err := os.ReadFile(filepath.Join(dir, "HEAD"))
	if err != nil {
		return "", fmt.Errorf("read HEAD: %w", err)
	}
	s := strings.TrimSpace(string(b))
	target, ok := strings.CutPrefix(s, "ref: refs/heads/")
	if !ok || ValidateBranchName(target) != nil {
		return "", nil
	}
	return target, nil
}

// Size is the number of bytes repository id occupies on disk, not counting
// objects it borrows from a fork parent.
func (m *Manager) Size(id int64) (int64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	if !m.Exists(id) {
		return 0, problem.New(problem.NotFound, "repository %d not found", id)
	}
	var total int64
	err := filepath.WalkDir(m.Path(id), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// Files come and go under a live repository (lock files,
				// packs replaced by a repack): skip them.
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of repository: %w", err)
	}
	return total, nil
}
