package repo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// globOne reports whether pattern matches at least one file.
func globOne(t *testing.T, pattern string) bool {
	t.Helper()
	matches, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return len(matches) > 0
}

func fsck(t *testing.T, dir string) {
	t.Helper()
	bareGit(t, dir, "fsck", "--strict", "--no-progress", "--no-dangling")
}

func TestHousekeep(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	dir := m.Path(1)
	before := bareGit(t, dir, "rev-list", "--all", "--objects")

	st, err := m.HousekeepWithStats(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Fork || !st.Bitmap {
		t.Errorf("stats = %+v, want a non-fork with a bitmap", st)
	}
	fsck(t, dir)
	if !globOne(t, filepath.Join(dir, "objects/pack/multi-pack-index-*.bitmap")) {
		t.Error("no multi-pack bitmap")
	}
	if !globOne(t, filepath.Join(dir, "objects/pack/multi-pack-index")) {
		t.Error("no multi-pack-index")
	}
	if !globOne(t, filepath.Join(dir, "objects/info/commit-graphs/commit-graph-chain")) {
		t.Error("no commit-graph chain")
	}
	if !globOne(t, filepath.Join(dir, "packed-refs")) || globOne(t, filepath.Join(dir, "refs/heads/main")) {
		t.Error("refs not packed")
	}
	if after := bareGit(t, dir, "rev-list", "--all", "--objects"); after != before {
		t.Error("reachable objects changed")
	}
	// Loose objects were packed.
	if out := bareGit(t, dir, "count-objects", "-v"); !strings.Contains(out, "count: 0\n") {
		t.Errorf("loose objects left:\n%s", out)
	}
	// Reads still work, and a second run on a packed repository is fine.
	if c, err := m.Commit(ctx, 1, "main"); err != nil || c.ID != h.c3 {
		t.Errorf("Commit after housekeeping = %+v, %v", c, err)
	}
	if err := m.Housekeep(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fsck(t, dir)

	// An empty repository is fine too.
	if err := m.Create(ctx, 2, "main"); err != nil {
		t.Fatal(err)
	}
	if err := m.Housekeep(ctx, 2); err != nil {
		t.Fatal(err)
	}
	wantKind(t, m.Housekeep(ctx, 3), problem.NotFound)
}

// TestHousekeepKeepsBorrowedObjects is the fork network's safety property:
// objects the parent no longer reaches, but a fork does, survive the
// parent's housekeeping, loose or packed.
func TestHousekeepKeepsBorrowedObjects(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	w, h := seed(t, m, 1)
	// One topic branch gets packed before forking, one stays loose (a small
	// push is unpacked into loose objects).
	w.git("checkout", "-q", "-b", "packed-topic", h.c1)
	w.write("packed.txt", "packed\n")
	packedTopic := w.commit("packed topic")
	w.git("push", "-q", m.Path(1), "packed-topic")
	if err := m.Housekeep(ctx, 1); err != nil {
		t.Fatal(err)
	}
	w.git("checkout", "-q", "-b", "loose-topic", h.c2)
	w.write("loose.txt", "loose\n")
	looseTopic := w.commit("loose topic")
	w.git("push", "-q", m.Path(1), "loose-topic")

	if err := m.Fork(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	// The parent drops both branches: their objects are now unreachable
	// in the parent but still reachable from the fork.
	w.git("push", "-q", m.Path(1), ":packed-topic", ":loose-topic")
	for range 2 {
		if err := m.Housekeep(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	fsck(t, m.Path(1))
	fsck(t, m.Path(2))
	for _, sha := range []string{packedTopic, looseTopic} {
		if ok, err := m.IsReachable(ctx, 2, sha); err != nil || !ok {
			t.Errorf("fork IsReachable(%s) = %v, %v", sha, ok, err)
		}
		if ok, err := m.IsReachable(ctx, 1, sha); err != nil || ok {
			t.Errorf("parent IsReachable(%s) = %v, %v; want false", sha, ok, err)
		}
	}
	data, _, _, err := m.Blob(ctx, 2, "loose-topic", "loose.txt", 100)
	if err != nil || string(data) != "loose\n" {
		t.Errorf("fork blob = %q, %v", data, err)
	}

	// The fork's own housekeeping: no bitmap (git cannot write one for
	// borrowed objects), no copied parent objects, still consistent.
	w.git("checkout", "-q", "main")
	w.write("fork-only.txt", "fork\n")
	w.commit("fork only")
	w.git("push", "-q", m.Path(2), "main")
	st, err := m.HousekeepWithStats(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Fork || st.Bitmap {
		t.Errorf("fork stats = %+v", st)
	}
	fsck(t, m.Path(2))
	if out := bareGit(t, m.Path(2), "count-objects", "-v"); !strings.Contains(out, "in-pack: 3\n") {
		// commit, tree, blob of "fork only": nothing borrowed was copied.
		t.Errorf("fork objects:\n%s", out)
	}
}

func TestHousekeepStaleFiles(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	seed(t, m, 1)
	dir := m.Path(1)
	old := time.Now().Add(-2 * staleAfter)
	recent := time.Now().Add(-staleAfter / 2)

	type file struct {
		path     string
		dir      bool
		mtime    time.Time
		removed  bool
		deepFile string // for directories: a file inside, with the same mtime unless fresh
		fresh    bool   // the deep file was written just now
	}
	files := []file{
		{path: "packed-refs.lock", mtime: old, removed: true},
		{path: "HEAD.lock", mtime: old, removed: true},
		{path: "config.lock", mtime: recent},
		{path: "refs/heads/main.lock", mtime: old, removed: true},
		{path: "refs/heads/deep/x/y.lock", mtime: old, removed: true},
		{path: "refs/heads/fresh.lock", mtime: recent},
		{path: "refs/tags/fresh-too.lock", mtime: time.Now()},
		{path: "objects/info/commit-graphs/commit-graph-chain.lock", mtime: old, removed: true},
		{path: "objects/pack/multi-pack-index.lock", mtime: old, removed: true},
		{path: "objects/pack/tmp_pack_abc123", mtime: old, removed: true},
		{path: "objects/pack/tmp_idx_recent", mtime: recent},
		{path: "objects/tmp_objdir-incoming-old", dir: true, mtime: old, removed: true, deepFile: "pack/tmp_pack_1"},
		{path: "objects/incoming-legacy", dir: true, mtime: old, removed: true, deepFile: "ab/cdef"},
		{path: "objects/tmp_objdir-incoming-live", dir: true, mtime: old, deepFile: "pack/tmp_pack_2", fresh: true},
		{path: "objects/tmp_objdir-incoming-new", dir: true, mtime: recent},
		{path: "not-a-lock", mtime: old},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if f.dir {
			if f.deepFile != "" {
				deep := filepath.Join(p, f.deepFile)
				if err := os.MkdirAll(filepath.Dir(deep), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(deep, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
				if !f.fresh {
					os.Chtimes(deep, f.mtime, f.mtime)
					os.Chtimes(filepath.Dir(deep), f.mtime, f.mtime)
				}
			} else if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, f.mtime, f.mtime); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink named like a lock is not a lock: never followed, never
	// removed.
	outside := filepath.Join(t.TempDir(), "outside.lock")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "refs", "link.lock")); err != nil {
		t.Fatal(err)
	}

	st, err := m.HousekeepWithStats(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		_, err := os.Lstat(filepath.Join(dir, f.path))
		gone := os.IsNotExist(err)
		if gone != f.removed {
			t.Errorf("%s: removed = %v, want %v", f.path, gone, f.removed)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("file behind a symlink was touched: %v", err)
	}
	if st.LocksRemoved != 6 || st.QuarantinesGone != 2 || st.TempPacksGone != 1 {
		t.Errorf("stats = %+v, want 6 locks, 2 quarantines, 1 temporary pack", st)
	}
	fsck(t, dir)
}

// TestHousekeepForkOfMidxParent is issue 14's fork housekeeping: a fork of
// a parent with a multi-pack-index and bitmap used to end in
// "multi-pack-index died of signal 11" (git 2.39 counts the parent's packs
// into the fork's geometric repack; see housekeeping.go). The fork must get
// repacked, stay cloneable, keep its unreachable objects, and leave the
// parent untouched.
func TestHousekeepForkOfMidxParent(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	w, h := seed(t, m, 1)
	if st, err := m.HousekeepWithStats(ctx, 1); err != nil || !st.Bitmap {
		t.Fatalf("parent housekeeping = %+v, %v", st, err)
	}
	parent := m.Path(1)
	if !globOne(t, filepath.Join(parent, "objects/pack/multi-pack-index-*.bitmap")) {
		t.Fatal("parent has no multi-pack bitmap")
	}
	if err := m.Fork(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	fork := m.Path(2)
	parentPacks := packDirState(t, parent)

	// A fresh fork owns no object at all: the case that crashed.
	st, err := m.HousekeepWithStats(ctx, 2)
	if err != nil {
		t.Fatalf("housekeeping a fresh fork: %v", err)
	}
	if !st.Fork || st.Bitmap {
		t.Errorf("fork stats = %+v", st)
	}
	fsck(t, fork)

	// Two pushes kept as packs (unpackLimit 1) and one object no ref
	// reaches: the fork now has something to repack.
	w.write("fork-1.txt", "one\n")
	w.commit("fork one")
	w.git("push", "-q", "--receive-pack=git -c receive.unpackLimit=1 receive-pack", fork, "main")
	w.write("fork-2.txt", "two\n")
	tip := w.commit("fork two")
	w.git("push", "-q", "--receive-pack=git -c receive.unpackLimit=1 receive-pack", fork, "main")
	stray := filepath.Join(t.TempDir(), "stray")
	if err := os.WriteFile(stray, []byte("reached by no ref\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreachable := bareGit(t, fork, "hash-object", "-w", stray)
	if n := len(localPacks(t, fork)); n != 2 {
		t.Fatalf("fork has %d packs before housekeeping, want 2", n)
	}

	for range 2 {
		if _, err := m.HousekeepWithStats(ctx, 2); err != nil {
			t.Fatalf("housekeeping the fork: %v", err)
		}
	}
	fsck(t, fork)
	if n := len(localPacks(t, fork)); n != 1 {
		t.Errorf("fork has %d packs after housekeeping, want 1", n)
	}
	out := bareGit(t, fork, "count-objects", "-v")
	// The two pushed commits with their trees and blobs (2×3) plus the
	// unreachable blob; nothing borrowed from the parent was copied.
	if !strings.Contains(out, "count: 0\n") || !strings.Contains(out, "in-pack: 7\n") {
		t.Errorf("fork objects after housekeeping:\n%s", out)
	}
	if got := bareGit(t, fork, "cat-file", "-t", unreachable); got != "blob" {
		t.Errorf("unreachable object in the fork: %q", got)
	}

	// A clone from the fork still gets the whole history.
	clone := filepath.Join(t.TempDir(), "clone")
	w.git("clone", "-q", "--no-local", fork, clone)
	if got := bareGit(t, filepath.Join(clone, ".git"), "rev-parse", "HEAD"); got != tip {
		t.Errorf("clone HEAD = %s, want %s", got, tip)
	}
	if n := bareGit(t, filepath.Join(clone, ".git"), "rev-list", "--count", "HEAD"); n != "5" {
		t.Errorf("clone has %s commits, want 5", n)
	}
	bareGit(t, filepath.Join(clone, ".git"), "cat-file", "-e", h.c1)

	// The parent is unaffected: the same pack files, still consistent.
	if got := packDirState(t, parent); got != parentPacks {
		t.Errorf("parent's pack directory changed:\nbefore:\n%s\nafter:\n%s", parentPacks, got)
	}
	fsck(t, parent)
}

// packDirState lists dir's pack directory with sizes and modification
// times, to tell whether anything there was rewritten.
func packDirState(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

func localPacks(t *testing.T, dir string) []string {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.pack"))
	if err != nil {
		t.Fatal(err)
	}
	return packs
}
