package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

type resourceTokenDoc struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Permissions []string `json:"permissions"`
	ExpiryDays  int      `json:"expiryDays"`
	ExpiryDate  int64    `json:"expiryDate"`
	Token       string   `json:"token"`
}

func TestProjectAndRepositoryAccessTokens(t *testing.T) {
	e := newEnv(t)
	adminPW := basic("admin", testPassword)
	e.project("PRJ", false)
	e.repo("PRJ", "app")
	e.repo("PRJ", "lib")
	e.project("OTH", false)
	e.repo("OTH", "other")
	e.project("PUB", true)
	e.repo("PUB", "open")
	const base = "/rest/access-tokens/1.0/projects/"

	// Creating takes a password session of a project administrator.
	body := map[string]any{"name": "ci", "permissions": []string{"PROJECT_READ", "REPO_WRITE"}, "expiryDays": 30}
	e.must(403, "PUT", base+"PRJ", e.admin, body)
	e.must(404, "PUT", base+"PRJ", basic("bob", testPassword), body)
	e.must(400, "PUT", base+"PRJ", adminPW, map[string]any{"name": "x", "permissions": []string{"SYS_ADMIN"}})
	e.must(400, "PUT", base+"PRJ", adminPW, map[string]any{"name": "x"})
	var ci resourceTokenDoc
	e.must(200, "PUT", base+"PRJ", adminPW, body).json(t, &ci)
	if !strings.HasPrefix(ci.Token, "sluice_rt_") || ci.Name != "ci" || ci.ExpiryDays != 30 || ci.ExpiryDate == 0 ||
		fmt.Sprint(ci.Permissions) != "[PROJECT_READ REPO_WRITE]" {
		t.Fatalf("created %+v", ci)
	}
	bearer := "Bearer " + ci.Token

	// It reaches its project's repositories, over Bearer and Basic alike,
	// and nothing else: not other projects, not public ones, not users.
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ", bearer, nil)
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/app", bearer, nil)
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/lib", basic("x-token-auth", ci.Token), nil)
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/lib", basic("jenkins", ci.Token), nil)
	e.must(404, "GET", "/rest/api/1.0/projects/OTH/repos/other", bearer, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/OTH", bearer, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/PUB/repos/open", bearer, nil)
	e.must(403, "GET", "/rest/api/1.0/admin/groups", bearer, nil)
	e.must(403, "POST", "/rest/api/1.0/projects", bearer, map[string]any{"key": "NEW"})
	e.must(403, "POST", "/rest/api/1.0/projects/PRJ/repos", bearer, map[string]any{"name": "new"})
	e.must(403, "DELETE", "/rest/api/1.0/projects/PRJ/repos/app", bearer, nil)
	var repos struct {
		Values []repoJSON `json:"values"`
	}
	e.must(200, "GET", "/rest/api/1.0/repos", bearer, nil).json(t, &repos)
	if len(repos.Values) != 2 {
		t.Errorf("listing shows %d repositories, want the project's 2: %+v", len(repos.Values), repos.Values)
	}
	// Write reaches the branch code (a bad start point), not a refusal.
	if r := e.do("POST", "/rest/api/1.0/projects/PRJ/repos/app/branches", bearer, map[string]any{"name": "b", "startPoint": "nope"}); r.status == 403 || r.status < 400 {
		t.Fatalf("write with REPO_WRITE: %d %s", r.status, r.body)
	}
	// A token never manages tokens, whatever it holds.
	e.must(403, "PUT", base+"PRJ/repos/app", bearer, map[string]any{"name": "x", "permissions": []string{"REPO_READ"}})

	// Listing and reading show no secret; another project's id is 404.
	var list struct {
		Size   int                `json:"size"`
		Values []resourceTokenDoc `json:"values"`
	}
	e.must(200, "GET", base+"PRJ", e.admin, nil).json(t, &list)
	if list.Size != 1 || list.Values[0].ID != ci.ID || list.Values[0].Token != "" {
		t.Fatalf("list %+v", list)
	}
	var got resourceTokenDoc
	e.must(200, "GET", base+"PRJ/"+ci.ID, e.admin, nil).json(t, &got)
	if got.Name != "ci" || got.Token != "" {
		t.Fatalf("get %+v", got)
	}
	e.must(200, "GET", "/rest/access-tokens/latest/projects/PRJ/"+ci.ID, e.admin, nil)
	e.must(404, "GET", base+"OTH/"+ci.ID, e.admin, nil)
	e.must(404, "GET", base+"PRJ/"+ci.ID, e.bob, nil)
	e.must(404, "GET", base+"PRJ/x", e.admin, nil)

	// Update replaces the permissions from the next request on.
	e.must(200, "POST", base+"PRJ/"+ci.ID, adminPW, map[string]any{"name": "ci-ro", "permissions": []string{"REPO_READ"}}).json(t, &got)
	if got.Name != "ci-ro" || fmt.Sprint(got.Permissions) != "[PROJECT_READ REPO_READ]" {
		t.Fatalf("updated %+v", got)
	}
	e.must(403, "POST", "/rest/api/1.0/projects/PRJ/repos/app/branches", bearer, map[string]any{"name": "b", "startPoint": "nope"})

	// A repository token: repository permissions only, its repository only.
	e.must(400, "PUT", base+"PRJ/repos/app", adminPW, map[string]any{"name": "d", "permissions": []string{"PROJECT_READ"}})
	var deploy resourceTokenDoc
	e.must(200, "PUT", base+"PRJ/repos/app", adminPW, map[string]any{"name": "deploy", "permissions": []string{"REPO_READ"}}).json(t, &deploy)
	if fmt.Sprint(deploy.Permissions) != "[REPO_READ]" || deploy.ExpiryDays != 0 {
		t.Fatalf("repository token %+v", deploy)
	}
	repoBearer := "Bearer " + deploy.Token
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/app", repoBearer, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/lib", repoBearer, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ", repoBearer, nil)
	e.must(404, "GET", base+"PRJ/repos/lib/"+deploy.ID, e.admin, nil)
	e.must(404, "GET", base+"PRJ/"+deploy.ID, e.admin, nil)
	e.must(200, "GET", base+"PRJ/repos/app/"+deploy.ID, e.admin, nil)

	// Delete: the next request with the secret is refused.
	e.must(204, "DELETE", base+"PRJ/repos/app/"+deploy.ID, e.admin, nil)
	r := e.must(401, "GET", "/rest/api/1.0/projects/PRJ/repos/app", repoBearer, nil)
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("no WWW-Authenticate on a deleted token")
	}
	e.must(404, "DELETE", base+"PRJ/repos/app/"+deploy.ID, e.admin, nil)
	// Deleting the project takes its tokens with it.
	e.must(202, "DELETE", "/rest/api/1.0/projects/PRJ/repos/app", e.admin, nil)
	e.must(202, "DELETE", "/rest/api/1.0/projects/PRJ/repos/lib", e.admin, nil)
	e.must(http.StatusNoContent, "DELETE", "/rest/api/1.0/projects/PRJ", e.admin, nil)
	e.must(401, "GET", "/rest/api/1.0/projects/PRJ", bearer, nil)
}
