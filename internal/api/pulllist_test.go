package api_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// pullListWorld: PRJ/app with pull requests
//
//	#1 alice: f1 → main, "Fix login", reviewer bob (who approves)
//	#2 admin: f2 → main, "Add feature", description mentioning LOGIN
//	#3 alice: f3 → develop, "Tidy up"
//
// and FORK/app, a fork with #1 of its own origin: f4 → PRJ/app main.
type pullListWorld struct {
	*buildWorld
	bob string
}

const appRepo = "/rest/api/1.0/projects/PRJ/repos/app"

func newPullListWorld(t *testing.T) *pullListWorld {
	t.Helper()
	n := testbed.NewNode(t, testbed.NodeOptions{})
	w := &pullListWorld{buildWorld: &buildWorld{t: t, n: n, admin: "admin:" + n.AdminPassword, work: t.TempDir()}}
	app := n.CreateRepo(t, "PRJ", "app")
	alice := n.CreateUser(t, "alice", "alice-password-123")
	bob := n.CreateUser(t, "bob", "bob-password-123")
	n.Grant(t, app, alice.ID, store.PermRepoWrite)
	n.Grant(t, app, bob.ID, store.PermRepoRead)
	w.alice = "alice:" + n.Token(t, alice.ID, store.ScopeWrite)
	w.bob = "bob:" + n.Token(t, bob.ID, store.ScopeWrite)

	w.git("init", "-q", "-b", "main")
	w.commit("README", "hello\n")
	w.git("branch", "develop")
	for _, b := range []string{"f1", "f2", "f3", "f4"} {
		w.git("checkout", "-q", "-b", b, "main")
		w.commit(b+".txt", b+"\n")
	}
	w.git("push", "-q", n.CloneURL("PRJ", "app", "admin", n.AdminPassword), "main", "develop", "f1", "f2", "f3")

	w.open(w.alice, appRepo, "Fix login", "", "f1", "main", "bob")
	w.open(w.admin, appRepo, "Add feature", "Touches the LOGIN page.", "f2", "main")
	w.open(w.alice, appRepo, "Tidy up", "", "f3", "develop")
	w.must(200, w.bob, "POST", appRepo+"/pull-requests/1/approve", nil, nil)

	// A fork, and a pull request from it into its origin.
	w.must(201, w.admin, "POST", "/rest/api/1.0/projects", map[string]any{"key": "FORK", "name": "forks"}, nil)
	w.must(201, w.admin, "POST", appRepo, map[string]any{"name": "app", "project": map[string]any{"key": "FORK"}}, nil)
	w.git("push", "-q", n.CloneURL("FORK", "app", "admin", n.AdminPassword), "f4")
	w.must(201, w.admin, "POST", appRepo+"/pull-requests", map[string]any{"title": "From the fork",
		"fromRef": map[string]any{"id": "refs/heads/f4", "repository": map[string]any{"slug": "app", "project": map[string]any{"key": "FORK"}}},
		"toRef":   map[string]any{"id": "refs/heads/main"}}, nil)
	return w
}

func (w *pullListWorld) open(cred, repoPath, title, desc, from, to string, reviewers ...string) {
	w.t.Helper()
	var rv []map[string]any
	for _, r := range reviewers {
		rv = append(rv, map[string]any{"user": map[string]any{"name": r}})
	}
	w.must(201, cred, "POST", repoPath+"/pull-requests", map[string]any{"title": title, "description": desc,
		"fromRef": map[string]any{"id": "refs/heads/" + from}, "toRef": map[string]any{"id": "refs/heads/" + to}, "reviewers": rv}, nil)
}

type pullList struct {
	Size   int `json:"size"`
	Values []struct {
		ID      int64  `json:"id"`
		Title   string `json:"title"`
		Version int64  `json:"version"`
		State   string `json:"state"`
		ToRef   struct {
			Repository struct {
				Project struct{ Key string } `json:"project"`
			} `json:"repository"`
		} `json:"toRef"`
	} `json:"values"`
}

// titles lists the titles query answers, in order.
func (w *pullListWorld) titles(cred, repoPath, query string) string {
	w.t.Helper()
	var l pullList
	w.must(200, cred, "GET", repoPath+"/pull-requests?"+query, nil, &l)
	var out []string
	for _, v := range l.Values {
		out = append(out, v.Title)
	}
	return strings.Join(out, ", ")
}

