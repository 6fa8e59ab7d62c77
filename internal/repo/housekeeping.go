package repo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Housekeeping keeps reads fast without ever deleting an object.
//
//   - Objects: a geometric repack (repack -d -l --geometric=2 --write-midx)
//     rolls small packs and loose objects into bigger packs so that pack
//     sizes form a geometric progression; its cost is proportional to what
//     is new, not to the repository. A multi-pack-index and, for a
//     repository without alternates, a multi-pack reachability bitmap make
//     clones and fetches cheap. A fork gets no bitmap: git refuses one
//     because the fork's packs lack the objects it borrows (git says "doesn't
//     have full closure").
//
//   - Forks are not repacked geometrically. In git before 2.41.0, repack
//     --geometric ignores -l when it lays out the progression: the parent's
//     packs, seen through objects/info/alternates, join the fork's. The
//     largest of them (the parent's) becomes the --preferred-pack of the
//     fork's multi-pack-index and is listed in its --stdin-packs, though a
//     multi-pack-index only covers local packs ("warning: unknown preferred
//     pack"). When the fork has no pack of its own after the repack (a
//     fresh fork, whose objects are all borrowed) the list holds no local
//     pack at all; multi-pack-index write, having found no preferred pack,
//     keeps its default preferred index 0 and reads entry 0 of a pack array
//     it allocated but never filled. Depending on that garbage it dies of
//     signal 11 (what `sluice admin repo gc` reported) or fails with "no
//     pack files to index"; either way forks were never housekept. The same layout also hands parent packs to
//     pack-objects --stdin-packs, which git 2.39 can refuse when a pack is
//     listed twice. All of this is fixed by git 2.41.0 (topic
//     ps/fix-geom-repack-with-alternates, commits ceb96a160b "midx: fix
//     segfault with no packs and invalid preferred pack" and 932c16c04b
//     "repack: honor -l when calculating pack geometry"). Until Sluice
//     requires git 2.41, a fork gets an all-into-one local repack (repack
//     -a -d -l -k --write-midx, no bitmap): no parent pack takes part, -l
//     leaves borrowed objects out, -k keeps the fork's unreachable objects
//     (nothing is deleted, see below). It rewrites only the fork's own
//     objects, which are few, but it walks the fork's history, borrowed
//     commits included.
//
//   - No object is ever deleted. Any repository may be a fork parent whose
//     objects its forks borrow through alternates, and an object unreachable
//     from the parent's refs (a deleted branch) may still be reachable from a
//     fork's. A geometric repack rolls up whole packs (pack-objects
//     --stdin-packs) and every loose object, reachable or not, and -d only
//     removes packs and loose copies whose objects were rewritten into the
//     new pack. A fork's repack -a -d -k appends its unreachable objects to
//     the new pack (loose ones join on the next run, once an old pack
//     exists) and leaves out only the copies of objects its parent holds,
//     which it still reads through the alternate. We never run prune, gc,
//     or repack -a/-A without -k. Unreachable objects therefore
//     accumulate; reclaiming them needs a
//     reachability walk across the whole fork network, which this package
//     does not do.
//
//   - A split commit-graph with changed-path Bloom filters makes log, merge
//     base and reachability queries (IsReachable) fast.
//
//   - pack-refs --all keeps ref lookups to one file.
//
//   - Leftovers of crashed processes are removed once they are older than
//     staleAfter: lock files (a stale packed-refs.lock blocks every push),
//     push quarantine directories and temporary pack files. Anything younger
//     may belong to a process still running and is never touched.

// staleAfter is how old a lock file or quarantine directory must be before
// housekeeping deems its owner dead. Git holds ref locks for milliseconds
// and a push's quarantine for the push's duration; an hour leaves room for
// the slowest push Config.Timeout allows by default.
const staleAfter = time.Hour

// HousekeepStats says what one Housekeep run did, for the log and for tests.
type HousekeepStats struct {
	Fork            bool // the repository borrows objects through alternates
	Bitmap          bool // a reachability bitmap was written
	LocksRemoved    int
	QuarantinesGone int
	TempPacksGone   int
	SizeBefore      int64
	SizeAfter       int64
	Duration        time.Duration
}

// Housekeep maintains repository id; see the comment above staleAfter.
func (m *Manager) Housekeep(ctx context.Context, id int64) error {
	_, err := m.HousekeepWithStats(ctx, id)
	return err
}

// HousekeepWithStats is Housekeep returning what it did. It waits for a
// housekeeping already running on the repository (another process or node)
// to finish first.
func (m *Manager) HousekeepWithStats(ctx context.Context, id int64) (HousekeepStats, error) {
	if err := checkID(id); err != nil {
		return HousekeepStats{}, err
	}
	if !m.Exists(id) {
		return HousekeepStats{}, problem.New(problem.NotFound, "repository %d not found", id)
	}
	unlock, err := lockHousekeeping(ctx, m.Path(id), true)
	if err != nil {
		return HousekeepStats{}, err
	}
	defer unlock()
	return m.housekeep(ctx, id)
}

