package pull_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// world is one node with a repository, a checkout pushing to it, and a
// few users.
type world struct {
	t     *testing.T
	n     *testbed.Node
	repo  *store.Repository
	work  string // client checkout
	bare  string // the server's repository
	admin string // basic credentials "user:secret"
	bob   string
	bobID int64
	eve   string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOpts(t, testbed.NodeOptions{})
}

func newWorldOpts(t *testing.T, opts testbed.NodeOptions) *world {
	t.Helper()
	n := testbed.NewNode(t, opts)
	w := &world{t: t, n: n, repo: n.CreateRepo(t, "PRJ", "app")}
	w.bare = n.App.Repos.Path(w.repo.ID)
	w.admin = "admin:" + n.AdminPassword
	bob := n.CreateUser(t, "bob", "bob-password-123")
	n.Grant(t, w.repo, bob.ID, store.PermRepoRead)
	w.bob, w.bobID = "bob:"+n.Token(t, bob.ID, store.ScopeWrite), bob.ID
	eve := n.CreateUser(t, "eve", "eve-password-123")
	w.eve = "eve:" + n.Token(t, eve.ID, store.ScopeWrite)

	w.work = t.TempDir()
	w.git("init", "-q", "-b", "main")
	w.write("code.txt", lines(1, 10))
	w.write("README", "hello\n")
	w.commit("initial")
	w.git("remote", "add", "origin", n.CloneURL("PRJ", "app", "admin", n.AdminPassword))
	w.git("push", "-q", "origin", "main")
	return w
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func (w *world) git(args ...string) string {
	w.t.Helper()
	return strings.TrimSpace(testbed.Git(w.t, w.work, args...))
}

func (w *world) server(args ...string) string {
	w.t.Helper()
	return strings.TrimSpace(testbed.Git(w.t, w.bare, args...))
}

func (w *world) write(name, content string) {
	w.t.Helper()
	p := filepath.Join(w.work, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) commit(msg string) string {
	w.t.Helper()
	w.git("add", "-A")
	w.git("commit", "-q", "-m", msg)
	return w.git("rev-parse", "HEAD")
}

// call makes a REST call as cred ("user:secret") and decodes the answer
// into out when given. It returns the status.
func (w *world) call(cred, method, path string, body, out any) int {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, w.n.URL+path, rd)
	if cred != "" {
		user, secret, _ := strings.Cut(cred, ":")
		req.SetBasicAuth(user, secret)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			w.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// must is call that fails the test unless the status is want.
func (w *world) must(want int, cred, method, path string, body, out any) {
	w.t.Helper()
	var raw json.RawMessage
	got := w.call(cred, method, path, body, &raw)
	if got != want {
		w.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, want, raw)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			w.t.Fatal(err)
		}
	}
}

const prs = "/rest/api/1.0/projects/PRJ/repos/app/pull-requests"

type prJSON struct {
	ID      int64  `json:"id"`
	Version int64  `json:"version"`
	State   string `json:"state"`
	FromRef struct {
		LatestCommit string `json:"latestCommit"`
	} `json:"fromRef"`
	ToRef struct {
		LatestCommit string `json:"latestCommit"`
	} `json:"toRef"`
	DescriptionHTML string `json:"descriptionHtml"`
	Properties      struct {
		MergeCommit struct {
			ID string `json:"id"`
		} `json:"mergeCommit"`
	} `json:"properties"`
}

func (w *world) openPR(from, to, title string) prJSON {
	w.t.Helper()
	var pr prJSON
	w.must(201, w.admin, "POST", prs, map[string]any{
		"title": title, "description": "Does **things**.\n\n<script>alert(1)</script>",
		"fromRef": map[string]any{"id": "refs/heads/" + from}, "toRef": map[string]any{"id": "refs/heads/" + to},
		"reviewers": []any{map[string]any{"user": map[string]string{"name": "bob"}}},
	}, &pr)
	return pr
}

func (w *world) pr(id int64) prJSON {
	w.t.Helper()
	var pr prJSON
	w.must(200, w.admin, "GET", fmt.Sprintf("%s/%d", prs, id), nil, &pr)
	return pr
}

// eventually retries cond until it holds or 45 s pass (jobs poll once a
// second on SQLite).

func (w *world) branch(name, base string, files map[string]string) string {
	w.t.Helper()
	w.git("checkout", "-q", "-B", name, base)
	for f, c := range files {
		w.write(f, c)
	}
	sha := w.commit("change on " + name)
	w.git("push", "-q", "-f", "origin", name)
	return sha
}

type commentJSON struct {
	ID      int64 `json:"id"`
	Version int64 `json:"version"`
	Anchor  *struct {
		Path     string `json:"path"`
		Line     int    `json:"line"`
		Orphaned bool   `json:"orphaned"`
	} `json:"anchor"`
	Comments []commentJSON `json:"comments"`
}

func TestWorkflowDriftApproveMerge(t *testing.T) {
	w := newWorld(t)
	// Line 8 changes, line 9 stays: one comment on each.
	w.branch("feature", "main", map[string]string{
		"code.txt": strings.Replace(lines(1, 10), "line 8\n", "line eight\n", 1),
		"new.txt":  "new file\n",
	})
	pr := w.openPR("feature", "main", "Feature")
	if pr.ID != 1 || pr.Version != 0 || pr.State != "OPEN" {
		t.Fatalf("created %+v", pr)
	}
	if strings.Contains(pr.DescriptionHTML, "<script") || !strings.Contains(pr.DescriptionHTML, "<strong>things</strong>") {
		t.Fatalf("descriptionHtml not rendered and sanitised: %q", pr.DescriptionHTML)
	}
	base := fmt.Sprintf("%s/%d", prs, pr.ID)

	// The diff is never empty, whether the job has finished or not.
	var changes struct {
		Values []struct {
			Path struct {
				ToString string `json:"toString"`
			} `json:"path"`
			Type string `json:"type"`
		} `json:"values"`
	}
	w.must(200, w.admin, "GET", base+"/changes", nil, &changes)
	if len(changes.Values) != 2 {
		t.Fatalf("changes: %+v", changes)
	}
	var diff struct {
		Diffs []struct {
			Destination struct {
				ToString string `json:"toString"`
			} `json:"destination"`
			Hunks []struct {
				Segments []struct {
					Type string `json:"type"`
				} `json:"segments"`
			} `json:"hunks"`
		} `json:"diffs"`
	}
	w.must(200, w.admin, "GET", base+"/diff/code.txt", nil, &diff)
	if len(diff.Diffs) != 1 || diff.Diffs[0].Destination.ToString != "code.txt" || len(diff.Diffs[0].Hunks) != 1 {
		t.Fatalf("file diff: %+v", diff)
	}
	// contextLines is honoured (computed on request), and the paths are
	// Bitbucket's path objects.
	var ctxDiff struct {
		ContextLines int    `json:"contextLines"`
		Whitespace   string `json:"whitespace"`
		Diffs        []struct {
			Source struct {
				Components []string `json:"components"`
				Parent     string   `json:"parent"`
				Name       string   `json:"name"`
				Extension  string   `json:"extension"`
			} `json:"source"`
			Hunks []struct {
				SourceLine int `json:"sourceLine"`
				SourceSpan int `json:"sourceSpan"`
			} `json:"hunks"`
		} `json:"diffs"`
	}
	w.must(200, w.admin, "GET", base+"/diff/code.txt?contextLines=1", nil, &ctxDiff)
	if ctxDiff.ContextLines != 1 || ctxDiff.Whitespace != "SHOW" || len(ctxDiff.Diffs) != 1 ||
		len(ctxDiff.Diffs[0].Hunks) != 1 || ctxDiff.Diffs[0].Hunks[0].SourceLine != 7 || ctxDiff.Diffs[0].Hunks[0].SourceSpan != 3 {
		t.Fatalf("diff with one line of context: %+v", ctxDiff)
	}
	if src := ctxDiff.Diffs[0].Source; src.Name != "code.txt" || src.Extension != "txt" || src.Parent != "" || len(src.Components) != 1 {
		t.Fatalf("source path object: %+v", src)
	}
	w.must(200, w.admin, "GET", base+"/diff?contextLines=0", nil, &ctxDiff)
	if ctxDiff.ContextLines != 0 || len(ctxDiff.Diffs) != 2 || ctxDiff.Diffs[0].Hunks[0].SourceSpan != 1 {
		t.Fatalf("whole diff without context: %+v", ctxDiff)
	}
	w.must(200, w.admin, "GET", base+"/diff", nil, &ctxDiff)
	if ctxDiff.ContextLines != 3 || ctxDiff.Whitespace != "SHOW" {
		t.Fatalf("default diff: contextLines %d whitespace %q", ctxDiff.ContextLines, ctxDiff.Whitespace)
	}
	w.must(400, w.admin, "GET", base+"/diff?contextLines=x", nil, nil)

	var onChanged, onContext, general commentJSON
	w.must(201, w.bob, "POST", base+"/comments", map[string]any{"text": "why eight?",
		"anchor": map[string]any{"path": "code.txt", "line": 8, "lineType": "ADDED", "fileType": "TO"}}, &onChanged)
	w.must(201, w.bob, "POST", base+"/comments", map[string]any{"text": "and nine",
		"anchor": map[string]any{"path": "code.txt", "line": 9, "lineType": "CONTEXT", "fileType": "TO"}}, &onContext)
	w.must(201, w.bob, "POST", base+"/comments", map[string]any{"text": "looks fine overall"}, &general)
	w.must(201, w.admin, "POST", base+"/comments", map[string]any{"text": "thanks", "parent": map[string]any{"id": general.ID}}, nil)

	// Two lines above both comments, and line 9 removed.
	w.git("checkout", "-q", "feature")
	w.write("code.txt", "top 1\ntop 2\n"+strings.Replace(strings.Replace(lines(1, 10), "line 8\n", "line eight\n", 1), "line 9\n", "", 1))
	newTip := w.commit("move things")
	w.git("push", "-q", "origin", "feature")
	wait.For(t, "rescope", 45*time.Second, func() bool { return w.pr(pr.ID).FromRef.LatestCommit == newTip })

	var list struct {
		Values []commentJSON `json:"values"`
	}
	wait.For(t, "comment drift", 45*time.Second, func() bool {
		w.must(200, w.admin, "GET", base+"/comments", nil, &list)
		for _, c := range list.Values {
			if c.ID == onChanged.ID && (c.Anchor == nil || c.Anchor.Line != 10 || c.Anchor.Orphaned) {
				return false
			}
			if c.ID == onContext.ID && (c.Anchor == nil || !c.Anchor.Orphaned) {
				return false
			}
		}
		return true
	})
	for _, c := range list.Values {
		if c.ID == general.ID && len(c.Comments) != 1 {
			t.Fatalf("reply not nested: %+v", c)
		}
	}

	// Approve, then merge at a stale version (409) and the current one.
	w.must(200, w.bob, "POST", base+"/approve", nil, nil)
	cur := w.pr(pr.ID)
	if code := w.call(w.admin, "POST", fmt.Sprintf("%s/merge?version=%d", base, cur.Version+1), nil, nil); code != 409 {
		t.Fatalf("merge at a stale version: %d", code)
	}
	oldMain := w.server("rev-parse", "refs/heads/main")
	var merged prJSON
	w.must(200, w.admin, "POST", fmt.Sprintf("%s/merge?version=%d", base, cur.Version), map[string]any{}, &merged)
	if merged.State != "MERGED" {
		t.Fatalf("after merge: %+v", merged)
	}
	parents := strings.Fields(w.server("rev-list", "--parents", "-n1", "refs/heads/main"))
	if len(parents) != 3 || parents[1] != oldMain || parents[2] != newTip {
		t.Fatalf("no-ff merge commit has parents %v, want %s %s", parents[1:], oldMain, newTip)
	}
	if w.call(w.admin, "POST", base+"/decline?version=0", nil, nil) != 409 {
		t.Fatal("declining a merged pull request should conflict")
	}
	var acts struct {
		Values []struct {
			Action string `json:"action"`
		} `json:"values"`
	}
	w.must(200, w.admin, "GET", base+"/activities", nil, &acts)
	if len(acts.Values) == 0 || acts.Values[0].Action != "MERGED" {
		t.Fatalf("activities: %+v", acts)
	}
}

func TestMergeStrategies(t *testing.T) {
	w := newWorld(t)
	cases := []struct {
		strategy   string
		moveTarget bool // main gets a commit after the branch was made
		check      func(t *testing.T, oldMain, tip, newMain string)
	}{
		{"no-ff", false, func(t *testing.T, oldMain, tip, newMain string) {
			if got := w.server("rev-list", "--parents", "-n1", newMain); got != newMain+" "+oldMain+" "+tip {
				t.Fatalf("no-ff: %s", got)
			}
		}},
		{"ff", false, func(t *testing.T, oldMain, tip, newMain string) {
			if newMain != tip {
				t.Fatalf("ff: main at %s, want %s", newMain, tip)
			}
		}},
		{"ff-only", false, func(t *testing.T, oldMain, tip, newMain string) {
			if newMain != tip {
				t.Fatalf("ff-only: main at %s, want %s", newMain, tip)
			}
		}},
		{"squash", true, func(t *testing.T, oldMain, tip, newMain string) {
			if got := w.server("rev-list", "--parents", "-n1", newMain); got != newMain+" "+oldMain {
				t.Fatalf("squash parents: %s", got)
			}
			if w.server("log", "-1", "--format=%s", newMain) != "PR squash" {
				t.Fatal("squash message is not the title")
			}
			if w.server("show", newMain+":squash.txt") != "squash" || w.server("show", newMain+":moved-squash.txt") != "moved" {
				t.Fatal("squash tree lacks a side")
			}
		}},
		{"squash-ff-only", false, func(t *testing.T, oldMain, tip, newMain string) {
			if got := w.server("rev-list", "--parents", "-n1", newMain); got != newMain+" "+oldMain {
				t.Fatalf("squash-ff-only parents: %s", got)
			}
			if w.server("rev-parse", newMain+"^{tree}") != w.server("rev-parse", tip+"^{tree}") {
				t.Fatal("squash-ff-only tree differs from the source")
			}
		}},
		{"rebase-no-ff", true, func(t *testing.T, oldMain, tip, newMain string) {
			p := strings.Fields(w.server("rev-list", "--parents", "-n1", newMain))
			if len(p) != 3 || p[1] != oldMain {
				t.Fatalf("rebase-no-ff parents: %v", p)
			}
			rebased := p[2]
			if w.server("rev-parse", rebased+"^") != oldMain {
				t.Fatal("rebased commit is not on top of the target")
			}
			if w.server("log", "-1", "--format=%an|%s", rebased) != w.server("log", "-1", "--format=%an|%s", tip) {
				t.Fatal("rebase lost the author or message")
			}
			if w.server("show", newMain+":rebase-no-ff.txt") != "rebase-no-ff" || w.server("show", newMain+":moved-rebase-no-ff.txt") != "moved" {
				t.Fatal("rebased tree lacks a side")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.strategy, func(t *testing.T) {
			tip := w.branch(tc.strategy, "main", map[string]string{tc.strategy + ".txt": tc.strategy + "\n"})
			if tc.moveTarget {
				w.branch("main", "main", map[string]string{"moved-" + tc.strategy + ".txt": "moved\n"})
			}
			pr := w.openPR(tc.strategy, "main", "PR "+tc.strategy)
			oldMain := w.server("rev-parse", "refs/heads/main")
			var merged prJSON
			w.must(200, w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version),
				map[string]any{"strategyId": tc.strategy}, &merged)
			newMain := w.server("rev-parse", "refs/heads/main")
			if merged.Properties.MergeCommit.ID != newMain {
				t.Fatalf("merge commit %s, main at %s", merged.Properties.MergeCommit.ID, newMain)
			}
			tc.check(t, oldMain, tip, newMain)
			w.git("fetch", "-q", "origin", "main")
			w.git("checkout", "-q", "-B", "main", "origin/main")
		})
	}
	t.Run("ff-only refused when the target moved", func(t *testing.T) {
		w.branch("late", "main", map[string]string{"late.txt": "late\n"})
		w.branch("main", "main", map[string]string{"other.txt": "other\n"})
		pr := w.openPR("late", "main", "late")
		var refusal struct {
			Errors []struct {
				Vetoes []struct {
					Summary string `json:"summaryMessage"`
				} `json:"vetoes"`
			} `json:"errors"`
		}
		if code := w.call(w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version),
			map[string]any{"strategyId": "ff-only"}, &refusal); code != 409 {
			t.Fatalf("status %d", code)
		}
		if len(refusal.Errors) != 1 || len(refusal.Errors[0].Vetoes) != 1 {
			t.Fatalf("refusal: %+v", refusal)
		}
	})
	t.Run("conflicts are listed", func(t *testing.T) {
		w.branch("clash", "main", map[string]string{"README": "theirs\n"})
		w.branch("main", "main", map[string]string{"README": "ours\n"})
		pr := w.openPR("clash", "main", "clash")
		var st struct {
			CanMerge   bool     `json:"canMerge"`
			Conflicted bool     `json:"conflicted"`
			Conflicts  []string `json:"conflicts"`
		}
		w.must(200, w.admin, "GET", fmt.Sprintf("%s/%d/merge", prs, pr.ID), nil, &st)
		if st.CanMerge || !st.Conflicted || len(st.Conflicts) != 1 || st.Conflicts[0] != "README" {
			t.Fatalf("can-merge: %+v", st)
		}
	})
}

func TestConcurrentMerges(t *testing.T) {
	w := newWorld(t)
	const n = 6
	var ids []prJSON
	tips := map[string]bool{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("c%d", i)
		tips[w.branch(name, "main", map[string]string{name + ".txt": name + "\n"})] = true
		ids = append(ids, w.openPR(name, "main", name))
	}
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i, pr := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = w.call(w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version), map[string]any{}, nil)
		}()
	}
	wg.Wait()
	merged := 0
	for i, c := range codes {
		switch c {
		case 200:
			merged++
		case 409:
			// A clean, retryable refusal: the pull request stays open.
			if w.pr(ids[i].ID).State != "OPEN" {
				t.Fatalf("refused merge %d left state %s", i, w.pr(ids[i].ID).State)
			}
		default:
			t.Fatalf("merge %d: status %d", i, c)
		}
	}
	// One node queues merges into one branch, so none should have run
	// out of retries.
	if merged != n {
		t.Fatalf("%d of %d concurrent merges succeeded", merged, n)
	}
	// Never a lost commit: every merged source is in main, and main has
	// one merge commit per success.
	for i, pr := range ids {
		if codes[i] != 200 {
			continue
		}
		if _, err := testbed.GitErr(w.bare, "merge-base", "--is-ancestor", pr.FromRef.LatestCommit, "refs/heads/main"); err != nil {
			t.Fatalf("merged source %d not in main", i)
		}
	}
	if got := w.server("rev-list", "--merges", "--count", "refs/heads/main"); got != fmt.Sprint(merged) {
		t.Fatalf("%s merge commits for %d merges", got, merged)
	}
}

