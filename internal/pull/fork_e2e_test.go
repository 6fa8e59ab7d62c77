package pull_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// TestForkPullRequest opens a pull request from a fork made through the
// REST fork endpoint, and checks what the parent may serve of the fork's
// commits before and after the merge, and what the fork may serve of the
// parent's commits made after the fork.
func TestForkPullRequest(t *testing.T) {
	w := newWorld(t)
	w.n.CreateProject(t, "FORK")
	var fork struct {
		ID     int64  `json:"id"`
		Slug   string `json:"slug"`
		Origin struct {
			Slug string `json:"slug"`
		} `json:"origin"`
	}
	w.must(201, w.admin, "POST", "/rest/api/1.0/projects/PRJ/repos/app", map[string]any{
		"name": "app-fork", "project": map[string]string{"key": "FORK"}}, &fork)
	if fork.Slug != "app-fork" {
		t.Fatalf("fork: %+v", fork)
	}
	forkRepo, err := w.n.Store().RepoBySlug(t.Context(), "FORK", "app-fork")
	if err != nil || forkRepo.ForkOf != w.repo.ID {
		t.Fatalf("fork in the store: %+v %v", forkRepo, err)
	}
	forkBare := w.n.App.Repos.Path(forkRepo.ID)

	// A branch pushed to the fork only.
	w.git("remote", "add", "fork", w.n.CloneURL("FORK", "app-fork", "admin", w.n.AdminPassword))
	w.git("checkout", "-q", "-b", "from-fork", "main")
	w.write("fork.txt", "from the fork\n")
	tip := w.commit("fork work")
	w.git("push", "-q", "fork", "from-fork")
	if _, err := testbed.GitErr(w.bare, "cat-file", "-e", tip); err == nil {
		t.Fatal("the parent has the fork's commit before any pull request")
	}

	var pr prJSON
	w.must(201, w.admin, "POST", prs, map[string]any{"title": "From the fork",
		"fromRef": map[string]any{"id": "refs/heads/from-fork",
			"repository": map[string]any{"slug": "app-fork", "project": map[string]string{"key": "FORK"}}},
		"toRef": map[string]any{"id": "refs/heads/main"}}, &pr)
	if pr.FromRef.LatestCommit != tip {
		t.Fatalf("pull request from %s, want %s", pr.FromRef.LatestCommit, tip)
	}
	if got := w.server("rev-parse", fmt.Sprintf("refs/pull-requests/%d/from", pr.ID)); got != tip {
		t.Fatalf("refs/pull-requests/%d/from = %s, want %s", pr.ID, got, tip)
	}
	base := fmt.Sprintf("%s/%d", prs, pr.ID)
	var diff struct {
		Diffs []struct {
			Destination struct {
				ToString string `json:"toString"`
			} `json:"destination"`
		} `json:"diffs"`
	}
	w.must(200, w.admin, "GET", base+"/diff", nil, &diff)
	if len(diff.Diffs) != 1 || diff.Diffs[0].Destination.ToString != "fork.txt" {
		t.Fatalf("fork diff: %+v", diff)
	}

	// The parent holds the fork's commit now (under its pull request ref),
	// but its commit, raw and diff APIs serve only what its own branches
	// and tags reach.
	repoAPI := "/rest/api/1.0/projects/PRJ/repos/app"
	notServed := []string{
		repoAPI + "/commits/" + tip,
		repoAPI + "/commits/" + tip + "/diff",
		repoAPI + "/raw/fork.txt?at=" + tip,
		repoAPI + "/compare/diff?from=" + tip + "&to=main",
		repoAPI + "/commits?until=" + tip,
	}
	for _, path := range notServed {
		if code := w.call(w.admin, "GET", path, nil, nil); code != 404 {
			t.Errorf("GET %s before the merge: %d, want 404", path, code)
		}
	}

	var merged prJSON
	w.must(200, w.admin, "POST", fmt.Sprintf("%s/merge?version=%d", base, pr.Version), nil, &merged)
	if merged.State != "MERGED" {
		t.Fatalf("merge: %+v", merged)
	}
	if _, err := testbed.GitErr(w.bare, "merge-base", "--is-ancestor", tip, "refs/heads/main"); err != nil {
		t.Fatal("the fork's commit is not in main after the merge")
	}
	for _, path := range notServed {
		if code := w.call(w.admin, "GET", path, nil, nil); code != 200 {
			t.Errorf("GET %s after the merge: %d, want 200", path, code)
		}
	}

	// The parent moves on; the fork shares its objects through alternates
	// but serves none of what its own refs do not reach, to anyone: not to
	// the admin who can read both, not to bob, who can read the fork only
	// (a fork owner who lost access to the parent).
	w.n.Grant(t, forkRepo, w.bobID, store.PermRepoRead)
	w.git("checkout", "-q", "main")
	w.git("pull", "-q", "origin", "main")
	w.write("secret.txt", "parent only\n")
	secret := w.commit("after the fork")
	w.git("push", "-q", "origin", "main")
	if _, err := testbed.GitErr(forkBare, "cat-file", "-e", secret); err != nil {
		t.Fatalf("test premise: the fork reads the parent's objects through alternates: %v", err)
	}
	forkAPI := "/rest/api/1.0/projects/FORK/repos/app-fork"
	for _, cred := range []string{w.admin, w.bob} {
		for _, path := range []string{
			forkAPI + "/commits/" + secret,
			forkAPI + "/commits/" + secret + "/diff",
			forkAPI + "/raw/secret.txt?at=" + secret,
			forkAPI + "/compare/diff?from=" + secret + "&to=main",
		} {
			if code := w.call(cred, "GET", path, nil, nil); code != 404 {
				t.Errorf("GET %s as %s: %d, want 404", path, strings.SplitN(cred, ":", 2)[0], code)
			}
		}
	}
	// Nor does a clone of the fork carry it.
	clone := t.TempDir()
	testbed.Git(t, clone, "clone", "-q", "--mirror", w.n.CloneURL("FORK", "app-fork", "admin", w.n.AdminPassword), "m.git")
	if _, err := testbed.GitErr(clone+"/m.git", "cat-file", "-e", secret); err == nil {
		t.Error("a clone of the fork carries the parent's later commit")
	}
}

