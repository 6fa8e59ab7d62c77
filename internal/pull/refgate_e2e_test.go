package pull_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// TestEveryRefMoveIsJudged: REST branch and tag creation and deletion are
// judged by the same branch permissions as a push, in the
// reference-transaction hook, and refused with the rule named; an exempt
// user passes; nothing moves on a refusal. Every restriction type meets
// every route.
func TestEveryRefMoveIsJudged(t *testing.T) {
	w := newWorld(t)
	w.n.Grant(t, w.repo, w.bobID, store.PermRepoWrite)
	restrict := "/rest/branch-permissions/2.0/projects/PRJ/repos/app/restrictions"
	add := func(typ, matcherType, id string, users ...string) int64 {
		var r struct {
			ID int64 `json:"id"`
		}
		w.must(200, w.admin, "POST", restrict, map[string]any{"type": typ,
			"matcher": map[string]any{"id": id, "type": map[string]string{"id": matcherType}}, "users": users}, &r)
		return r.ID
	}
	main := w.git("rev-parse", "main")
	first := w.branch("ro/a", "main", map[string]string{"a.txt": "a\n"})
	w.branch("nd/a", "main", map[string]string{"b.txt": "b\n"})
	w.branch("ff/a", "main", map[string]string{"c.txt": "c\n"})
	w.branch("pr/a", "main", map[string]string{"d.txt": "d\n"})
	ro := add("read-only", "PATTERN", "ro/*", "admin")
	nd := add("no-deletes", "PATTERN", "nd/*")
	ff := add("fast-forward-only", "PATTERN", "ff/*")
	pro := add("pull-request-only", "PATTERN", "pr/*")
	rtags := add("read-only", "PATTERN", "refs/tags/locked-*", "admin")

	branches := "/rest/api/1.0/projects/PRJ/repos/app/branches"
	utils := "/rest/branch-utils/1.0/projects/PRJ/repos/app/branches"
	tags := "/rest/api/1.0/projects/PRJ/repos/app/tags"
	tagsGit := "/rest/git/1.0/projects/PRJ/repos/app/tags"
	refused := func(what string, rule int64, code int, raw string) {
		t.Helper()
		if code != 403 || !strings.Contains(raw, fmt.Sprintf("branch permission #%d", rule)) {
			t.Errorf("%s: status %d, want 403 naming branch permission #%d: %s", what, code, rule, raw)
		}
	}
	call := func(cred, method, path string, body any) (int, string) {
		t.Helper()
		var raw map[string]any
		code := w.call(cred, method, path, body, &raw)
		return code, fmt.Sprint(raw)
	}
	tip := func(ref string) string {
		out, _ := w.n.App.Repos.ResolveCommit(t.Context(), w.repo.ID, ref)
		return out
	}

	// read-only: no creation under the pattern, no deletion, for bob; the
	// exempt admin may.
	code, raw := call(w.bob, "POST", branches, map[string]any{"name": "ro/new", "startPoint": main})
	refused("create under read-only", ro, code, raw)
	if tip("refs/heads/ro/new") != "" {
		t.Errorf("refused branch exists")
	}
	code, raw = call(w.bob, "DELETE", utils, map[string]any{"name": "ro/a"})
	refused("delete read-only", ro, code, raw)
	if tip("refs/heads/ro/a") != first {
		t.Errorf("read-only branch moved")
	}
	w.must(200, w.admin, "POST", branches, map[string]any{"name": "ro/new", "startPoint": main}, nil)

	// no-deletes: deletion refused, creation allowed.
	code, raw = call(w.bob, "DELETE", utils, map[string]any{"name": "nd/a"})
	refused("delete no-deletes", nd, code, raw)
	w.must(200, w.bob, "POST", branches, map[string]any{"name": "nd/b", "startPoint": main}, nil)

	// fast-forward-only: deletion is a rewrite.
	code, raw = call(w.bob, "DELETE", utils, map[string]any{"name": "ff/a"})
	refused("delete fast-forward-only", ff, code, raw)
	w.must(200, w.bob, "POST", branches, map[string]any{"name": "ff/b", "startPoint": main}, nil)

	// pull-request-only: no direct creation or deletion; a merge may move
	// it.
	code, raw = call(w.bob, "POST", branches, map[string]any{"name": "pr/b", "startPoint": main})
	refused("create under pull-request-only", pro, code, raw)
	code, raw = call(w.bob, "DELETE", utils, map[string]any{"name": "pr/a"})
	refused("delete pull-request-only", pro, code, raw)
	w.branch("topic", "pr/a", map[string]string{"topic.txt": "t\n"})
	pr := w.openPR("topic", "pr/a", "into pull-request-only")
	w.must(200, w.bob, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version), nil, nil)

	// Tags: a read-only pattern on tag refs holds for tag creation and
	// deletion too.
	code, raw = call(w.bob, "POST", tags, map[string]any{"name": "locked-1", "startPoint": main})
	refused("create locked tag", rtags, code, raw)
	if tip("refs/tags/locked-1") != "" {
		t.Errorf("refused tag exists")
	}
	w.must(200, w.bob, "POST", tags, map[string]any{"name": "free-1", "startPoint": main}, nil)
	w.must(204, w.bob, "DELETE", tagsGit+"/free-1", nil, nil)
	// Made behind the server's back (as a push by an exempt user would):
	// bob may not delete it.
	w.git("tag", "locked-2", main)
	w.git("push", "-q", "origin", "locked-2")
	code, raw = call(w.bob, "DELETE", tagsGit+"/"+url.PathEscape("locked-2"), nil)
	refused("delete locked tag", rtags, code, raw)
	if tip("refs/tags/locked-2") == "" {
		t.Errorf("locked tag deleted")
	}
}

