package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

type page[T any] struct {
	Size          int  `json:"size"`
	Limit         int  `json:"limit"`
	Start         int  `json:"start"`
	IsLastPage    bool `json:"isLastPage"`
	Values        []T  `json:"values"`
	NextPageStart *int `json:"nextPageStart"`
}

type projectJSON struct {
	Key    string `json:"key"`
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Public bool   `json:"public"`
	Type   string `json:"type"`
}

func TestProjectsAndRepositories(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	var p projectJSON
	e.must(201, "POST", "/rest/api/1.0/projects", e.admin,
		map[string]any{"key": "prj", "name": "Project", "description": "d", "unknownField": 1}).json(t, &p)
	if p.Key != "PRJ" || p.Name != "Project" || p.ID == 0 || p.Type != "NORMAL" {
		t.Fatalf("created project %+v", p)
	}
	e.must(409, "POST", "/rest/api/1.0/projects", e.admin, map[string]any{"key": "PRJ", "name": "again"})
	e.must(200, "GET", "/rest/api/1.0/projects/prj", e.admin, nil).json(t, &p)
	if p.Key != "PRJ" {
		t.Fatalf("get project %+v", p)
	}
	e.must(200, "PUT", "/rest/api/1.0/projects/PRJ", e.admin, map[string]any{"name": "Renamed", "public": true}).json(t, &p)
	if p.Name != "Renamed" || !p.Public {
		t.Fatalf("updated project %+v", p)
	}

	// Changing the key keeps the project (and its repositories) by id.
	e.must(200, "PUT", "/rest/api/1.0/projects/PRJ", e.admin, map[string]any{"key": "tmp"}).json(t, &p)
	if p.Key != "TMP" {
		t.Fatalf("re-keyed project %+v", p)
	}
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ", e.admin, nil)
	e.must(400, "PUT", "/rest/api/1.0/projects/TMP", e.admin, map[string]any{"key": "../x"})
	e.must(200, "PUT", "/rest/api/1.0/projects/TMP", e.admin, map[string]any{"key": "PRJ"})

	// Repository creation and its Bitbucket shape.
	var r repoJSON
	e.must(201, "POST", "/rest/api/1.0/projects/PRJ/repos", e.admin,
		map[string]any{"name": "My Repo", "scmId": "git", "forkable": true}).json(t, &r)
	if r.Slug != "my-repo" || r.Name != "My Repo" || r.ScmID != "git" || r.State != "AVAILABLE" || r.Project.Key != "PRJ" || r.Project.Name != "Renamed" {
		t.Fatalf("created repo %+v", r)
	}
	clones := map[string]string{}
	for _, l := range r.Links.Clone {
		clones[l.Name] = l.Href
	}
	if clones["http"] != "http://sluice.test/scm/prj/my-repo.git" || clones["ssh"] != "ssh://git@sluice.test:7999/prj/my-repo.git" {
		t.Fatalf("clone links %+v", r.Links.Clone)
	}
	if len(r.Links.Self) != 1 || r.Links.Self[0].Href != "http://sluice.test/projects/PRJ/repos/my-repo/browse" {
		t.Fatalf("self link %+v", r.Links.Self)
	}
	if !e.repos.Exists(r.ID) {
		t.Fatal("repository not on disk")
	}
	e.must(409, "POST", "/rest/api/1.0/projects/PRJ/repos", e.admin, map[string]any{"name": "my repo"})
	e.must(400, "POST", "/rest/api/1.0/projects/PRJ/repos", e.admin, map[string]any{"name": "x", "scmId": "hg"})

	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/my-repo", e.admin, nil)
	var list page[repoJSON]
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos", e.admin, nil).json(t, &list)
	if list.Size != 1 || list.Values[0].Slug != "my-repo" {
		t.Fatalf("project repos %+v", list)
	}
	e.must(200, "GET", "/rest/api/1.0/repos?name=my", e.admin, nil).json(t, &list)
	if list.Size != 1 || list.Values[0].Project.Name != "Renamed" {
		t.Fatalf("all repos %+v", list)
	}
	e.must(200, "GET", "/rest/api/1.0/repos?name=nothing-like-it", e.admin, nil).json(t, &list)
	if list.Size != 0 || !list.IsLastPage {
		t.Fatalf("filtered repos %+v", list)
	}

	// Rename: a new name gives a new slug; the old one is gone.
	e.must(200, "PUT", "/rest/api/1.0/projects/PRJ/repos/my-repo", e.admin, map[string]any{"name": "Other", "public": true}).json(t, &r)
	if r.Slug != "other" || !r.Public {
		t.Fatalf("renamed repo %+v", r)
	}
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/my-repo", e.admin, nil)
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/other", e.admin, nil)

	// A project with repositories cannot be deleted.
	e.must(409, "DELETE", "/rest/api/1.0/projects/PRJ", e.admin, nil)
	e.must(202, "DELETE", "/rest/api/1.0/projects/PRJ/repos/other", e.admin, nil)
	if e.repos.Exists(r.ID) {
		t.Fatal("deleted repository still on disk")
	}
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/other", e.admin, nil)
	e.must(204, "DELETE", "/rest/api/1.0/projects/PRJ", e.admin, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ", e.admin, nil)
}

func TestProjectCreatorAdministersProject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// alice may not create projects until granted PROJECT_CREATE.
	e.must(403, "POST", "/rest/api/1.0/projects", e.alice, map[string]any{"key": "AL", "name": "Alice"})
	e.must(204, "PUT", "/rest/api/1.0/admin/permissions/users?name=alice&permission=PROJECT_CREATE", e.admin, nil)
	e.must(201, "POST", "/rest/api/1.0/projects", e.alice, map[string]any{"key": "AL", "name": "Alice"})
	e.must(201, "POST", "/rest/api/1.0/projects/AL/repos", e.alice, map[string]any{"name": "r"})
	e.must(200, "PUT", "/rest/api/1.0/projects/AL", e.alice, map[string]any{"description": "mine"})
	// bob sees none of it.
	e.must(404, "GET", "/rest/api/1.0/projects/AL", e.bob, nil)
	e.must(404, "POST", "/rest/api/1.0/projects/AL/repos", e.bob, map[string]any{"name": "r2"})
}

