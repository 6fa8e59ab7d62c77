package api_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
)

type userJSON struct {
	Name         string `json:"name"`
	Slug         string `json:"slug"`
	DisplayName  string `json:"displayName"`
	EmailAddress string `json:"emailAddress"`
	Active       bool   `json:"active"`
	ID           int64  `json:"id"`
	Type         string `json:"type"`
}

func TestUsersAndGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.must(204, "POST", "/rest/api/1.0/admin/users?name=Carol&password=pw-carol-1&displayName=Carol+C&emailAddress=carol@example.com", e.admin, nil)
	e.must(409, "POST", "/rest/api/1.0/admin/users?name=carol&password=x", e.admin, nil)
	e.must(400, "POST", "/rest/api/1.0/admin/users?name=dave&emailAddress=not-an-address", e.admin, nil)
	e.must(403, "POST", "/rest/api/1.0/admin/users?name=eve", e.alice, nil)

	var u userJSON
	e.must(200, "GET", "/rest/api/1.0/users/carol", e.alice, nil).json(t, &u)
	if u.Name != "Carol" || u.Slug != "carol" || u.DisplayName != "Carol C" || u.EmailAddress != "carol@example.com" || !u.Active || u.Type != "NORMAL" {
		t.Fatalf("user %+v", u)
	}
	// The new password works.
	e.must(200, "GET", "/rest/api/1.0/users/carol", basic("carol", "pw-carol-1"), nil)
	e.must(404, "GET", "/rest/api/1.0/users/nobody", e.alice, nil)

	var users page[userJSON]
	e.must(200, "GET", "/rest/api/1.0/users?filter=car", e.alice, nil).json(t, &users)
	if users.Size != 1 || users.Values[0].Name != "Carol" {
		t.Fatalf("filtered users %+v", users)
	}
	e.must(200, "GET", "/rest/api/1.0/users", e.alice, nil).json(t, &users)
	if users.Size != 6 {
		t.Fatalf("users %+v", users)
	}

	e.must(200, "PUT", "/rest/api/1.0/admin/users", e.admin, map[string]any{"name": "carol", "displayName": "Caroline", "email": "c@example.org"}).json(t, &u)
	if u.DisplayName != "Caroline" || u.EmailAddress != "c@example.org" {
		t.Fatalf("updated user %+v", u)
	}
	e.must(400, "PUT", "/rest/api/1.0/admin/users", e.admin, map[string]any{"name": "carol", "displayName": "a\nb"})
	e.must(400, "PUT", "/rest/api/1.0/admin/users/credentials", e.admin, map[string]any{"name": "carol", "password": "a", "passwordConfirm": "b"})
	e.must(204, "PUT", "/rest/api/1.0/admin/users/credentials", e.admin, map[string]any{"name": "carol", "password": "pw-carol-2", "passwordConfirm": "pw-carol-2"})
	e.must(401, "GET", "/rest/api/1.0/users/carol", basic("carol", "pw-carol-1"), nil)
	e.must(200, "GET", "/rest/api/1.0/users/carol", basic("carol", "pw-carol-2"), nil)

	// Groups and membership.
	e.must(200, "POST", "/rest/api/1.0/admin/groups?name=devs", e.admin, nil)
	e.must(409, "POST", "/rest/api/1.0/admin/groups?name=devs", e.admin, nil)
	e.must(400, "POST", "/rest/api/1.0/admin/groups?name=-x", e.admin, nil)
	e.must(204, "POST", "/rest/api/1.0/admin/groups/add-user", e.admin, map[string]any{"group": "devs", "users": []string{"carol", "bob"}})
	e.must(404, "POST", "/rest/api/1.0/admin/groups/add-users", e.admin, map[string]any{"group": "devs", "users": []string{"alice", "ghost"}})
	var members page[userJSON]
	e.must(200, "GET", "/rest/api/1.0/admin/groups/more-members?context=devs", e.admin, nil).json(t, &members)
	if members.Size != 2 {
		t.Fatalf("members %+v (add-users with an unknown user must change nothing)", members)
	}
	e.must(204, "POST", "/rest/api/1.0/admin/groups/remove-user", e.admin, map[string]any{"context": "devs", "itemName": "bob"})
	e.must(200, "GET", "/rest/api/1.0/admin/groups/more-members?context=devs", e.admin, nil).json(t, &members)
	if members.Size != 1 || members.Values[0].Name != "Carol" {
		t.Fatalf("members after removal %+v", members)
	}
	var groups page[struct{ Name string }]
	e.must(200, "GET", "/rest/api/1.0/admin/groups?filter=dev", e.admin, nil).json(t, &groups)
	if groups.Size != 1 || groups.Values[0].Name != "devs" {
		t.Fatalf("groups %+v", groups)
	}
	e.must(200, "DELETE", "/rest/api/1.0/admin/groups?name=devs", e.admin, nil)
	e.must(404, "DELETE", "/rest/api/1.0/admin/groups?name=devs", e.admin, nil)

	// Deleting users; not oneself.
	e.must(400, "DELETE", "/rest/api/1.0/admin/users?name=admin", e.admin, nil)
	e.must(200, "DELETE", "/rest/api/1.0/admin/users?name=carol", e.admin, nil).json(t, &u)
	if u.Name != "Carol" {
		t.Fatalf("deleted user %+v", u)
	}
	e.must(404, "GET", "/rest/api/1.0/users/carol", e.alice, nil)
}

func TestPermissionEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	r := e.repo("PRJ", "repo")
	e.push(e.workTree(nil, 1), r.ID, "main")
	e.must(200, "POST", "/rest/api/1.0/admin/groups?name=team", e.admin, nil)
	e.must(204, "POST", "/rest/api/1.0/admin/groups/add-users", e.admin, map[string]any{"group": "team", "users": []string{"bob"}})

	type userPerm struct {
		User       userJSON `json:"user"`
		Permission string   `json:"permission"`
	}
	type groupPerm struct {
		Group      struct{ Name string } `json:"group"`
		Permission string                `json:"permission"`
	}
	for _, tt := range []struct{ base, read, write string }{
		{"/rest/api/1.0/projects/PRJ/repos/repo/permissions", "REPO_READ", "REPO_WRITE"},
		{"/rest/api/1.0/projects/PRJ/permissions", "PROJECT_READ", "PROJECT_WRITE"},
	} {
		t.Run(tt.base, func(t *testing.T) {
			// Nothing yet: alice cannot see the repository.
			e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/repo", e.alice, nil)
			e.must(204, "PUT", tt.base+"/users?name=alice&permission="+tt.read, e.admin, nil)
			e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/repo", e.alice, nil)
			var ups page[userPerm]
			e.must(200, "GET", tt.base+"/users", e.admin, nil).json(t, &ups)
			if ups.Size != 1 || ups.Values[0].User.Name != "alice" || ups.Values[0].Permission != tt.read {
				t.Fatalf("user permissions %+v", ups)
			}
			// alice may read but not manage permissions.
			e.must(403, "GET", tt.base+"/users", e.alice, nil)
			e.must(403, "PUT", tt.base+"/users?name=alice&permission="+tt.write, e.alice, nil)
			e.must(400, "PUT", tt.base+"/users?name=alice&permission=SYS_ADMIN", e.admin, nil)
			e.must(400, "PUT", tt.base+"/users?name=alice", e.admin, nil)
			e.must(404, "PUT", tt.base+"/users?name=ghost&permission="+tt.read, e.admin, nil)
			e.must(204, "DELETE", tt.base+"/users?name=alice", e.admin, nil)
			e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/repo", e.alice, nil)

			e.must(204, "PUT", tt.base+"/groups?name=team&permission="+tt.write, e.admin, nil)
			e.must(200, "POST", "/rest/api/1.0/projects/PRJ/repos/repo/branches", e.bob, map[string]string{"name": "x", "startPoint": "main"})
			var gps page[groupPerm]
			e.must(200, "GET", tt.base+"/groups?filter=tea", e.admin, nil).json(t, &gps)
			if gps.Size != 1 || gps.Values[0].Group.Name != "team" || gps.Values[0].Permission != tt.write {
				t.Fatalf("group permissions %+v", gps)
			}
			e.must(204, "DELETE", tt.base+"/groups?name=team", e.admin, nil)
			e.must(404, "GET", "/rest/api/1.0/projects/PRJ/repos/repo", e.bob, nil)
			e.must(204, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "x"})
		})
	}

	// Global permissions.
	e.must(403, "GET", "/rest/api/1.0/admin/permissions/users", e.alice, nil)
	e.must(204, "PUT", "/rest/api/1.0/admin/permissions/users?name=alice&permission=ADMIN", e.admin, nil)
	e.must(200, "GET", "/rest/api/1.0/admin/groups", e.alice, nil)
	// An ADMIN may not make anyone SYS_ADMIN, nor touch a SYS_ADMIN, nor
	// change their own permission.
	e.must(403, "PUT", "/rest/api/1.0/admin/permissions/users?name=bob&permission=SYS_ADMIN", e.alice, nil)
	e.must(403, "DELETE", "/rest/api/1.0/admin/permissions/users?name=admin", e.alice, nil)
	e.must(400, "DELETE", "/rest/api/1.0/admin/permissions/users?name=alice", e.alice, nil)
	e.must(204, "PUT", "/rest/api/1.0/admin/permissions/groups?name=team&permission=PROJECT_CREATE", e.alice, nil)
	e.must(400, "PUT", "/rest/api/1.0/admin/permissions/groups?name=team&permission=REPO_READ", e.alice, nil)
	e.must(201, "POST", "/rest/api/1.0/projects", e.bob, map[string]any{"key": "BOB", "name": "Bob"})
	var gps page[groupPerm]
	e.must(200, "GET", "/rest/api/1.0/admin/permissions/groups", e.admin, nil).json(t, &gps)
	if gps.Size != 1 || gps.Values[0].Permission != "PROJECT_CREATE" {
		t.Fatalf("global group permissions %+v", gps)
	}
	e.must(204, "DELETE", "/rest/api/1.0/admin/permissions/groups?name=team", e.alice, nil)
	e.must(403, "POST", "/rest/api/1.0/projects", e.bob, map[string]any{"key": "BOB2", "name": "Bob"})
	e.must(204, "DELETE", "/rest/api/1.0/admin/permissions/users?name=alice", e.admin, nil)
	e.must(403, "GET", "/rest/api/1.0/admin/groups", e.alice, nil)
}

func TestAccessTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	e.repo("PRJ", "repo")
	e.grant("PRJ", "repo", "alice", "REPO_WRITE")
	alicePW := basic("alice", testPassword)

	type token struct {
		ID          string   `json:"id"`
		Name        string   `json:"name"`
		Token       string   `json:"token"`
		Permissions []string `json:"permissions"`
		ExpiryDate  int64    `json:"expiryDate"`
		User        userJSON `json:"user"`
	}
	var tok token
	e.must(200, "PUT", "/rest/access-tokens/1.0/users/alice", alicePW,
		map[string]any{"name": "ci", "permissions": []string{"REPO_READ"}, "expiryDays": 30}).json(t, &tok)
	if tok.Token == "" || tok.Name != "ci" || tok.User.Name != "alice" || tok.ExpiryDate == 0 || strings.Join(tok.Permissions, ",") != "PROJECT_READ,REPO_READ" {
		t.Fatalf("created token %+v", tok)
	}
	bearer := "Bearer " + tok.Token
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/repo", bearer, nil)
	// A read token cannot write even though alice can.
	e.must(403, "POST", "/rest/api/1.0/projects/PRJ/repos/repo/tags", bearer, map[string]string{"name": "t", "startPoint": "main"})
	// Tokens cannot mint tokens.
	e.must(403, "PUT", "/rest/access-tokens/1.0/users/alice", bearer, map[string]any{"name": "x", "scope": "admin"})

	var list page[token]
	e.must(200, "GET", "/rest/access-tokens/1.0/users/alice", alicePW, nil).json(t, &list)
	var found bool
	for _, v := range list.Values {
		if v.Token != "" {
			t.Fatalf("listing shows a secret: %+v", v)
		}
		found = found || v.ID == tok.ID
	}
	if !found {
		t.Fatalf("token %s not listed: %+v", tok.ID, list)
	}
	// Others may not see or create alice's tokens; admins may see them.
	e.must(403, "GET", "/rest/access-tokens/1.0/users/alice", e.bob, nil)
	e.must(403, "PUT", "/rest/access-tokens/1.0/users/alice", basic("bob", testPassword), map[string]any{"name": "x", "scope": "read"})
	e.must(200, "GET", "/rest/access-tokens/1.0/users/alice", e.admin, nil)
	e.must(401, "GET", "/rest/access-tokens/1.0/users/alice", "", nil)

	for _, bad := range []map[string]any{
		{"name": "x"},
		{"name": "x", "permissions": []string{"SYS_ADMIN"}},
		{"name": "x", "scope": "root"},
		{"name": "", "scope": "read"},
		{"name": "x", "scope": "read", "expiryDays": 0},
		{"name": "x", "scope": "read", "expiryDays": 100000},
	} {
		e.must(400, "PUT", "/rest/access-tokens/1.0/users/alice", alicePW, bad)
	}

	e.must(404, "DELETE", "/rest/access-tokens/1.0/users/bob/"+tok.ID, e.admin, nil)
	e.must(404, "DELETE", "/rest/access-tokens/1.0/users/alice/abc", alicePW, nil)
	e.must(204, "DELETE", "/rest/access-tokens/1.0/users/alice/"+tok.ID, alicePW, nil)
	e.must(401, "GET", "/rest/api/1.0/projects/PRJ/repos/repo", bearer, nil)
	e.must(200, "GET", "/rest/access-tokens/1.0/users/alice", alicePW, nil).json(t, &list)
	if list.Size != 1 { // the set-up token of newEnv remains
		t.Fatalf("tokens after revoke %+v", list)
	}
}