func TestMergeChecks(t *testing.T) {
	w := newWorld(t)
	w.must(200, w.admin, "POST", "/rest/api/1.0/projects/PRJ/repos/app/settings/pull-requests", map[string]any{
		"checks": map[string]any{"minApprovals": 1, "noNeedsWork": true, "noOpenTasks": true, "minSuccessfulBuilds": 1}}, nil)
	tip := w.branch("checked", "main", map[string]string{"x.txt": "x\n"})
	pr := w.openPR("checked", "main", "checked")
	base := fmt.Sprintf("%s/%d", prs, pr.ID)
	w.must(200, w.bob, "PUT", base+"/participants/bob", map[string]string{"status": "NEEDS_WORK"}, nil)
	var task commentJSON
	w.must(201, w.bob, "POST", base+"/comments", map[string]any{"text": "fix this", "severity": "BLOCKER"}, &task)

	type mergeStatus struct {
		CanMerge bool `json:"canMerge"`
		Vetoes   []struct {
			Summary string `json:"summaryMessage"`
		} `json:"vetoes"`
	}
	var st mergeStatus
	w.must(200, w.admin, "GET", base+"/merge", nil, &st)
	if st.CanMerge || len(st.Vetoes) != 4 {
		t.Fatalf("expected four vetoes (approvals, needs work, tasks, builds): %+v", st)
	}
	if code := w.call(w.admin, "POST", base+"/merge?version=0", nil, nil); code != 409 {
		t.Fatalf("vetoed merge: %d", code)
	}

	w.must(204, w.admin, "POST", "/rest/build-status/1.0/commits/"+tip, map[string]string{"state": "SUCCESSFUL", "key": "ci", "url": "http://ci/1"}, nil)
	w.must(200, w.bob, "POST", base+"/approve", nil, nil)
	w.must(200, w.bob, "PUT", base+"/comments/"+fmt.Sprint(task.ID), map[string]any{"version": task.Version, "state": "RESOLVED"}, nil)
	w.must(200, w.admin, "GET", base+"/merge", nil, &st)
	if !st.CanMerge {
		t.Fatalf("all checks pass but: %+v", st)
	}
	w.must(200, w.admin, "POST", base+"/merge?version=0", map[string]any{"deleteSourceBranch": true}, nil)
	if _, err := testbed.GitErr(w.bare, "rev-parse", "--verify", "refs/heads/checked"); err == nil {
		t.Fatal("source branch not deleted")
	}
}