func TestForkAndFlags(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	e.project("DST", false)
	parent := e.repo("PRJ", "parent")
	work := e.workTree(map[string]string{"a.txt": "a\n"}, 2)
	e.push(work, parent.ID, "main")

	var fork repoJSON
	e.must(201, "POST", "/rest/api/1.0/projects/PRJ/repos/parent", e.admin,
		map[string]any{"name": "my fork", "project": map[string]any{"key": "DST"}}).json(t, &fork)
	if fork.Slug != "my-fork" || fork.Project.Key != "DST" || fork.Origin == nil || fork.Origin.Slug != "parent" {
		t.Fatalf("fork %+v", fork)
	}
	var got repoJSON
	e.must(200, "GET", "/rest/api/1.0/projects/DST/repos/my-fork", e.admin, nil).json(t, &got)
	if got.Origin == nil || got.Origin.Slug != "parent" {
		t.Fatalf("fork origin not shown: %+v", got)
	}
	// A reader of the parent cannot fork into a project they cannot write.
	e.grant("PRJ", "parent", "reader", "REPO_READ")
	e.must(404, "POST", "/rest/api/1.0/projects/PRJ/repos/parent", e.reader, map[string]any{"name": "f2", "project": map[string]any{"key": "DST"}})
	e.must(403, "POST", "/rest/api/1.0/projects/PRJ/repos/parent", e.reader, map[string]any{"name": "f2"})
	// The parent cannot be deleted while it has forks.
	e.must(409, "DELETE", "/rest/api/1.0/projects/PRJ/repos/parent", e.admin, nil)
	e.must(202, "DELETE", "/rest/api/1.0/projects/DST/repos/my-fork", e.admin, nil)
	e.must(202, "DELETE", "/rest/api/1.0/projects/PRJ/repos/parent", e.admin, nil)
}

