package pull_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// TestPullRequestRefs: a pull request's refs/pull-requests/N/from and (while
// it merges cleanly) /merge are advertised to the target's readers and can
// be fetched by name, as Jenkins does; nobody can push to them; deleting
// the pull request (author or REPO_ADMIN, with its version) deletes them.
func TestPullRequestRefs(t *testing.T) {
	w := newWorld(t)
	tip := w.branch("topic", "main", map[string]string{"topic.txt": "t\n"})
	pr := w.openPR("topic", "main", "topic")
	from := fmt.Sprintf("refs/pull-requests/%d/from", pr.ID)
	merge := fmt.Sprintf("refs/pull-requests/%d/merge", pr.ID)
	bobURL := w.n.CloneURL("PRJ", "app", "bob", strings.TrimPrefix(w.bob, "bob:"))
	wait.For(t, "the merge preview ref", 45*time.Second, func() bool {
		out, _ := testbed.GitErr(w.work, "ls-remote", bobURL)
		return strings.Contains(out, from) && strings.Contains(out, merge)
	})
	for _, v := range []string{"0", "2"} {
		dst := t.TempDir()
		testbed.Git(t, dst, "init", "-q", "--bare")
		testbed.Git(t, dst, "-c", "protocol.version="+v, "fetch", "-q", bobURL, "+"+from+":refs/remotes/pr/from", "+"+merge+":refs/remotes/pr/merge")
		if got := strings.TrimSpace(testbed.Git(t, dst, "rev-parse", "refs/remotes/pr/from")); got != tip {
			t.Errorf("v%s: fetched %s = %s, want %s", v, from, got, tip)
		}
		if got := strings.TrimSpace(testbed.Git(t, dst, "rev-parse", "refs/remotes/pr/merge^2")); got != tip {
			t.Errorf("v%s: %s's second parent %s, want %s", v, merge, got, tip)
		}
	}
	if _, err := testbed.GitErr(w.work, "push", "-q", "origin", "main:"+from); err == nil {
		t.Errorf("a push to %s went through", from)
	}

	path := fmt.Sprintf("%s/%d", prs, pr.ID)
	if code := w.call(w.eve, "DELETE", path, map[string]any{"version": pr.Version}, nil); code != 404 {
		t.Errorf("delete by a user without access: %d, want 404", code)
	}
	if code := w.call(w.bob, "DELETE", path, map[string]any{"version": pr.Version}, nil); code != 403 {
		t.Errorf("delete by a reader who is not the author: %d, want 403", code)
	}
	if code := w.call(w.admin, "DELETE", path, map[string]any{"version": pr.Version + 7}, nil); code != 409 {
		t.Errorf("delete at a stale version: %d, want 409", code)
	}
	w.must(204, w.admin, "DELETE", path, map[string]any{"version": pr.Version}, nil)
	if code := w.call(w.admin, "GET", path, nil, nil); code != 404 {
		t.Errorf("deleted pull request: %d, want 404", code)
	}
	out := testbed.Git(t, w.work, "ls-remote", bobURL)
	if strings.Contains(out, "refs/pull-requests/") {
		t.Errorf("refs left after the delete:\n%s", out)
	}
	if !strings.Contains(out, "refs/heads/topic") {
		t.Errorf("the source branch went with the pull request:\n%s", out)
	}
}