func TestBranchPermissions(t *testing.T) {
	w := newWorld(t)
	restrict := "/rest/branch-permissions/2.0/projects/PRJ/repos/app/restrictions"
	add := func(typ, matcherType, id string, users ...string) int64 {
		var r struct {
			ID int64 `json:"id"`
		}
		w.must(200, w.admin, "POST", restrict, map[string]any{"type": typ,
			"matcher": map[string]any{"id": id, "type": map[string]string{"id": matcherType}}, "users": users}, &r)
		return r.ID
	}
	pushErr := func(args ...string) string {
		_, err := testbed.GitErr(w.work, append([]string{"push", "-q", "origin"}, args...)...)
		if err == nil {
			return ""
		}
		return err.Error()
	}

	// pull-request-only on main: pushes refused, naming the rule and the
	// branch; a merge is fine.
	prOnly := add("pull-request-only", "BRANCH", "main")
	w.git("checkout", "-q", "main")
	w.write("direct.txt", "direct\n")
	w.commit("direct")
	if msg := pushErr("main"); !strings.Contains(msg, `branch "main" can only be changed by merging a pull request`) ||
		!strings.Contains(msg, fmt.Sprintf("branch permission #%d", prOnly)) {
		t.Fatalf("push to a pull-request-only branch: %q", msg)
	}
	w.git("reset", "-q", "--hard", "origin/main")
	w.branch("topic", "main", map[string]string{"topic.txt": "t\n"})
	pr := w.openPR("topic", "main", "topic")
	w.must(200, w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version), nil, nil)

	// fast-forward-only on a pattern: a rewrite is refused, a fast-forward
	// accepted; no-deletes refuses deletion.
	add("fast-forward-only", "PATTERN", "release/*")
	add("no-deletes", "PATTERN", "release/*")
	w.branch("release/1.0", "main", map[string]string{"r.txt": "1\n"})
	w.branch("release/1.0", "release/1.0", map[string]string{"r.txt": "2\n"})
	w.git("checkout", "-q", "-B", "release/1.0", "HEAD~1")
	w.write("r.txt", "rewritten\n")
	w.commit("rewrite")
	if msg := pushErr("+release/1.0"); !strings.Contains(msg, "only accepts fast-forward") {
		t.Fatalf("force push: %q", msg)
	}
	if msg := pushErr(":release/1.0"); !strings.Contains(msg, "cannot be deleted") {
		t.Fatalf("delete: %q", msg)
	}

	// read-only with an exemption: admin may push, bob's merge is vetoed.
	add("read-only", "BRANCH", "frozen", "admin")
	w.branch("frozen", "main", map[string]string{"f.txt": "f\n"})
	w.branch("thaw", "frozen", map[string]string{"thaw.txt": "t\n"})
	pr = w.openPR("thaw", "frozen", "thaw")
	w.n.Grant(t, w.repo, w.bobID, store.PermRepoWrite)
	var refusal struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if code := w.call(w.bob, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version), nil, &refusal); code != 409 ||
		len(refusal.Errors) != 1 || !strings.Contains(refusal.Errors[0].Message, `branch "frozen" is read-only`) {
		t.Fatalf("merge into a read-only branch: %d %+v", code, refusal)
	}
}