// TestOpenAPI: the document parses, every operation in it is served (a
// request to it does not fall through to "no such resource"), and it lists
// the endpoints this test suite exercises.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.must(200, "GET", "/rest/api/1.0/openapi.json", "", nil)
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Summary    string `json:"summary"`
			Parameters []struct {
				Name, In string
				Required bool
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(res.body, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	var ops []string
	for path, methods := range doc.Paths {
		for method, op := range methods {
			ops = append(ops, strings.ToUpper(method)+" "+path)
			if op.Summary == "" {
				t.Errorf("%s %s: no summary", method, path)
			}
			for _, m := range param.FindAllString(path, -1) {
				name := strings.Trim(m, "{}")
				ok := false
				for _, p := range op.Parameters {
					ok = ok || (p.Name == name && p.In == "path" && p.Required)
				}
				if !ok {
					t.Errorf("%s %s: path parameter %s not declared", method, path, name)
				}
			}
			// Served: the route exists, whatever the caller may do there.
			concrete := param.ReplaceAllString(path, "x")
			r := e.do(strings.ToUpper(method), concrete, "", nil)
			if r.status == http.StatusMethodNotAllowed || (r.status == 404 && strings.Contains(string(r.body), "no such resource")) {
				t.Errorf("%s %s: documented but not served (%d %s)", method, path, r.status, r.body)
			}
		}
	}
	sort.Strings(ops)
	all := strings.Join(ops, "\n")
	for _, want := range []string{
		"GET /rest/api/1.0/projects", "POST /rest/api/1.0/projects/{key}/repos/{slug}", "DELETE /rest/branch-utils/1.0/projects/{key}/repos/{slug}/branches",
		"GET /rest/api/1.0/projects/{key}/repos/{slug}/browse/{path}", "PUT /rest/access-tokens/1.0/users/{userSlug}",
		"PUT /rest/api/1.0/admin/permissions/groups", "GET /rest/api/1.0/projects/{key}/repos/{slug}/archive",
		"GET /rest/api/1.0/openapi.json",
	} {
		if !strings.Contains(all, want+"\n") && !strings.HasSuffix(all, want) {
			t.Errorf("document lacks %s", want)
		}
	}
	if len(ops) < 60 {
		t.Errorf("only %d operations documented:\n%s", len(ops), all)
	}
}
