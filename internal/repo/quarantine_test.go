package repo

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestRemoveAbortedQuarantine(t *testing.T) {
	m := newManager(t)
	if err := m.Create(context.Background(), 3, "main"); err != nil {
		t.Fatal(err)
	}
	objects := filepath.Join(m.Path(3), "objects")
	mk := func(name string, mtime time.Time) {
		t.Helper()
		deep := filepath.Join(objects, name, "pack", "tmp_pack_x")
		if err := os.MkdirAll(filepath.Dir(deep), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(deep, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{deep, filepath.Dir(deep), filepath.Join(objects, name)} {
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	exited := time.Now().Add(-time.Minute)
	mk("tmp_objdir-incoming-dead", exited.Add(-time.Second))
	mk("tmp_objdir-incoming-live", exited.Add(time.Second))

	got, err := m.QuarantineDirs(3)
	if err != nil || len(got) != 2 || !got["tmp_objdir-incoming-dead"] || !got["tmp_objdir-incoming-live"] {
		t.Fatalf("QuarantineDirs = %v, %v", got, err)
	}
	if ok, err := m.RemoveAbortedQuarantine(3, "tmp_objdir-incoming-dead", exited); !ok || err != nil {
		t.Fatalf("dead quarantine: removed=%v err=%v", ok, err)
	}
	// Written after its git exited: someone else's, alive.
	if ok, err := m.RemoveAbortedQuarantine(3, "tmp_objdir-incoming-live", exited); ok || err != nil {
		t.Fatalf("live quarantine: removed=%v err=%v", ok, err)
	}
	if ok, err := m.RemoveAbortedQuarantine(3, "tmp_objdir-incoming-gone", exited); ok || err != nil {
		t.Fatalf("missing quarantine: removed=%v err=%v", ok, err)
	}
	for _, bad := range []string{"pack", "../objects", "tmp_objdir-incoming-x/../../refs"} {
		if _, err := m.RemoveAbortedQuarantine(3, bad, exited); problem.KindOf(err) != problem.Invalid {
			t.Fatalf("%q: err %v, want invalid", bad, err)
		}
	}
	got, _ = m.QuarantineDirs(3)
	if len(got) != 1 || !got["tmp_objdir-incoming-live"] {
		t.Fatalf("left: %v", got)
	}
}