func TestNoReadAccessSeesNothing(t *testing.T) {
	w := newWorld(t)
	w.branch("secret", "main", map[string]string{"s.txt": "s\n"})
	pr := w.openPR("secret", "main", "secret")
	base := fmt.Sprintf("%s/%d", prs, pr.ID)
	for _, c := range []struct{ method, path string }{
		{"GET", prs}, {"POST", prs}, {"GET", base}, {"PUT", base}, {"GET", base + "/changes"}, {"GET", base + "/diff"},
		{"GET", base + "/diff/s.txt"}, {"GET", base + "/merge"}, {"POST", base + "/merge?version=0"}, {"POST", base + "/approve"},
		{"DELETE", base + "/approve"}, {"PUT", base + "/participants/eve"}, {"GET", base + "/participants"},
		{"POST", base + "/decline?version=0"}, {"POST", base + "/reopen?version=0"}, {"GET", base + "/comments"},
		{"POST", base + "/comments"}, {"GET", base + "/comments/1"}, {"PUT", base + "/comments/1"}, {"DELETE", base + "/comments/1?version=0"},
		{"GET", base + "/tasks"}, {"GET", base + "/activities"},
		{"GET", "/rest/api/1.0/projects/PRJ/repos/app/settings/pull-requests"},
		{"GET", "/rest/branch-permissions/2.0/projects/PRJ/repos/app/restrictions"},
		{"GET", "/rest/api/1.0/projects/PRJ/repos/app/webhooks"},
	} {
		if code := w.call(w.eve, c.method, c.path, map[string]any{"text": "x", "version": 0, "status": "APPROVED"}, nil); code != 404 {
			t.Errorf("%s %s as a user without access: %d, want 404", c.method, c.path, code)
		}
	}
}