func (m *Manager) housekeep(ctx context.Context, id int64) (HousekeepStats, error) {
	var st HousekeepStats
	if !m.Exists(id) {
		return st, problem.New(problem.NotFound, "repository %d not found", id)
	}
	start := time.Now()
	dir := m.Path(id)
	st.SizeBefore, _ = m.Size(id)
	st.Fork = hasAlternates(dir)

	// Stale leftovers go first: a stale packed-refs.lock would make
	// pack-refs fail, a stale multi-pack-index.lock the repack.
	now := time.Now()
	var err error
	if st.LocksRemoved, err = removeStaleLocks(dir, now); err != nil {
		return st, fmt.Errorf("remove stale locks: %w", err)
	}
	if st.QuarantinesGone, err = removeStaleQuarantines(dir, now); err != nil {
		return st, fmt.Errorf("remove stale quarantines: %w", err)
	}
	if st.TempPacksGone, err = removeStaleTempPacks(dir, now); err != nil {
		return st, fmt.Errorf("remove stale temporary packs: %w", err)
	}

	// -l keeps a fork's repack from copying the objects it borrows. A fork
	// is repacked all into one, not geometrically: see the package comment
	// for git 2.39's crash. -k: -a -d would otherwise drop the fork's
	// unreachable objects.
	repack := []string{"-d", "-l", "-q", "--geometric=2", "--write-midx"}
	if st.Fork {
		repack = []string{"-a", "-d", "-l", "-k", "-q", "--write-midx"}
	}
	if !st.Fork {
		err := m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "repack", Flags: append(repack, "--write-bitmap-index")})
		if err == nil {
			st.Bitmap = true
		} else {
			if ctx.Err() != nil {
				return st, fmt.Errorf("repack: %w", err)
			}
			// A bitmap is an optimisation; packing matters more.
			m.logger.WarnContext(ctx, "repack with bitmap failed, retrying without", "repo_id", id, "error", err)
		}
	}
	if !st.Bitmap {
		// Explicit, because gitcmd's global config sets repack.writeBitmaps.
		flags := append(repack, "--no-write-bitmap-index")
		if err := m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "repack", Flags: flags}); err != nil {
			return st, fmt.Errorf("repack: %w", err)
		}
	}
	if err := m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "commit-graph write", Flags: []string{"--reachable", "--changed-paths", "--split"}}); err != nil {
		return st, fmt.Errorf("write commit-graph: %w", err)
	}
	// pack-refs runs a ref transaction, so git calls the
	// reference-transaction hook: it must reach the hooks server like any
	// other ref update (the refs generation moves, the pack cache follows).
	env, done := m.withHookEnv(id)
	err = m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "pack-refs", Flags: []string{"--all"}, Env: env})
	done()
	if err != nil {
		return st, fmt.Errorf("pack refs: %w", err)
	}

	st.SizeAfter, _ = m.Size(id)
	st.Duration = time.Since(start)
	m.logger.InfoContext(ctx, "housekeeping done", "repo_id", id, "fork", st.Fork, "bitmap", st.Bitmap,
		"locks_removed", st.LocksRemoved, "quarantines_removed", st.QuarantinesGone,
		"temp_packs_removed", st.TempPacksGone, "size_before", st.SizeBefore, "size_after", st.SizeAfter,
		"duration", st.Duration)
	return st, nil
}

func hasAlternates(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "objects", "info", "alternates"))
	return err == nil && strings.TrimSpace(string(b)) != ""
}

// lockDirs are the directories git creates lock files in, besides refs/
// (walked recursively): the repository itself (HEAD.lock, config.lock,
// packed-refs.lock, shallow.lock), objects/info (alternates, commit-graph)
// and the pack directory (multi-pack-index.lock).
var lockDirs = []string{".", "objects/info", "objects/info/commit-graphs", "objects/pack"}

func removeStaleLocks(dir string, now time.Time) (int, error) {
	n := 0
	remove := func(path string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() || !strings.HasSuffix(fi.Name(), ".lock") || now.Sub(fi.ModTime()) < staleAfter {
			return nil
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		n++
		return nil
	}
	for _, d := range lockDirs {
		entries, err := os.ReadDir(filepath.Join(dir, d))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return n, err
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			if err := remove(filepath.Join(dir, d, e.Name()), fi); err != nil {
				return n, err
			}
		}
	}
	// WalkDir does not follow symlinks, so a link in refs/ cannot lead the
	// walk out of the repository.
	err := filepath.WalkDir(filepath.Join(dir, "refs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		return remove(path, fi)
	})
	return n, err
}

// removeStaleQuarantines removes push quarantine directories that no
// process has written to for staleAfter. git 2.39 names them
// objects/tmp_objdir-incoming-XXXXXX; older versions objects/incoming-XXXXXX
// (kept for repositories shared with older nodes).
func removeStaleQuarantines(dir string, now time.Time) (int, error) {
	objects := filepath.Join(dir, "objects")
	entries, err := os.ReadDir(objects)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !(strings.HasPrefix(name, "tmp_objdir-") || strings.HasPrefix(name, "incoming-")) {
			continue
		}
		path := filepath.Join(objects, name)
		// A running push writes deep inside the directory (pack/tmp_pack_*),
		// which does not touch the top directory's mtime: the newest
		// modification anywhere inside decides.
		newest, err := newestModTime(path)
		if err != nil {
			return n, err
		}
		if now.Sub(newest) < staleAfter {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func newestModTime(root string) (time.Time, error) {
	var newest time.Time
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if fi, err := d.Info(); err == nil && fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		return nil
	})
	return newest, err
}

// removeStaleTempPacks removes objects/pack/tmp_* files (tmp_pack_, tmp_idx_,
// tmp_rev_, ...) left by a pack-objects or index-pack that died.
func removeStaleTempPacks(dir string, now time.Time) (int, error) {
	pack := filepath.Join(dir, "objects", "pack")
	entries, err := os.ReadDir(pack)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "tmp_") {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < staleAfter {
			continue
		}
		if err := os.Remove(filepath.Join(pack, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}
