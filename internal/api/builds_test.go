package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// buildWorld is a whole node (pull requests need the app's jobs and
// hooks) with two private repositories that share history: "open" that
// alice may read, "secret" that she may not. eve may read neither.
type buildWorld struct {
	t       *testing.T
	n       *testbed.Node
	admin   string // "user:secret"
	alice   string
	eve     string
	work    string
	open    *store.Repository
	secret  *store.Repository
	shared  string // a commit on a branch of both repositories
	private string // a commit on a branch of "secret" only
}

const (
	openRepo   = "/rest/api/1.0/projects/PRJ/repos/open"
	secretRepo = "/rest/api/1.0/projects/PRJ/repos/secret"
)

func newBuildWorld(t *testing.T) *buildWorld {
	t.Helper()
	n := testbed.NewNode(t, testbed.NodeOptions{})
	w := &buildWorld{t: t, n: n, admin: "admin:" + n.AdminPassword}
	w.open = n.CreateRepo(t, "PRJ", "open")
	w.secret = n.CreateRepo(t, "PRJ", "secret")
	alice := n.CreateUser(t, "alice", "alice-password-123")
	n.Grant(t, w.open, alice.ID, store.PermRepoRead)
	w.alice = "alice:" + n.Token(t, alice.ID, store.ScopeWrite)
	eve := n.CreateUser(t, "eve", "eve-password-123")
	w.eve = "eve:" + n.Token(t, eve.ID, store.ScopeWrite)

	w.work = t.TempDir()
	w.git("init", "-q", "-b", "main")
	w.commit("README", "hello\n")
	w.git("checkout", "-q", "-b", "feature")
	w.shared = w.commit("feature.txt", "the same change in both repositories\n")
	w.git("checkout", "-q", "-b", "hidden", "main")
	w.private = w.commit("hidden.txt", "only in the secret repository\n")
	for _, slug := range []string{"open", "secret"} {
		w.git("push", "-q", n.CloneURL("PRJ", slug, "admin", n.AdminPassword), "main", "feature")
	}
	w.git("push", "-q", n.CloneURL("PRJ", "secret", "admin", n.AdminPassword), "hidden")
	return w
}

func (w *buildWorld) git(args ...string) string {
	w.t.Helper()
	return strings.TrimSpace(testbed.Git(w.t, w.work, args...))
}

func (w *buildWorld) commit(name, content string) string {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.work, name), []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.git("add", "-A")
	w.git("commit", "-q", "-m", "add "+name)
	return w.git("rev-parse", "HEAD")
}

// call makes a REST call as cred and returns the status and the body.
func (w *buildWorld) call(cred, method, path string, body any) (int, []byte) {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			w.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.n.URL+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	if cred != "" {
		user, secret, _ := strings.Cut(cred, ":")
		req.SetBasicAuth(user, secret)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return res.StatusCode, data
}

func (w *buildWorld) must(want int, cred, method, path string, body, out any) {
	w.t.Helper()
	got, data := w.call(cred, method, path, body)
	if got != want {
		w.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			w.t.Fatalf("%s %s: %s: %v", method, path, data, err)
		}
	}
}

type buildPage struct {
	Size   int `json:"size"`
	Values []struct {
		Key         string `json:"key"`
		State       string `json:"state"`
		Name        string `json:"name"`
		URL         string `json:"url"`
		Ref         string `json:"ref"`
		Duration    int64  `json:"duration"`
		TestResults *struct {
			Successful, Failed, Skipped int64
		} `json:"testResults"`
	} `json:"values"`
}

// keys lists the keys of a build listing, in order.
func (w *buildWorld) keys(cred, path string) string {
	w.t.Helper()
	var p buildPage
	w.must(200, cred, "GET", path, nil, &p)
	var ks []string
	for _, v := range p.Values {
		ks = append(ks, v.Key+"="+v.State)
	}
	return strings.Join(ks, ",")
}

func (w *buildWorld) stats(cred, sha string) map[string]int {
	w.t.Helper()
	var s map[string]int
	w.must(200, cred, "GET", "/rest/build-status/1.0/commits/stats/"+sha, nil, &s)
	return s
}

// requireBuild opens a pull request feature → main in repoPath, which
// requires one successful build, and returns its merge endpoint.
func (w *buildWorld) requireBuild(repoPath string) string {
	w.t.Helper()
	w.must(200, w.admin, "POST", repoPath+"/settings/pull-requests", map[string]any{"checks": map[string]any{"minSuccessfulBuilds": 1}}, nil)
	var pr struct {
		ID int64 `json:"id"`
	}
	w.must(201, w.admin, "POST", repoPath+"/pull-requests", map[string]any{"title": "feature",
		"fromRef": map[string]any{"id": "refs/heads/feature"}, "toRef": map[string]any{"id": "refs/heads/main"}}, &pr)
	return fmt.Sprintf("%s/pull-requests/%d/merge", repoPath, pr.ID)
}