// TestPushObjectLimits: the pre-receive policy refuses a push that adds a
// blob over git.max_blob_size or a tree deeper than git.max_tree_depth,
// naming the setting, and no ref moves.
func TestPushObjectLimits(t *testing.T) {
	w := newWorldOpts(t, testbed.NodeOptions{Configure: func(c *config.Config) {
		c.Git.MaxBlobSize = 4096
		c.Git.MaxTreeDepth = 8
	}})
	before := w.git("rev-parse", "main")
	pushErr := func(ref string) string {
		_, err := testbed.GitErr(w.work, "push", "-q", "origin", ref)
		if err == nil {
			return ""
		}
		return err.Error()
	}
	w.git("checkout", "-q", "-b", "big", "main")
	w.write("zeros.bin", strings.Repeat("\x00", 64<<10))
	w.commit("big blob")
	if msg := pushErr("big"); !strings.Contains(msg, "git.max_blob_size") {
		t.Errorf("big blob push: %q", msg)
	}
	w.git("checkout", "-q", "-b", "deep", "main")
	w.write(strings.Repeat("d/", 12)+"leaf.txt", "leaf\n")
	w.commit("deep tree")
	if msg := pushErr("deep"); !strings.Contains(msg, "git.max_tree_depth") {
		t.Errorf("deep tree push: %q", msg)
	}
	for _, ref := range []string{"refs/heads/big", "refs/heads/deep"} {
		if sha, _ := w.n.App.Repos.ResolveCommit(t.Context(), w.repo.ID, ref); sha != "" {
			t.Errorf("%s exists after a refused push", ref)
		}
	}
	if sha, _ := w.n.App.Repos.ResolveCommit(t.Context(), w.repo.ID, "refs/heads/main"); sha != before {
		t.Errorf("main moved")
	}
	// Within the limits, pushes go through.
	w.git("checkout", "-q", "-b", "fine", "main")
	w.write(strings.Repeat("d/", 3)+"leaf.txt", strings.Repeat("x", 1000))
	w.commit("fine")
	if msg := pushErr("fine"); msg != "" {
		t.Errorf("push within the limits: %q", msg)
	}
}