func TestListingHidesInvisible(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRIV", false)
	e.project("PUB", true)
	e.repo("PRIV", "secret")
	e.repo("PRIV", "shared")
	e.repo("PUB", "open")
	e.grant("PRIV", "shared", "bob", "REPO_READ")

	slugs := func(authz, path string) []string {
		var l page[repoJSON]
		e.must(200, "GET", path, authz, nil).json(t, &l)
		var out []string
		for _, r := range l.Values {
			out = append(out, r.Project.Key+"/"+r.Slug)
		}
		return out
	}
	if got := fmt.Sprint(slugs(e.bob, "/rest/api/1.0/repos")); got != "[PRIV/shared PUB/open]" {
		t.Errorf("bob sees %s", got)
	}
	if got := fmt.Sprint(slugs("", "/rest/api/1.0/repos")); got != "[PUB/open]" {
		t.Errorf("anonymous sees %s", got)
	}
	if got := fmt.Sprint(slugs(e.admin, "/rest/api/1.0/repos")); got != "[PRIV/secret PRIV/shared PUB/open]" {
		t.Errorf("admin sees %s", got)
	}
	// Within a project bob cannot read, he sees his one repository.
	if got := fmt.Sprint(slugs(e.bob, "/rest/api/1.0/projects/PRIV/repos")); got != "[PRIV/shared]" {
		t.Errorf("bob sees in PRIV %s", got)
	}
	e.must(404, "GET", "/rest/api/1.0/projects/PRIV/repos", e.alice, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/PRIV/repos?start=5", e.alice, nil)
	e.must(200, "GET", "/rest/api/1.0/projects/PRIV/repos?start=5", e.bob, nil)
	e.must(401, "GET", "/rest/api/1.0/projects/PRIV/repos", "", nil)

	var projects page[projectJSON]
	e.must(200, "GET", "/rest/api/1.0/projects", e.bob, nil).json(t, &projects)
	if projects.Size != 1 || projects.Values[0].Key != "PUB" {
		t.Errorf("bob's projects %+v", projects)
	}
	e.must(200, "GET", "/rest/api/1.0/projects?name=priv", e.admin, nil).json(t, &projects)
	if projects.Size != 1 || projects.Values[0].Key != "PRIV" {
		t.Errorf("filtered projects %+v", projects)
	}
}

func TestPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := 0; i < 30; i++ {
		e.must(200, "POST", "/rest/api/1.0/admin/groups?name="+url.QueryEscape(fmt.Sprintf("group-%02d", i)), e.admin, nil)
	}
	tests := []struct {
		query      string
		size       int
		limit      int
		start      int
		last       bool
		next       int
		firstValue string
	}{
		{"", 25, 25, 0, false, 25, "group-00"},
		{"?limit=10", 10, 10, 0, false, 10, "group-00"},
		{"?start=10&limit=10", 10, 10, 10, false, 20, "group-10"},
		{"?start=20&limit=10", 10, 10, 20, true, 0, "group-20"},
		{"?start=25&limit=10", 5, 10, 25, true, 0, "group-25"},
		{"?start=40", 0, 25, 40, true, 0, ""},
		{"?limit=0", 25, 25, 0, false, 25, "group-00"},
		{"?limit=5000", 30, 1000, 0, true, 0, "group-00"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			var p page[struct{ Name string }]
			e.must(200, "GET", "/rest/api/1.0/admin/groups"+tt.query, e.admin, nil).json(t, &p)
			if p.Size != tt.size || p.Limit != tt.limit || p.Start != tt.start || p.IsLastPage != tt.last || len(p.Values) != tt.size {
				t.Fatalf("page %+v", p)
			}
			if tt.last != (p.NextPageStart == nil) || (!tt.last && *p.NextPageStart != tt.next) {
				t.Fatalf("nextPageStart %v, want %d", p.NextPageStart, tt.next)
			}
			if tt.size > 0 && p.Values[0].Name != tt.firstValue {
				t.Fatalf("first value %q, want %q", p.Values[0].Name, tt.firstValue)
			}
		})
	}
	for _, bad := range []string{"?limit=-1", "?start=-5", "?limit=abc", "?start=1.5"} {
		r := e.must(400, "GET", "/rest/api/1.0/admin/groups"+bad, e.admin, nil)
		if m := r.message(t); !strings.Contains(m, "start") && !strings.Contains(m, "limit") {
			t.Errorf("%s: message %q names no parameter", bad, m)
		}
	}
}
