package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestRemoveDeadLeftovers(t *testing.T) {
	m := newManager(t)
	_, h := seed(t, m, 1)
	dir := m.Path(1)
	old := time.Now().Add(-time.Minute)
	cutoff := time.Now().Add(-30 * time.Second)
	touch := func(rel string, at time.Time) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(h.c2+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// A dead push's lock, a dead pull request job's lock, a dead
	// deletion's packed-refs lock: older than the cutoff.
	touch("refs/heads/main.lock", old)
	touch("refs/pull-requests/1/merge.lock", old)
	touch("packed-refs.lock", old)
	// A live git's lock (younger) and a lock a live transaction names.
	touch("refs/heads/feature.lock", time.Now())
	touch("refs/heads/kept.lock", old)
	// A dead push's quarantine; a live one (a file inside is fresh); a
	// temporary object directory that is no push's.
	touch("objects/tmp_objdir-incoming-dead/pack/tmp_pack_1", old)
	touch("objects/tmp_objdir-incoming-live/pack/tmp_pack_1", old)
	touch("objects/tmp_objdir-incoming-live/pack/tmp_pack_2", time.Now())
	touch("objects/incoming-old/x", old)
	touch("objects/tmp_objdir-bulk-fsync-x/y", old)
	// Directories were modified when their entries were made, long ago.
	for _, d := range []string{"tmp_objdir-incoming-dead", "tmp_objdir-incoming-dead/pack", "tmp_objdir-incoming-live",
		"tmp_objdir-incoming-live/pack", "incoming-old", "tmp_objdir-bulk-fsync-x"} {
		if err := os.Chtimes(filepath.Join(dir, "objects", d), old, old); err != nil {
			t.Fatal(err)
		}
	}

	removed, err := m.RemoveDeadLeftovers(1, cutoff, map[string]bool{"refs/heads/kept": true})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{"objects/incoming-old", "objects/tmp_objdir-incoming-dead", "packed-refs.lock",
		"refs/heads/main.lock", "refs/pull-requests/1/merge.lock"}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, rel := range []string{"refs/heads/feature.lock", "refs/heads/kept.lock",
		"objects/tmp_objdir-incoming-live/pack/tmp_pack_1", "objects/tmp_objdir-bulk-fsync-x/y"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
			t.Errorf("%s removed: %v", rel, err)
		}
	}
	for _, rel := range want {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel))); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", rel, err)
		}
	}
	// The branch takes updates again.
	if out, err := exec.Command("git", "-C", dir, "update-ref", "refs/heads/main", h.c2).CombinedOutput(); err != nil {
		t.Fatalf("update-ref after the removal: %v: %s", err, out)
	}
	// Nothing to do, and no repository at all, are no errors.
	if removed, err := m.RemoveDeadLeftovers(1, cutoff, nil); err != nil || len(removed) != 1 || removed[0] != "refs/heads/kept.lock" {
		t.Errorf("second pass removed %q, %v; want only the lock no longer kept", removed, err)
	}
	if removed, err := m.RemoveDeadLeftovers(99, cutoff, nil); err != nil || len(removed) != 0 {
		t.Errorf("missing repository: %q, %v", removed, err)
	}
	if _, err := m.RemoveDeadLeftovers(0, cutoff, nil); err == nil {
		t.Error("id 0 accepted")
	}
}
