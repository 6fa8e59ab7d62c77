package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestReadRef(t *testing.T) {
	m := newManager(t)
	_, h := seed(t, m, 1)
	dir := m.Path(1)
	// A packed ref, and a loose one that shadows its packed value.
	packed := "# pack-refs with: peeled fully-peeled sorted \n" +
		h.c1 + " refs/heads/packed\n" + h.c1 + " refs/heads/main\n"
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte(packed), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, want string }{
		{"refs/heads/main", h.c3},
		{"refs/heads/feature", h.feature},
		{"refs/heads/packed", h.c1},
		{"refs/heads/missing", ""},
		{"refs/heads/main/below", ""}, // a path through a file
	} {
		got, err := m.ReadRef(1, tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("ReadRef(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
		}
	}
	for _, bad := range []string{"HEAD", "refs/heads/../../config", "refs/heads/x.lock", "refs//heads/x", "/refs/heads/x"} {
		if _, err := m.ReadRef(1, bad); !problem.Is(err, problem.Invalid) {
			t.Errorf("ReadRef(%q) = %v, want invalid", bad, err)
		}
	}
}

func TestRemoveDeadRefLock(t *testing.T) {
	m := newManager(t)
	_, h := seed(t, m, 1)
	dir := m.Path(1)
	lock := filepath.Join(dir, "refs", "heads", "main.lock")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(lock, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	updateMain := func(to string) error {
		out, err := exec.Command("git", "-C", dir, "update-ref", "refs/heads/main", to).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "File exists") {
			t.Fatalf("update-ref failed for another reason: %s", out)
		}
		return err
	}

	// The dead git meant to move main to c2 and wrote that into its lock,
	// which blocks every update of main.
	write(h.c2 + "\n")
	if updateMain(h.c1) == nil {
		t.Fatal("update-ref succeeded past a held lock; the test proves nothing")
	}
	// A lock holding another value belongs to someone else: kept.
	if removed, err := m.RemoveDeadRefLock(1, "refs/heads/main", h.c1); err != nil || removed {
		t.Fatalf("RemoveDeadRefLock(other value) = %v, %v; want kept", removed, err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("lock of another value removed: %v", err)
	}
	if removed, err := m.RemoveDeadRefLock(1, "refs/heads/main", h.c2); err != nil || !removed {
		t.Fatalf("RemoveDeadRefLock = %v, %v; want removed", removed, err)
	}
	if err := updateMain(h.c1); err != nil {
		t.Fatalf("update-ref after the dead lock was removed: %v", err)
	}

	// A deletion's lock is empty.
	write("")
	if removed, err := m.RemoveDeadRefLock(1, "refs/heads/main", strings.Repeat("0", 40)); err != nil || !removed {
		t.Fatalf("RemoveDeadRefLock(deletion) = %v, %v; want removed", removed, err)
	}
	// No lock: nothing to do.
	if removed, err := m.RemoveDeadRefLock(1, "refs/heads/main", h.c2); err != nil || removed {
		t.Fatalf("RemoveDeadRefLock(no lock) = %v, %v", removed, err)
	}
	if _, err := m.RemoveDeadRefLock(1, "refs/heads/../../HEAD", ""); !problem.Is(err, problem.Invalid) {
		t.Fatalf("a ref outside refs/ was accepted: %v", err)
	}
}
