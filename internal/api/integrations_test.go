package api_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// The paths integrations (Renovate, Jenkins, generated OpenAPI clients)
// call first, and the spellings of paths Bitbucket accepts.

func TestLatestAliasAndTrailingSlash(t *testing.T) {
	t.Parallel()
	e, _, work := contentEnv(t)
	head := e.git(work, "rev-parse", "HEAD")

	// Every numbered family answers under latest as well, with the same
	// body and the same authorization.
	for _, c := range []struct{ path, auth string }{
		{"/rest/api/%s/projects/PRJ/repos/repo", e.admin},
		{"/rest/api/%s/projects/PRJ/repos/repo/branches", e.admin},
		{"/rest/access-tokens/%s/users/alice", e.alice},
		{"/rest/ssh/%s/keys", e.alice},
	} {
		one := e.must(200, "GET", strings.Replace(c.path, "%s", "1.0", 1), c.auth, nil)
		latest := e.must(200, "GET", strings.Replace(c.path, "%s", "latest", 1), c.auth, nil)
		if string(one.body) != string(latest.body) {
			t.Fatalf("%s: latest answered %s, 1.0 %s", c.path, latest.body, one.body)
		}
	}
	// A private repository stays hidden under latest too.
	e.must(404, "GET", "/rest/api/latest/projects/PRJ/repos/repo", e.bob, nil)
	e.must(401, "GET", "/rest/api/latest/projects/PRJ/repos/repo", "", nil)
	// Writes too: branch-utils under latest creates a branch.
	var b refJSON
	e.must(200, "POST", "/rest/branch-utils/latest/projects/PRJ/repos/repo/branches", e.admin,
		map[string]string{"name": "via-latest", "startPoint": head}).json(t, &b)
	if b.ID != "refs/heads/via-latest" {
		t.Fatalf("branch created through latest: %+v", b)
	}
	// A family that is not numbered has no latest twin, and an unknown
	// version is no alias.
	e.must(404, "GET", "/rest/capabilities/latest", e.admin, nil)
	e.must(404, "GET", "/rest/api/2.0/projects/PRJ/repos/repo", e.admin, nil)

	// Trailing slashes are accepted, on GET and on writes.
	var r repoJSON
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/repo/", e.admin, nil).json(t, &r)
	if r.Slug != "repo" {
		t.Fatalf("repository through a trailing slash: %+v", r)
	}
	e.must(200, "GET", "/rest/api/latest/projects/PRJ/repos/repo/branches/", e.admin, nil)
	e.must(204, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches/", e.admin, map[string]string{"name": "via-latest"})
	var dir struct {
		Children struct {
			Values []struct {
				Path struct{ Name string } `json:"path"`
			} `json:"values"`
		} `json:"children"`
	}
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/repo/browse/dir/", e.admin, nil).json(t, &dir)
	if len(dir.Children.Values) != 1 || dir.Children.Values[0].Path.Name != "sub.txt" {
		t.Fatalf("browse dir/: %s", dir)
	}
	// The method check still applies after the slash is gone.
	if got := e.do("PATCH", "/rest/api/1.0/projects/PRJ/repos/repo/", e.admin, nil); got.status != 405 {
		t.Fatalf("PATCH with a trailing slash: %d %s", got.status, got.body)
	}
}

func TestOpenAPIListsEachRouteOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var doc struct {
		Info struct {
			Description string `json:"description"`
		} `json:"info"`
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	e.must(200, "GET", "/rest/api/latest/openapi.json", "", nil).json(t, &doc)
	for p := range doc.Paths {
		if strings.Contains(p, "/latest/") {
			t.Fatalf("OpenAPI lists the alias %s", p)
		}
	}
	for _, p := range []string{
		"/rest/api/1.0/application-properties", "/rest/capabilities",
		"/rest/api/1.0/projects/{key}/repos/{slug}/branches/default",
	} {
		if doc.Paths[p] == nil {
			t.Fatalf("OpenAPI lacks %s", p)
		}
	}
	if !strings.Contains(doc.Info.Description, "latest") {
		t.Fatalf("the description does not say latest works: %q", doc.Info.Description)
	}
}

func TestApplicationPropertiesAndCapabilities(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var props struct {
		Version, BuildNumber, BuildDate, DisplayName string
	}
	// Public: clients read it before they sign in.
	e.must(200, "GET", "/rest/api/1.0/application-properties", "", nil).json(t, &props)
	if props.Version != "8.19.0" || props.BuildNumber != "8019000" || props.DisplayName != "Bitbucket" || props.BuildDate == "" {
		t.Fatalf("application-properties %+v", props)
	}
	e.must(200, "GET", "/rest/api/latest/application-properties", e.alice, nil)

	// Without pull requests (this env has none) the server claims no
	// capability at all, but still says it is Bitbucket.
	var caps struct {
		Application  string            `json:"application"`
		Capabilities map[string]string `json:"capabilities"`
	}
	e.must(200, "GET", "/rest/capabilities", "", nil).json(t, &caps)
	if caps.Application != "stash" || caps.Capabilities == nil || len(caps.Capabilities) != 0 {
		t.Fatalf("capabilities %+v", caps)
	}
	e.must(404, "GET", "/rest/capabilities/webhooks", "", nil)
}

func TestBranchesDefault(t *testing.T) {
	t.Parallel()
	e, r, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	head := e.git(work, "rev-parse", "HEAD")

	var def refJSON
	e.must(200, "GET", base+"/branches/default", e.admin, nil).json(t, &def)
	if def.ID != "refs/heads/main" || def.DisplayID != "main" || def.LatestCommit != head || !def.IsDefault || def.Type != "BRANCH" {
		t.Fatalf("default branch %+v", def)
	}
	e.must(200, "GET", "/rest/api/latest/projects/PRJ/repos/repo/branches/default", e.admin, nil)
	// Hidden like the repository itself.
	e.must(404, "GET", base+"/branches/default", e.bob, nil)

	// PUT moves HEAD (REPO_ADMIN); a reader may not.
	e.must(200, "POST", base+"/branches", e.admin, map[string]string{"name": "develop", "startPoint": head})
	e.grant("PRJ", "repo", "reader", "REPO_READ")
	e.must(403, "PUT", base+"/branches/default", e.reader, map[string]string{"id": "refs/heads/develop"})
	e.must(400, "PUT", base+"/branches/default", e.admin, map[string]string{"id": "refs/heads/-x"})
	e.must(204, "PUT", base+"/branches/default", e.admin, map[string]string{"id": "refs/heads/develop"})
	e.must(200, "GET", base+"/branches/default", e.reader, nil).json(t, &def)
	if def.ID != "refs/heads/develop" {
		t.Fatalf("after PUT the default branch is %+v", def)
	}

	// A default branch that does not exist yet (an empty repository) is
	// a 404 in Bitbucket's error shape, which Renovate tells apart from
	// a missing repository by the repository's own GET.
	e.repo("PRJ", "empty")
	got := e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/empty/branches/default", e.admin, nil)
	if msg := got.message(t); !strings.Contains(msg, "default branch") {
		t.Fatalf("empty repository: %q", msg)
	}
	_ = r
}

func TestBrowseTypeOnly(t *testing.T) {
	t.Parallel()
	e, _, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo/browse"
	first := e.git(work, "rev-parse", "HEAD~2")
	for path, want := range map[string]string{
		"/README.md":   "FILE",
		"/dir":         "DIRECTORY",
		"/dir/":        "DIRECTORY",
		"/dir/sub.txt": "FILE",
		"":             "DIRECTORY",
	} {
		var got struct {
			Type string `json:"type"`
		}
		e.must(200, "GET", base+path+"?type=true", e.admin, nil).json(t, &got)
		if got.Type != want {
			t.Fatalf("%q: type %q, want %q", path, got.Type, want)
		}
	}
	// Jenkins asks for the Jenkinsfile; a path that is not there is a 404.
	e.must(404, "GET", base+"/Jenkinsfile?type=true", e.admin, nil)
	// at is honoured: README.md came with the last commit.
	e.must(404, "GET", base+"/README.md?type=true&at="+first, e.admin, nil)
	// type=false is the ordinary listing; anything else names the parameter.
	e.must(200, "GET", base+"/README.md?type=false", e.admin, nil)
	if msg := e.must(400, "GET", base+"/README.md?type=yes", e.admin, nil).message(t); !strings.Contains(msg, "type") {
		t.Fatalf("type=yes: %q", msg)
	}
	// Hidden like everything else in the repository.
	e.must(404, "GET", base+"/README.md?type=true", e.bob, nil)
}

// TestJSONCoercion: the request decoder reads strings holding booleans
// and numbers into typed fields on every route, as Bitbucket does.
func TestJSONCoercion(t *testing.T) {
	t.Parallel()
	e, r, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	head := e.git(work, "rev-parse", "HEAD")

	var p struct {
		Key    string `json:"key"`
		Public bool   `json:"public"`
	}
	e.must(201, "POST", "/rest/api/1.0/projects", e.admin, `{"key":"PUB","name":"public","public":"true"}`).json(t, &p)
	if !p.Public {
		t.Fatalf("public \"true\" made %+v", p)
	}
	e.must(200, "PUT", "/rest/api/1.0/projects/PUB", e.admin, `{"public":"False"}`).json(t, &p)
	if p.Public {
		t.Fatalf("public \"False\" left %+v", p)
	}
	// dryRun "true" deletes nothing.
	e.must(200, "POST", base+"/branches", e.admin, map[string]string{"name": "keep", "startPoint": head})
	e.must(204, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, `{"name":"keep","dryRun":"true"}`)
	e.must(200, "GET", base+"/branches?filterText=keep", e.admin, nil)
	if got := e.git(work, "ls-remote", e.repos.Path(r.ID), "refs/heads/keep"); got == "" {
		t.Fatal("dryRun \"true\" deleted the branch")
	}
	// A string that holds no boolean is still an error naming the field.
	if msg := e.must(400, "POST", "/rest/api/1.0/projects", e.admin, `{"key":"BAD","name":"x","public":"yes"}`).message(t); !strings.Contains(msg, "public") {
		t.Fatalf("public \"yes\": %q", msg)
	}
}

// TestListingsByPermission: ?permission= lists only what the caller
// holds that permission on, on /repos and /projects.
func TestListingsByPermission(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	for _, slug := range []string{"r-read", "r-write", "r-admin", "r-none"} {
		e.repo("PRJ", slug)
	}
	e.grant("PRJ", "r-read", "alice", "REPO_READ")
	e.grant("PRJ", "r-write", "alice", "REPO_WRITE")
	e.grant("PRJ", "r-admin", "alice", "REPO_ADMIN")
	e.project("PADM", false)
	e.project("PRD", false)
	e.project("PUB", true)
	e.must(204, "PUT", "/rest/api/1.0/projects/PADM/permissions/users?name=alice&permission=PROJECT_ADMIN", e.admin, nil)
	e.must(204, "PUT", "/rest/api/1.0/projects/PRD/permissions/users?name=alice&permission=PROJECT_READ", e.admin, nil)

	slugs := func(query string) string {
		var p page[repoJSON]
		e.must(200, "GET", "/rest/api/1.0/repos?"+query, e.alice, nil).json(t, &p)
		var out []string
		for _, r := range p.Values {
			out = append(out, r.Slug)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	for query, want := range map[string]string{
		"":                                    "r-admin r-read r-write",
		"permission=REPO_READ":                "r-admin r-read r-write",
		"permission=REPO_WRITE":               "r-admin r-write",
		"permission=repo_admin&avatarSize=64": "r-admin",
		"permission=REPO_WRITE&name=r-w":      "r-write",
	} {
		if got := slugs(query); got != want {
			t.Errorf("/repos?%s: %q, want %q", query, got, want)
		}
	}
	keys := func(query string) string {
		var p page[struct{ Key string }]
		e.must(200, "GET", "/rest/api/latest/projects?"+query, e.alice, nil).json(t, &p)
		var out []string
		for _, v := range p.Values {
			out = append(out, v.Key)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	// Repository grants in PRJ give no project permission.
	for query, want := range map[string]string{
		"":                         "PADM PRD PUB",
		"permission=PROJECT_READ":  "PADM PRD PUB",
		"permission=PROJECT_WRITE": "PADM",
		"permission=PROJECT_ADMIN": "PADM",
	} {
		if got := keys(query); got != want {
			t.Errorf("/projects?%s: %q, want %q", query, got, want)
		}
	}
	for _, path := range []string{"/rest/api/1.0/repos?permission=WRITE", "/rest/api/1.0/repos?permission=PROJECT_ADMIN",
		"/rest/api/1.0/projects?permission=REPO_READ"} {
		if msg := e.must(400, "GET", path, e.alice, nil).message(t); !strings.Contains(msg, "permission") {
			t.Errorf("%s: %q", path, msg)
		}
	}
}

// TestBranchOrderAndDetails: orderBy=MODIFICATION puts the most recently
// committed branch first; details=true adds ahead/behind the default
// branch and the latest commit.
func TestBranchOrderAndDetails(t *testing.T) {
	t.Parallel()
	e, r, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	// commitAt commits on a new branch from main with a given committer
	// date (the env's git pins every date to 2026-01-01).
	commitAt := func(branch, date string) string {
		e.git(work, "checkout", "-q", "-b", branch, "main")
		cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-m", "on "+branch)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=C", "GIT_COMMITTER_EMAIL=c@example.com",
			"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("commit on %s: %v %s", branch, err, out)
		}
		return e.git(work, "rev-parse", "HEAD")
	}
	zeta := commitAt("zeta", "2026-03-01T00:00:00Z")
	alpha := commitAt("alpha", "2026-02-01T00:00:00Z")
	e.git(work, "branch", "old", "main~2")
	e.push(work, r.ID, "zeta", "alpha", "old")

	names := func(query string) string {
		var p page[refJSON]
		e.must(200, "GET", base+"/branches?"+query, e.admin, nil).json(t, &p)
		var out []string
		for _, b := range p.Values {
			out = append(out, b.DisplayID)
		}
		return strings.Join(out, " ")
	}
	for query, want := range map[string]string{
		"":                                     "alpha main old zeta",
		"orderBy=ALPHABETICAL":                 "alpha main old zeta",
		"orderBy=MODIFICATION":                 "zeta alpha main old", // main and old tie on date: by name
		"orderBy=modification&limit=1&start=1": "alpha",
		"orderBy=MODIFICATION&filterText=a":    "zeta alpha main",
	} {
		if got := names(query); got != want {
			t.Errorf("?%s: %q, want %q", query, got, want)
		}
	}
	var tags page[refJSON]
	e.must(200, "GET", base+"/tags?orderBy=MODIFICATION", e.admin, nil).json(t, &tags)
	if msg := e.must(400, "GET", base+"/branches?orderBy=NEWEST", e.admin, nil).message(t); !strings.Contains(msg, "orderBy") {
		t.Fatalf("orderBy=NEWEST: %q", msg)
	}
	if msg := e.must(400, "GET", base+"/branches?details=yes", e.admin, nil).message(t); !strings.Contains(msg, "details") {
		t.Fatalf("details=yes: %q", msg)
	}

	type meta struct {
		AheadBehind *struct{ Ahead, Behind int } `json:"com.atlassian.bitbucket.server.bitbucket-branch:ahead-behind-metadata-provider"`
		Latest      *struct {
			ID      string `json:"id"`
			Message string `json:"message"`
		} `json:"com.atlassian.bitbucket.server.bitbucket-branch:latest-commit-metadata"`
	}
	var detailed page[struct {
		DisplayID string `json:"displayId"`
		IsDefault bool   `json:"isDefault"`
		Metadata  meta   `json:"metadata"`
	}]
	e.must(200, "GET", base+"/branches?details=true&orderBy=MODIFICATION", e.admin, nil).json(t, &detailed)
	want := map[string]struct {
		ahead, behind int
		tip           string
	}{
		"zeta": {1, 0, zeta}, "alpha": {1, 0, alpha},
		"main": {0, 0, e.git(work, "rev-parse", "main")}, "old": {0, 2, e.git(work, "rev-parse", "old")},
	}
	if len(detailed.Values) != 4 {
		t.Fatalf("details: %+v", detailed)
	}
	for _, b := range detailed.Values {
		w := want[b.DisplayID]
		m := b.Metadata
		if m.AheadBehind == nil || m.AheadBehind.Ahead != w.ahead || m.AheadBehind.Behind != w.behind ||
			m.Latest == nil || m.Latest.ID != w.tip {
			t.Errorf("%s: metadata %+v %+v, want %+v", b.DisplayID, m.AheadBehind, m.Latest, w)
		}
	}
	if m := detailed.Values[0].Metadata; m.Latest.Message != "on zeta" {
		t.Errorf("latest commit message %q", m.Latest.Message)
	}
}