func TestPullRequestListFilters(t *testing.T) {
	w := newPullListWorld(t)
	for _, c := range []struct{ query, want string }{
		{"", "From the fork, Tidy up, Add feature, Fix login"},
		{"order=OLDEST", "Fix login, Add feature, Tidy up, From the fork"},
		{"order=newest&avatarSize=48&withAttributes=false", "From the fork, Tidy up, Add feature, Fix login"},
		// What Renovate sends to find its own pull requests.
		{"state=ALL&role.1=AUTHOR&username.1=alice&limit=100", "Tidy up, Fix login"},
		{"role.1=author&username.1=admin", "From the fork, Add feature"},
		{"username.1=bob", "Fix login"},
		{"role.1=REVIEWER&username.1=bob&approved.1=true", "Fix login"},
		{"role.1=REVIEWER&username.1=bob&approved.1=false", ""},
		{"role.1=PARTICIPANT&username.1=bob", ""},
		// Every numbered user must match.
		{"role.1=AUTHOR&username.1=alice&role.2=REVIEWER&username.2=bob", "Fix login"},
		{"role.1=AUTHOR&username.1=admin&role.2=REVIEWER&username.2=bob", ""},
		{"username.1=nobody-of-that-name", ""},
		{"at=refs/heads/develop", "Tidy up"},
		{"at=main&order=OLDEST", "Fix login, Add feature, From the fork"},
		{"direction=INCOMING&at=refs/heads/f1", ""},
		{"direction=OUTGOING&at=refs/heads/f1", "Fix login"},
		{"filterText=LOGIN", "Add feature, Fix login"},
		{"filterText=tidy&state=OPEN", "Tidy up"},
		{"state=MERGED", ""},
		{"limit=1&start=1&filterText=login", "Fix login"},
	} {
		if got := w.titles(w.admin, appRepo, c.query); got != c.want {
			t.Errorf("?%s: %q, want %q", c.query, got, c.want)
		}
	}

	// OUTGOING from the fork lists its pull request into the origin,
	// with the origin as the target; INCOMING into the fork has none.
	const forkRepo = "/rest/api/1.0/projects/FORK/repos/app"
	if got := w.titles(w.admin, forkRepo, "direction=OUTGOING"); got != "From the fork" {
		t.Fatalf("outgoing from the fork: %q", got)
	}
	var l pullList
	w.must(200, w.admin, "GET", forkRepo+"/pull-requests?direction=outgoing", nil, &l)
	if l.Size != 1 || l.Values[0].ToRef.Repository.Project.Key != "PRJ" {
		t.Fatalf("outgoing from the fork: %+v", l)
	}
	if got := w.titles(w.admin, forkRepo, ""); got != "" {
		t.Fatalf("incoming into the fork: %q", got)
	}
	// Bob may read the origin but not the fork: OUTGOING from a
	// repository he cannot read is hidden like the repository.
	w.must(404, w.bob, "GET", forkRepo+"/pull-requests?direction=OUTGOING", nil, nil)

	for _, c := range []struct{ query, names string }{
		{"state=CLOSED", "state"},
		{"order=RANDOM", "order"},
		{"direction=SIDEWAYS", "direction"},
		{"at=refs/heads/-x", "at"},
		{"role.1=BOSS&username.1=alice", "role.1"},
		{"role.3=AUTHOR", "username.3"},
		{"approved.1=maybe&username.1=bob", "approved.1"},
		{"filterText=" + strings.Repeat("x", 256), "filterText"},
	} {
		code, body := w.call(w.admin, "GET", appRepo+"/pull-requests?"+c.query, nil)
		if code != 400 || !strings.Contains(string(body), c.names) {
			t.Errorf("?%.60s: %d %s, want 400 naming %s", c.query, code, body, c.names)
		}
	}
}