// TestRescopeOnlyForPullRequests: a push to a branch no open pull request
// touches queues no rescope job; a push to a pull request's branch does,
// and the pull request follows it.
func TestRescopeOnlyForPullRequests(t *testing.T) {
	w := newWorld(t)
	rescopes := func() float64 {
		t.Helper()
		mfs, err := w.n.App.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "sluice_jobs_enqueued_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && l.GetValue() == "pull-rescope" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	before := rescopes()
	w.branch("lonely", "main", map[string]string{"code.txt": lines(1, 11)})
	w.branch("main", "main", map[string]string{"README": "moved\n"})
	if got := rescopes(); got != before {
		t.Fatalf("pushes touching no pull request queued %v rescope jobs", got-before)
	}

	w.branch("feat", "main", map[string]string{"code.txt": lines(1, 12)})
	pr := w.openPR("feat", "main", "Feature")
	before = rescopes()
	tip := w.branch("feat", "feat", map[string]string{"code.txt": lines(1, 13)})
	if got := rescopes(); got != before+1 {
		t.Fatalf("a push to the pull request's source queued %v rescope jobs, want 1", got-before)
	}
	wait.For(t, "the pull request follows its source", 45*time.Second, func() bool { return w.pr(pr.ID).FromRef.LatestCommit == tip })
}

// A source branch that moved without its move being announced (a node
// died between git's rename and the record) leaves the pull request
// behind. A merge then rescopes it instead of refusing for ever: the
// refusal says so, and after a reload the merge goes through.
func TestMergeRescopesWhenSourceMovedUnannounced(t *testing.T) {
	w := newWorld(t)
	w.branch("quiet", "main", map[string]string{"quiet.txt": "one\n"})
	pr := w.openPR("quiet", "main", "quiet")
	// A commit on top of the branch, moved into place behind the hooks'
	// back: the server's bare repository, without the server's git config.
	w.write("quiet.txt", "two\n")
	moved := w.commit("unannounced")
	w.git("push", "-q", "-f", "origin", "HEAD:refs/heads/scratch")
	w.server("update-ref", "refs/heads/quiet", moved)

	var refusal struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if code := w.call(w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, pr.Version),
		map[string]any{}, &refusal); code != 409 {
		t.Fatalf("merge of a stale pull request: status %d", code)
	}
	if len(refusal.Errors) != 1 || !strings.Contains(refusal.Errors[0].Message, "it shows them now") {
		t.Fatalf("refusal: %+v", refusal)
	}
	got := w.pr(pr.ID)
	if got.FromRef.LatestCommit != moved {
		t.Fatalf("after the refused merge the pull request shows %s, want %s", got.FromRef.LatestCommit, moved)
	}
	var merged prJSON
	w.must(200, w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, got.Version), map[string]any{}, &merged)
	if merged.State != "MERGED" {
		t.Fatalf("state %s after merge", merged.State)
	}
}