// buildVeto is the Builds veto of a pull request, "" when none.
func (w *buildWorld) buildVeto(merge string) string {
	w.t.Helper()
	var st struct {
		Vetoes []struct {
			Summary  string `json:"summaryMessage"`
			Detailed string `json:"detailedMessage"`
		} `json:"vetoes"`
	}
	w.must(200, w.admin, "GET", merge, nil, &st)
	for _, v := range st.Vetoes {
		if v.Summary == "Builds" {
			return v.Detailed
		}
	}
	return ""
}

func success(key, name string) map[string]any {
	return map[string]any{"state": "SUCCESSFUL", "key": key, "name": name, "url": "https://ci.example.com/" + key}
}

// TestBuildStatusScopedToRepositories is the regression test of security
// issue 14, item 3: build statuses are read and counted per repository.
func TestBuildStatusScopedToRepositories(t *testing.T) {
	w := newBuildWorld(t)
	openMerge, secretMerge := w.requireBuild(openRepo), w.requireBuild(secretRepo)
	global := "/rest/build-status/1.0/commits/"

	// Someone who reads neither repository can post nowhere, and is told
	// nothing: 404 on both routes, as for a commit that exists nowhere.
	missing := strings.Repeat("0", 40)
	for _, path := range []string{global + w.shared, global + w.private, global + missing,
		secretRepo + "/commits/" + w.shared + "/builds", openRepo + "/commits/" + w.shared + "/builds"} {
		if code, body := w.call(w.eve, "POST", path, success("eve", "forged")); code != 404 {
			t.Fatalf("eve POST %s: %d %s", path, code, body)
		}
		if strings.Contains(path, "/builds") {
			if code, body := w.call(w.eve, "GET", path, nil); code != 404 {
				t.Fatalf("eve GET %s: %d %s", path, code, body)
			}
		}
	}

	// alice reads "open" only: her global report attaches there, so it
	// counts for open's pull request and not for secret's, though both
	// have the commit.
	w.must(204, w.alice, "POST", global+w.shared, success("alice-ci", "alice build"), nil)
	if v := w.buildVeto(openMerge); v != "" {
		t.Fatalf("open's pull request still vetoed by builds: %s", v)
	}
	if v := w.buildVeto(secretMerge); v == "" {
		t.Fatal("a status reported by a reader of another repository satisfied secret's build check")
	}
	// Neither route lets her attach to secret, even with the commit in
	// hand, nor to open a commit only secret has.
	w.must(404, w.alice, "POST", secretRepo+"/commits/"+w.shared+"/builds", success("alice-ci", "x"), nil)
	w.must(404, w.alice, "POST", global+w.private, success("alice-ci", "x"), nil)
	w.must(404, w.alice, "POST", openRepo+"/commits/"+w.private+"/builds", success("alice-ci", "x"), nil)
	if v := w.buildVeto(secretMerge); v == "" {
		t.Fatal("secret's build check satisfied")
	}

	// secret's own CI, under the same key: it replaces nothing of open's,
	// and alice never sees it.
	w.must(204, w.admin, "POST", secretRepo+"/commits/"+w.shared+"/builds", map[string]any{"state": "FAILED", "key": "alice-ci",
		"name": "secret nightly", "url": "https://ci.internal/secret", "ref": "refs/heads/feature", "duration": 1234,
		"testResults": map[string]int{"successful": 5, "failed": 1, "skipped": 0}}, nil)
	w.must(204, w.admin, "POST", secretRepo+"/commits/"+w.shared+"/builds", success("secret-ci", "secret build"), nil)
	if got := w.keys(w.alice, global+w.shared); got != "alice-ci=SUCCESSFUL" {
		t.Fatalf("alice's global listing: %s", got)
	}
	if got := w.keys(w.alice, "/rest/build-status/latest/commits/"+w.shared); got != "alice-ci=SUCCESSFUL" {
		t.Fatalf("alice's global listing (latest): %s", got)
	}
	if got := w.stats(w.alice, w.shared); got["successful"] != 1 || got["failed"] != 0 {
		t.Fatalf("alice's stats: %v", got)
	}
	if got := w.keys(w.eve, global+w.shared); got != "" {
		t.Fatalf("eve's global listing: %s", got)
	}
	if got := w.stats(w.eve, w.shared); got["successful"]+got["failed"]+got["inProgress"]+got["cancelled"]+got["unknown"] != 0 {
		t.Fatalf("eve's stats: %v", got)
	}
	if got := w.keys(w.alice, openRepo+"/commits/"+w.shared+"/builds"); got != "alice-ci=SUCCESSFUL" {
		t.Fatalf("alice's open listing: %s", got)
	}
	w.must(404, w.alice, "GET", secretRepo+"/commits/"+w.shared+"/builds", nil, nil)

	// A reader of both sees one status per key, the newest.
	if got := w.keys(w.admin, global+w.shared); got != "secret-ci=SUCCESSFUL,alice-ci=FAILED" {
		t.Fatalf("admin's global listing: %s", got)
	}
	if got := w.stats(w.admin, w.shared); got["successful"] != 1 || got["failed"] != 1 {
		t.Fatalf("admin's stats: %v", got)
	}
	var one struct {
		State       string `json:"state"`
		Name        string `json:"name"`
		Ref         string `json:"ref"`
		Duration    int64  `json:"duration"`
		TestResults struct {
			Successful, Failed int64
		} `json:"testResults"`
	}
	w.must(200, w.admin, "GET", secretRepo+"/commits/"+w.shared+"/builds?key=alice-ci", nil, &one)
	if one.State != "FAILED" || one.Name != "secret nightly" || one.Ref != "refs/heads/feature" || one.Duration != 1234 ||
		one.TestResults.Successful != 5 || one.TestResults.Failed != 1 {
		t.Fatalf("secret's alice-ci status: %+v", one)
	}
	w.must(404, w.admin, "GET", secretRepo+"/commits/"+w.shared+"/builds?key=nothing", nil, nil)

	// secret's failed build vetoes its pull request; open's is unmoved.
	if v := w.buildVeto(secretMerge); !strings.Contains(v, "1 successful, 1 not") {
		t.Fatalf("secret's veto: %q", v)
	}
	if v := w.buildVeto(openMerge); v != "" {
		t.Fatalf("open's pull request vetoed by secret's build: %s", v)
	}
}

