package repo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestPath(t *testing.T) {
	m := NewManager("/srv/repos", nil, nil)
	tests := []struct {
		id   int64
		want string
	}{
		{1, "/srv/repos/001/1.git"},
		{42, "/srv/repos/042/42.git"},
		{1000, "/srv/repos/000/1000.git"},
		{123456, "/srv/repos/456/123456.git"},
	}
	for _, tt := range tests {
		if got := m.Path(tt.id); got != tt.want {
			t.Errorf("Path(%d) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestValidateBranchName(t *testing.T) {
	good := []string{"main", "feature/x", "release-1.0", "a.b", "UPPER", "ünïcode", "x@y"}
	bad := []string{"", "-x", "feature/-x", "a..b", "a b", "x.lock", "a//b", "@", "HEAD", "a^b", "a:b", "a~1",
		"a?", "a*", "a[b", `a\b`, "/x", "x/", "x.", ".x", "a/.b", "a@{1}", "a\x00b", "a\nb", "a\x7fb", strings.Repeat("a", 2000),
		// gitref's rules beyond git's (issue 14).
		"a/@", "\xff", "a\u0085b"}
	for _, name := range good {
		if err := ValidateBranchName(name); err != nil {
			t.Errorf("ValidateBranchName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range bad {
		if err := ValidateBranchName(name); !problem.Is(err, problem.Invalid) {
			t.Errorf("ValidateBranchName(%q) = %v, want Invalid", name, err)
		}
	}
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	if m.Exists(7) {
		t.Fatal("repository exists before Create")
	}
	if err := m.Create(ctx, 7, "trunk"); err != nil {
		t.Fatal(err)
	}
	if !m.Exists(7) {
		t.Fatal("repository missing after Create")
	}
	if got := bareGit(t, m.Path(7), "symbolic-ref", "HEAD"); got != "refs/heads/trunk" {
		t.Errorf("HEAD = %q, want refs/heads/trunk", got)
	}
	if got := bareGit(t, m.Path(7), "rev-parse", "--is-bare-repository"); got != "true" {
		t.Errorf("bare = %q", got)
	}
	wantKind(t, m.Create(ctx, 7, "main"), problem.Conflict)
	wantKind(t, m.Create(ctx, 8, "-bad"), problem.Invalid)
	wantKind(t, m.Create(ctx, 0, "main"), problem.Invalid)
	if m.Exists(8) {
		t.Error("repository created despite an invalid branch name")
	}
	// No temporary directory is left next to the repository.
	entries, err := os.ReadDir(filepath.Dir(m.Path(7)))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "7.git" {
			t.Errorf("leftover %q in fan-out directory", e.Name())
		}
	}

	if err := m.SetDefaultBranch(ctx, 7, "develop"); err != nil {
		t.Fatal(err)
	}
	if got, err := m.DefaultBranch(ctx, 7); err != nil || got != "develop" {
		t.Errorf("DefaultBranch = %q, %v; want develop", got, err)
	}
	wantKind(t, m.SetDefaultBranch(ctx, 7, "a..b"), problem.Invalid)
	wantKind(t, m.SetDefaultBranch(ctx, 9, "main"), problem.NotFound)
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	if err := m.Create(ctx, 3, "main"); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if m.Exists(3) {
		t.Fatal("repository exists after Delete")
	}
	if _, err := os.Stat(m.Path(3)); !os.IsNotExist(err) {
		t.Fatalf("path still there: %v", err)
	}
	entries, _ := os.ReadDir(m.trashDir())
	if len(entries) != 0 {
		t.Errorf("trash not emptied: %d entries", len(entries))
	}
	wantKind(t, m.Delete(ctx, 3), problem.NotFound)
	// The id can be used again.
	if err := m.Create(ctx, 3, "main"); err != nil {
		t.Fatal(err)
	}
}

func TestSize(t *testing.T) {
	m := newManager(t)
	seed(t, m, 5)
	n, err := m.Size(5)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Errorf("Size = %d, want at least the 3000-byte blob's compressed size", n)
	}
	_, err = m.Size(6)
	wantKind(t, err, problem.NotFound)
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	w, h := seed(t, m, 1)
	if err := m.SetDefaultBranch(ctx, 1, "feature"); err != nil {
		t.Fatal(err)
	}
	if err := m.Fork(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	fork := m.Path(2)
	bareGit(t, fork, "fsck", "--strict", "--no-progress")
	if got := bareGit(t, fork, "symbolic-ref", "HEAD"); got != "refs/heads/feature" {
		t.Errorf("fork HEAD = %q, want refs/heads/feature", got)
	}
	want := bareGit(t, m.Path(1), "for-each-ref", "--format=%(refname) %(objectname) %(*objectname)")
	got := bareGit(t, fork, "for-each-ref", "--format=%(refname) %(objectname) %(*objectname)")
	if got != want {
		t.Errorf("fork refs:\n%s\nwant:\n%s", got, want)
	}
	// Borrowed, not copied: the fork holds no objects of its own.
	if out := bareGit(t, fork, "count-objects", "-v"); !strings.Contains(out, "count: 0") || !strings.Contains(out, "in-pack: 0") {
		t.Errorf("fork has its own objects:\n%s", out)
	}

	// A commit pushed to the parent later is readable by the fork's git
	// (alternates) but not reachable from its refs: not served.
	w.write("later.txt", "later\n")
	later := w.commit("later")
	w.git("push", "-q", m.Path(1), "main")
	if ok, err := m.IsReachable(ctx, 1, later); err != nil || !ok {
		t.Errorf("parent IsReachable(later) = %v, %v; want true", ok, err)
	}
	if ok, err := m.IsReachable(ctx, 2, later); err != nil || ok {
		t.Errorf("fork IsReachable(later) = %v, %v; want false", ok, err)
	}
	_, err := m.ResolveCommit(ctx, 2, later)
	wantKind(t, err, problem.NotFound)
	_, err = m.Log(ctx, 2, later[:12], "", 0, 10)
	wantKind(t, err, problem.NotFound)
	if ok, err := m.IsReachable(ctx, 2, h.c2); err != nil || !ok {
		t.Errorf("fork IsReachable(c2) = %v, %v; want true", ok, err)
	}
	if sha, err := m.ResolveCommit(ctx, 2, h.c1); err != nil || sha != h.c1 {
		t.Errorf("fork ResolveCommit(c1) = %q, %v", sha, err)
	}

	wantKind(t, m.Fork(ctx, 1, 2), problem.Conflict)
	wantKind(t, m.Fork(ctx, 99, 3), problem.NotFound)
	wantKind(t, m.Fork(ctx, 1, 1), problem.Invalid)

	// A fork of a fork reads through both alternates.
	if err := m.Fork(ctx, 2, 1002); err != nil {
		t.Fatal(err)
	}
	bareGit(t, m.Path(1002), "fsck", "--strict", "--no-progress")
	if c, err := m.Commit(ctx, 1002, "main"); err != nil || c.ID != h.c3 {
		t.Errorf("fork of fork main = %+v, %v; want %s", c, err, h.c3)
	}
}