// TestResetApprovalsOnChange: with the repository setting on, new commits
// on the source branch withdraw the approvals; with it off, they stay.
func TestResetApprovalsOnChange(t *testing.T) {
	w := newWorld(t)
	settings := "/rest/api/1.0/projects/PRJ/repos/app/settings/pull-requests"
	w.branch("topic", "main", map[string]string{"a.txt": "1\n"})
	pr := w.openPR("topic", "main", "topic")
	base := fmt.Sprintf("%s/%d", prs, pr.ID)
	bobStatus := func() string {
		var parts struct {
			Values []struct {
				User struct {
					Name string `json:"name"`
				} `json:"user"`
				Status string `json:"status"`
			} `json:"values"`
		}
		w.must(200, w.admin, "GET", base+"/participants", nil, &parts)
		for _, p := range parts.Values {
			if p.User.Name == "bob" {
				return p.Status
			}
		}
		return ""
	}
	for _, tc := range []struct {
		reset bool
		want  string
	}{{true, store.StatusUnapproved}, {false, store.StatusApproved}} {
		w.must(200, w.admin, "POST", settings, map[string]any{"resetApprovalsOnChange": tc.reset}, nil)
		w.must(200, w.bob, "POST", base+"/approve", nil, nil)
		if got := bobStatus(); got != store.StatusApproved {
			t.Fatalf("after approving: %s", got)
		}
		tip := w.branch("topic", "topic", map[string]string{"a.txt": fmt.Sprintf("reset %v\n", tc.reset)})
		// The rescope job resets approvals before it writes the preview
		// merge, so once the preview has the new tip as its parent the
		// reset, if any, has happened.
		wait.For(t, "rescope and preview", 45*time.Second, func() bool {
			out, err := testbed.GitErr(w.bare, "rev-parse", fmt.Sprintf("refs/pull-requests/%d/merge^2", pr.ID))
			return err == nil && strings.TrimSpace(out) == tip
		})
		if got := bobStatus(); got != tc.want {
			t.Fatalf("reset %v: bob's status after new commits is %s, want %s", tc.reset, got, tc.want)
		}
	}
}

// TestDiffETag: the diff is served with an entity tag that changes when
// the pull request's commits do, and a matching If-None-Match is a 304.
func TestDiffETag(t *testing.T) {
	w := newWorld(t)
	w.branch("tagged", "main", map[string]string{"e.txt": "1\n"})
	pr := w.openPR("tagged", "main", "tagged")
	get := func(path, etag string) (int, string, string) {
		req, _ := http.NewRequest("GET", w.n.URL+fmt.Sprintf("%s/%d%s", prs, pr.ID, path), nil)
		user, secret, _ := strings.Cut(w.admin, ":")
		req.SetBasicAuth(user, secret)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("ETag"), string(body)
	}
	code, tag, body := get("/diff", "")
	if code != 200 || tag == "" || !strings.Contains(body, `"toString":"e.txt"}`) {
		t.Fatalf("diff: %d %q %s", code, tag, body)
	}
	if code, _, body := get("/diff", tag); code != 304 || body != "" {
		t.Fatalf("revalidation: %d %q", code, body)
	}
	if code, other, _ := get("/diff/e.txt", tag); code != 200 || other == tag {
		t.Fatalf("one file's diff with the whole diff's tag: %d, tag %q", code, other)
	}
	tip := w.branch("tagged", "tagged", map[string]string{"e.txt": "2\n"})
	wait.For(t, "rescope", 45*time.Second, func() bool { return w.pr(pr.ID).FromRef.LatestCommit == tip })
	code, newTag, body := get("/diff", tag)
	if code != 200 || newTag == tag || !strings.Contains(body, `"line":"2"`) {
		t.Fatalf("after new commits: %d, tag %q (was %q)", code, newTag, tag)
	}
}
