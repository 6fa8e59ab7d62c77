package pull_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// TestForkPushCannotBorrowParentObjects: a fork reads its parent's objects
// through alternates, so a writer of the fork who cannot read the parent
// must not be able to point a fork branch at a commit made in the parent
// (knowing its id is enough for git's client, which omits every object the
// server advertises it has); ordinary fork pushes still work.
func TestForkPushCannotBorrowParentObjects(t *testing.T) {
	w := newWorld(t)
	w.n.CreateProject(t, "FORK")
	w.must(201, w.admin, "POST", "/rest/api/1.0/projects/PRJ/repos/app", map[string]any{
		"name": "app-fork", "project": map[string]string{"key": "FORK"}}, nil)
	fork, err := w.n.Store().RepoBySlug(t.Context(), "FORK", "app-fork")
	if err != nil {
		t.Fatal(err)
	}
	forkBare := w.n.App.Repos.Path(fork.ID)
	// eve may write to the fork and cannot read the parent.
	eve, err := w.n.Store().UserByName(t.Context(), "eve")
	if err != nil {
		t.Fatal(err)
	}
	w.n.Grant(t, fork, eve.ID, store.PermRepoWrite)
	eveToken := strings.TrimPrefix(w.eve, "eve:")
	eveFork := w.n.CloneURL("FORK", "app-fork", "eve", eveToken)

	// The parent moves on after the fork.
	w.write("secret.txt", "parent only\n")
	secret := w.commit("after the fork")
	w.git("push", "-q", "origin", "main")
	if _, err := testbed.GitErr(forkBare, "cat-file", "-e", secret); err != nil {
		t.Fatalf("test premise: the fork reads the parent's objects: %v", err)
	}

	// The attacks, from a repository that has the parent's commit (the
	// client sends nothing for it: the fork advertises it as ".have").
	rejected := func(what string, args ...string) {
		t.Helper()
		_, err := testbed.GitErr(w.work, append([]string{"push", eveFork}, args...)...)
		if err == nil {
			t.Fatalf("%s: push accepted", what)
		}
		if out := err.Error(); !strings.Contains(out, "is not in this fork or in the push") || !strings.Contains(out, "Push from a clone of the fork") {
			t.Fatalf("%s: rejection does not explain itself:\n%s", what, out)
		}
	}
	rejected("a branch at the parent's commit", secret+":refs/heads/stolen")
	w.git("checkout", "-q", "-b", "on-secret", secret)
	w.write("mine.txt", "mine\n")
	w.commit("on top of the parent's commit")
	rejected("a commit whose parent is the parent's commit", "on-secret:refs/heads/stolen")
	w.git("tag", "-a", "-m", "tag", "t-secret", secret)
	rejected("a tag of the parent's commit", "refs/tags/t-secret")
	if out, err := testbed.GitErr(forkBare, "for-each-ref", "--contains", secret); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("a fork ref reaches the parent's commit: %q %v", out, err)
	}

	// Ordinary pushes from a clone of the fork work: new commits on the
	// fork's history, a new branch at a commit the fork has, a delete.
	clone := t.TempDir()
	testbed.Git(t, clone, "clone", "-q", eveFork, "f")
	f := clone + "/f"
	testbed.Git(t, f, "checkout", "-q", "-b", "feature")
	testbed.Git(t, f, "-c", "user.name=Eve", "-c", "user.email=eve@example.com", "commit", "-q", "--allow-empty", "-m", "fork work")
	testbed.Git(t, f, "push", "-q", "origin", "feature")
	testbed.Git(t, f, "push", "-q", "origin", "main:refs/heads/copy")
	testbed.Git(t, f, "push", "-q", "origin", ":refs/heads/copy")
	if err := os.WriteFile(f+"/new.txt", []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.Git(t, f, "add", "new.txt")
	testbed.Git(t, f, "-c", "user.name=Eve", "-c", "user.email=eve@example.com", "commit", "-q", "-m", "a file")
	testbed.Git(t, f, "push", "-q", "origin", "feature")

	// Someone who can read the parent may bring its commits over: they
	// could fetch and push them anyway.
	w.git("push", "-q", w.n.CloneURL("FORK", "app-fork", "admin", w.n.AdminPassword), secret+":refs/heads/synced")
}