// TestLenientPullRequestBodies: version in the JSON body of merge,
// decline and reopen, and strings holding numbers and booleans, as
// Bitbucket's Jackson reads them.
func TestLenientPullRequestBodies(t *testing.T) {
	w := newPullListWorld(t)
	version := func(id int) int64 {
		var pr struct {
			Version int64 `json:"version"`
			State   string
		}
		w.must(200, w.admin, "GET", fmt.Sprintf("%s/pull-requests/%d", appRepo, id), nil, &pr)
		return pr.Version
	}
	pr := func(id int, action string) string { return fmt.Sprintf("%s/pull-requests/%d/%s", appRepo, id, action) }

	// A stale version in the body is refused like one in the query.
	v := version(2)
	w.must(409, w.admin, "POST", pr(2, "decline"), map[string]any{"version": v + 1}, nil)
	// The version as a JSON string, no query.
	var got struct{ State string }
	w.must(200, w.admin, "POST", pr(2, "decline"), map[string]any{"version": fmt.Sprint(v)}, &got)
	if got.State != "DECLINED" {
		t.Fatalf("declined: %+v", got)
	}
	w.must(200, w.admin, "POST", pr(2, "reopen"), map[string]any{"version": version(2)}, &got)
	if got.State != "OPEN" {
		t.Fatalf("reopened: %+v", got)
	}
	// The query still works, and nothing at all is still a 400.
	w.must(200, w.admin, "POST", pr(2, "decline")+"?version="+fmt.Sprint(version(2)), nil, &got)
	if code, body := w.call(w.admin, "POST", pr(2, "reopen"), nil); code != 400 || !strings.Contains(string(body), "version") {
		t.Fatalf("reopen without a version: %d %s", code, body)
	}
	// A string that is no number is still the wrong type, named.
	if code, body := w.call(w.admin, "POST", pr(2, "reopen"), map[string]any{"version": "two"}); code != 400 || !strings.Contains(string(body), "version") {
		t.Fatalf("version \"two\": %d %s", code, body)
	}

	// Merge with version and deleteSourceBranch as strings.
	w.must(200, w.admin, "POST", pr(3, "merge"), map[string]any{"version": fmt.Sprint(version(3)), "deleteSourceBranch": "true"}, &got)
	if got.State != "MERGED" {
		t.Fatalf("merged: %+v", got)
	}
	if code, _ := w.call(w.admin, "GET", appRepo+"/branches/default", nil); code != 200 {
		t.Fatalf("default branch after the merge: %d", code)
	}
	var branches struct {
		Values []struct{ DisplayID string } `json:"values"`
	}
	w.must(200, w.admin, "GET", appRepo+"/branches", nil, &branches)
	if slices.ContainsFunc(branches.Values, func(b struct{ DisplayID string }) bool { return b.DisplayID == "f3" }) {
		t.Fatalf("deleteSourceBranch \"true\" left f3: %+v", branches)
	}
}

func TestCapabilitiesWithPullRequests(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{})
	w := &buildWorld{t: t, n: n}
	var caps struct {
		Application  string            `json:"application"`
		Capabilities map[string]string `json:"capabilities"`
	}
	w.must(200, "", "GET", "/rest/capabilities", nil, &caps)
	if caps.Application != "stash" || len(caps.Capabilities) != 2 {
		t.Fatalf("capabilities %+v", caps)
	}
	// Each capability is a URL on this server that a client follows.
	path := func(u string) string {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			t.Fatalf("capability URL %q", u)
		}
		return p.Path
	}
	var hooks struct {
		Events []string `json:"application-webhooks"`
	}
	w.must(200, "", "GET", path(caps.Capabilities["webhooks"]), nil, &hooks)
	// Exactly the events a webhook may subscribe to, no more.
	want := slices.Sorted(slices.Values(pull.WebhookEvents))
	if !slices.Equal(hooks.Events, want) || !slices.Contains(hooks.Events, "pr:deleted") {
		t.Fatalf("webhook events %v, want %v", hooks.Events, want)
	}
	var build struct {
		BuildStatus []string `json:"buildStatus"`
	}
	w.must(200, "", "GET", path(caps.Capabilities["build"]), nil, &build)
	if !slices.Contains(build.BuildStatus, "richBuildStatus") || !slices.Contains(build.BuildStatus, "cancelledStatus") {
		t.Fatalf("build capabilities %v", build.BuildStatus)
	}
}