// TestBuildStatusValidation: malformed reports are refused before any
// repository is looked at.
func TestBuildStatusValidation(t *testing.T) {
	w := newBuildWorld(t)
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/rest/build-status/1.0/commits/" + w.shared, map[string]any{"state": "GREEN", "key": "k"}},
		{"/rest/build-status/1.0/commits/" + w.shared, map[string]any{"state": "SUCCESSFUL"}},
		{"/rest/build-status/1.0/commits/nothex", success("k", "n")},
		{openRepo + "/commits/" + w.shared + "/builds", map[string]any{"state": "SUCCESSFUL", "key": "k", "duration": -1}},
		{openRepo + "/commits/" + w.shared + "/builds", map[string]any{"state": "SUCCESSFUL", "key": "k",
			"testResults": map[string]int{"failed": -2}}},
	} {
		if code, body := w.call(w.alice, "POST", tc.path, tc.body); code != 400 {
			t.Fatalf("POST %s %v: %d %s", tc.path, tc.body, code, body)
		}
	}
	if code, _ := w.call("", "POST", "/rest/build-status/1.0/commits/"+w.shared, success("k", "n")); code != 401 {
		t.Fatalf("anonymous report: %d", code)
	}
	for _, state := range []string{"INPROGRESS", "CANCELLED", "UNKNOWN"} {
		w.must(204, w.alice, "POST", openRepo+"/commits/"+w.shared+"/builds", map[string]any{"state": state, "key": state}, nil)
	}
	if got := w.stats(w.alice, w.shared); got["inProgress"] != 1 || got["cancelled"] != 1 || got["unknown"] != 1 {
		t.Fatalf("stats: %v", got)
	}
}

// TestBuildStatusForkPullRequest: a pull request from a fork keeps its
// source commit under the target's refs/pull-requests/N/from only; the
// target's CI reports on it there and it counts.
func TestBuildStatusForkPullRequest(t *testing.T) {
	w := newBuildWorld(t)
	w.n.CreateProject(t, "FORK")
	w.must(201, w.admin, "POST", secretRepo, map[string]any{"name": "secret-fork", "project": map[string]string{"key": "FORK"}}, nil)
	w.git("checkout", "-q", "-b", "from-fork", "main")
	tip := w.commit("fork.txt", "from the fork\n")
	w.git("push", "-q", w.n.CloneURL("FORK", "secret-fork", "admin", w.n.AdminPassword), "from-fork")

	report := secretRepo + "/commits/" + tip + "/builds"
	w.must(404, w.admin, "POST", report, success("ci", "before the pull request"), nil)

	w.must(200, w.admin, "POST", secretRepo+"/settings/pull-requests", map[string]any{"checks": map[string]any{"minSuccessfulBuilds": 1}}, nil)
	var pr struct {
		ID int64 `json:"id"`
	}
	w.must(201, w.admin, "POST", secretRepo+"/pull-requests", map[string]any{"title": "from the fork",
		"fromRef": map[string]any{"id": "refs/heads/from-fork", "repository": map[string]any{"slug": "secret-fork", "project": map[string]string{"key": "FORK"}}},
		"toRef":   map[string]any{"id": "refs/heads/main"}}, &pr)
	merge := fmt.Sprintf("%s/pull-requests/%d/merge", secretRepo, pr.ID)
	if v := w.buildVeto(merge); v == "" {
		t.Fatal("no build veto before any report")
	}
	w.must(204, w.admin, "POST", report, success("ci", "fork build"), nil)
	if v := w.buildVeto(merge); v != "" {
		t.Fatalf("still vetoed: %s", v)
	}
}
