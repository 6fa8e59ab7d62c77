// Package storetest is the one test suite every store.Store implementation
// passes. store's own tests run it on SQLite and on PostgreSQL; a new
// implementation (or a new dialect) gets the same guarantees by calling Run.
//
// Each subtest opens its own empty store, so subtests neither see nor
// depend on each other's rows.
package storetest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Run runs the suite. open returns a new, empty, migrated store and
// registers its own cleanup (closing it, removing its files or database).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Basics", testBasics},
		{"Users", testUsers},
		{"UserList", testUserList},
		{"Groups", testGroups},
		{"Projects", testProjects},
		{"Repos", testRepos},
		{"RepoList", testRepoList},
		{"Forks", testForks},
		{"GlobalGrants", testGlobalGrants},
		{"ProjectAndRepoGrants", testProjectAndRepoGrants},
		{"EffectiveGrants", testEffectiveGrants},
		{"GrantCascades", testGrantCascades},
		{"Tokens", testTokens},
		{"SSHKeys", testSSHKeys},
		{"UserCascade", testUserCascade},
		{"RefTxns", testRefTxns},
		{"GitRuns", testGitRuns},
		{"ConcurrentBumps", testConcurrentBumps},
		{"ConcurrentRefTxns", testConcurrentRefTxns},
		{"Settings", testSettings},
		{"SettingIfAbsent", testSettingIfAbsent},
		{"ReadsSeeWrites", testReadsSeeWrites},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func wantKind(t *testing.T, err error, k problem.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", k)
	}
	if got := problem.KindOf(err); got != k {
		t.Fatalf("got %v (%v), want %v", got, err, k)
	}
}

func wantMessage(t *testing.T, err error, substr string) {
	t.Helper()
	if msg := problem.Message(err); !strings.Contains(msg, substr) {
		t.Fatalf("message %q does not contain %q", msg, substr)
	}
}

func mkUser(t *testing.T, s store.Store, name string) *store.User {
	t.Helper()
	u := &store.User{Name: name, DisplayName: strings.ToUpper(name), Email: name + "@example.com", Active: true}
	ok(t, s.CreateUser(ctx(t), u))
	return u
}

func mkGroup(t *testing.T, s store.Store, name string) *store.Group {
	t.Helper()
	g := &store.Group{Name: name}
	ok(t, s.CreateGroup(ctx(t), g))
	return g
}

func mkProject(t *testing.T, s store.Store, key string) *store.Project {
	t.Helper()
	p := &store.Project{Key: key, Name: "Project " + key}
	ok(t, s.CreateProject(ctx(t), p))
	return p
}

func mkRepo(t *testing.T, s store.Store, p *store.Project, name string) *store.Repository {
	t.Helper()
	r := &store.Repository{ProjectID: p.ID, Name: name}
	ok(t, s.CreateRepo(ctx(t), r))
	return r
}

func names[T any](xs []T, f func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func wantNames(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func userName(u store.User) string      { return u.Name }
func groupName(g store.Group) string    { return g.Name }
func projectKey(p store.Project) string { return p.Key }
func repoSlug(r store.Repository) string {
	return r.ProjectKey + "/" + r.Slug
}

func testBasics(t *testing.T, s store.Store) {
	if d := s.Dialect(); d != "sqlite" && d != "postgres" {
		t.Errorf("Dialect() = %q", d)
	}
	ok(t, s.Ping(ctx(t)))
}

func testUsers(t *testing.T, s store.Store) {
	c := ctx(t)
	before := time.Now().Add(-time.Second)
	u := &store.User{Name: "Alice", DisplayName: "Alice A.", Email: "alice@example.com", PasswordHash: "$argon2id$x", Active: true}
	ok(t, s.CreateUser(c, u))
	if u.ID == 0 {
		t.Fatal("CreateUser did not set ID")
	}
	if u.CreatedAt.Location() != time.UTC || u.CreatedAt.Before(before) || u.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("CreatedAt = %v, want now in UTC", u.CreatedAt)
	}

	for _, name := range []string{"Alice", "alice", "ALICE"} {
		got, err := s.UserByName(c, name)
		ok(t, err)
		if *got != *u {
			t.Errorf("UserByName(%q) = %+v, want %+v", name, got, u)
		}
	}
	got, err := s.UserByID(c, u.ID)
	ok(t, err)
	if *got != *u {
		t.Errorf("UserByID = %+v, want %+v", got, u)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("read CreatedAt not UTC: %v", got.CreatedAt.Location())
	}

	err = s.CreateUser(c, &store.User{Name: "aLiCe"})
	wantKind(t, err, problem.Conflict)
	wantMessage(t, err, "already exists")

	_, err = s.UserByName(c, "bob")
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "user not found")
	_, err = s.UserByID(c, u.ID+1000)
	wantKind(t, err, problem.NotFound)

	for _, bad := range []string{"", "-rf", "../../etc", "a\x00b", "a\nb", "a/b"} {
		wantKind(t, s.CreateUser(c, &store.User{Name: bad}), problem.Invalid)
	}

	// Update: every field, and a rename that keeps case-insensitive
	// uniqueness.
	bob := mkUser(t, s, "bob")
	u.Name, u.DisplayName, u.Email, u.PasswordHash, u.Active = "alice2", "A2", "a2@example.com", "", false
	ok(t, s.UpdateUser(c, u))
	got, err = s.UserByName(c, "ALICE2")
	ok(t, err)
	if *got != *u {
		t.Errorf("after update = %+v, want %+v", got, u)
	}
	if _, err := s.UserByName(c, "alice"); problem.KindOf(err) != problem.NotFound {
		t.Errorf("old name still found after rename: %v", err)
	}
	u.Name = "BOB"
	wantKind(t, s.UpdateUser(c, u), problem.Conflict)
	wantKind(t, s.UpdateUser(c, &store.User{ID: bob.ID + 1000, Name: "ghost"}), problem.NotFound)
	wantKind(t, s.UpdateUser(c, &store.User{ID: bob.ID, Name: "-x"}), problem.Invalid)

	n, err := s.CountUsers(c)
	ok(t, err)
	if n != 2 {
		t.Errorf("CountUsers = %d, want 2", n)
	}
	ok(t, s.DeleteUser(c, bob.ID))
	wantKind(t, s.DeleteUser(c, bob.ID), problem.NotFound)
	_, err = s.UserByID(c, bob.ID)
	wantKind(t, err, problem.NotFound)
	n, err = s.CountUsers(c)
	ok(t, err)
	if n != 1 {
		t.Errorf("CountUsers after delete = %d, want 1", n)
	}
	// A freed name can be taken again, by a new id.
	bob2 := mkUser(t, s, "Bob")
	if bob2.ID == bob.ID {
		t.Errorf("user id %d reused", bob.ID)
	}
}

func testUserList(t *testing.T, s store.Store) {
	c := ctx(t)
	var want []string
	for i := range 30 {
		name := fmt.Sprintf("user%02d", 29-i) // created in reverse order
		mkUser(t, s, name)
		want = append(want, fmt.Sprintf("user%02d", i))
	}
	ok(t, s.CreateUser(c, &store.User{Name: "zed_1", DisplayName: "Zed 100%", Email: "zed@example.com"}))

	all, err := s.ListUsers(c, "user", store.Page{Limit: 100})
	ok(t, err)
	wantNames(t, "all users", names(all, userName), want)

	first, err := s.ListUsers(c, "", store.Page{})
	ok(t, err)
	if len(first) != store.DefaultPageLimit {
		t.Fatalf("default page holds %d, want %d", len(first), store.DefaultPageLimit)
	}
	rest, err := s.ListUsers(c, "", store.Page{Start: 25, Limit: 10})
	ok(t, err)
	wantNames(t, "second page", names(rest, userName), append(want[25:], "zed_1"))

	neg, err := s.ListUsers(c, "", store.Page{Start: -5, Limit: -1})
	ok(t, err)
	wantNames(t, "negative page", names(neg, userName), want[:25])

	// Filters match name, display name and e-mail, case-insensitively,
	// and LIKE wildcards in the filter are literal.
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"USER1", want[10:20]},
		{"USER07@", []string{"user07"}}, // e-mail
		{"ZED 1", []string{"zed_1"}},    // display name
		{"%", []string{"zed_1"}},        // literal %
		{"_1", []string{"zed_1"}},       // literal _
		{"nobody-here", nil},
	} {
		got, err := s.ListUsers(c, tc.filter, store.Page{Limit: 100})
		ok(t, err)
		wantNames(t, "filter "+tc.filter, names(got, userName), tc.want)
	}
}

func testGroups(t *testing.T, s store.Store) {
	c := ctx(t)
	devs := mkGroup(t, s, "Developers")
	ops := mkGroup(t, s, "ops team")
	wantKind(t, s.CreateGroup(c, &store.Group{Name: "developers"}), problem.Conflict)
	wantKind(t, s.CreateGroup(c, &store.Group{Name: "../x"}), problem.Invalid)

	g, err := s.GroupByName(c, "DEVELOPERS")
	ok(t, err)
	if *g != *devs {
		t.Errorf("GroupByName = %+v, want %+v", g, devs)
	}
	_, err = s.GroupByName(c, "nope")
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "group not found")

	list, err := s.ListGroups(c, "", store.Page{})
	ok(t, err)
	wantNames(t, "groups", names(list, groupName), []string{"Developers", "ops team"})
	list, err = s.ListGroups(c, "TEAM", store.Page{})
	ok(t, err)
	wantNames(t, "groups filtered", names(list, groupName), []string{"ops team"})

	zoe, amy := mkUser(t, s, "zoe"), mkUser(t, s, "amy")
	ok(t, s.AddGroupMember(c, devs.ID, zoe.ID))
	ok(t, s.AddGroupMember(c, devs.ID, amy.ID))
	ok(t, s.AddGroupMember(c, devs.ID, amy.ID)) // twice is fine
	ok(t, s.AddGroupMember(c, ops.ID, amy.ID))
	wantKind(t, s.AddGroupMember(c, devs.ID, amy.ID+1000), problem.NotFound)
	wantKind(t, s.AddGroupMember(c, ops.ID+1000, amy.ID), problem.NotFound)

	members, err := s.GroupMembers(c, devs.ID)
	ok(t, err)
	wantNames(t, "members", names(members, userName), []string{"amy", "zoe"})
	groups, err := s.UserGroups(c, amy.ID)
	ok(t, err)
	wantNames(t, "amy's groups", names(groups, groupName), []string{"Developers", "ops team"})

	ok(t, s.RemoveGroupMember(c, devs.ID, zoe.ID))
	wantKind(t, s.RemoveGroupMember(c, devs.ID, zoe.ID), problem.NotFound)
	members, err = s.GroupMembers(c, devs.ID)
	ok(t, err)
	wantNames(t, "members after remove", names(members, userName), []string{"amy"})

	// Deleting a user or a group removes the memberships.
	ok(t, s.DeleteUser(c, amy.ID))
	members, err = s.GroupMembers(c, ops.ID)
	ok(t, err)
	wantNames(t, "members after user delete", names(members, userName), nil)
	ok(t, s.AddGroupMember(c, devs.ID, zoe.ID))
	ok(t, s.DeleteGroup(c, devs.ID))
	wantKind(t, s.DeleteGroup(c, devs.ID), problem.NotFound)
	groups, err = s.UserGroups(c, zoe.ID)
	ok(t, err)
	wantNames(t, "zoe's groups after group delete", names(groups, groupName), nil)
}

func testProjects(t *testing.T, s store.Store) {
	c := ctx(t)
	p := &store.Project{Key: "proj", Name: "Project", Description: "desc", Public: true}
	ok(t, s.CreateProject(c, p))
	if p.Key != "PROJ" || p.ID == 0 || p.CreatedAt.IsZero() {
		t.Fatalf("after create: %+v", p)
	}
	for _, key := range []string{"PROJ", "proj", "Proj"} {
		got, err := s.ProjectByKey(c, key)
		ok(t, err)
		if *got != *p {
			t.Errorf("ProjectByKey(%q) = %+v, want %+v", key, got, p)
		}
	}
	got, err := s.ProjectByID(c, p.ID)
	ok(t, err)
	if *got != *p {
		t.Errorf("ProjectByID = %+v, want %+v", got, p)
	}
	err = s.CreateProject(c, &store.Project{Key: "Proj", Name: "other"})
	wantKind(t, err, problem.Conflict)
	wantMessage(t, err, `"PROJ"`)
	for _, bad := range []store.Project{{Key: "1AB", Name: "x"}, {Key: "A-B", Name: "x"}, {Key: "", Name: "x"}, {Key: "AB", Name: ""}} {
		wantKind(t, s.CreateProject(c, &bad), problem.Invalid)
	}
	_, err = s.ProjectByKey(c, "NOPE")
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "project not found")
	_, err = s.ProjectByID(c, p.ID+1000)
	wantKind(t, err, problem.NotFound)

	mkProject(t, s, "ZED")
	mkProject(t, s, "ABC")
	list, err := s.ListProjects(c, "", store.Page{})
	ok(t, err)
	wantNames(t, "projects", names(list, projectKey), []string{"ABC", "PROJ", "ZED"})
	list, err = s.ListProjects(c, "project z", store.Page{}) // matches the name "Project ZED"
	ok(t, err)
	wantNames(t, "projects filtered", names(list, projectKey), []string{"ZED"})
	list, err = s.ListProjects(c, "", store.Page{Start: 1, Limit: 1})
	ok(t, err)
	wantNames(t, "projects page", names(list, projectKey), []string{"PROJ"})

	p.Key, p.Name, p.Description, p.Public = "newkey", "Renamed", "", false
	ok(t, s.UpdateProject(c, p))
	got, err = s.ProjectByKey(c, "NEWKEY")
	ok(t, err)
	if *got != *p || p.Key != "NEWKEY" {
		t.Errorf("after update = %+v, want %+v", got, p)
	}
	p.Key = "zed"
	wantKind(t, s.UpdateProject(c, p), problem.Conflict)
	wantKind(t, s.UpdateProject(c, &store.Project{ID: p.ID + 1000, Key: "GHOST", Name: "g"}), problem.NotFound)

	// Only an empty project can be deleted.
	mkRepo(t, s, got, "repo")
	err = s.DeleteProject(c, got.ID)
	wantKind(t, err, problem.Conflict)
	wantMessage(t, err, "project has repositories")
	r, err := s.RepoBySlug(c, "NEWKEY", "repo")
	ok(t, err)
	ok(t, s.DeleteRepo(c, r.ID))
	ok(t, s.DeleteProject(c, got.ID))
	wantKind(t, s.DeleteProject(c, got.ID), problem.NotFound)
	_, err = s.ProjectByKey(c, "NEWKEY")
	wantKind(t, err, problem.NotFound)
}

func testRepos(t *testing.T, s store.Store) {
	c := ctx(t)
	p, q := mkProject(t, s, "PROJ"), mkProject(t, s, "OTHER")
	r := &store.Repository{ProjectID: p.ID, Name: "My Repo", Description: "d", Public: true}
	ok(t, s.CreateRepo(c, r))
	if r.ID == 0 || r.Slug != "my-repo" || r.ProjectKey != "PROJ" || r.DefaultBranch != "main" || r.CreatedAt.IsZero() {
		t.Fatalf("after create: %+v", r)
	}
	if !r.PushedAt.IsZero() || r.ForkOf != 0 {
		t.Errorf("new repo: PushedAt %v ForkOf %d", r.PushedAt, r.ForkOf)
	}
	for _, k := range [][2]string{{"PROJ", "my-repo"}, {"proj", "MY-REPO"}} {
		got, err := s.RepoBySlug(c, k[0], k[1])
		ok(t, err)
		if *got != *r {
			t.Errorf("RepoBySlug(%q, %q) = %+v, want %+v", k[0], k[1], got, r)
		}
	}
	got, err := s.RepoByID(c, r.ID)
	ok(t, err)
	if *got != *r {
		t.Errorf("RepoByID = %+v, want %+v", got, r)
	}

	err = s.CreateRepo(c, &store.Repository{ProjectID: p.ID, Name: "my repo"})
	wantKind(t, err, problem.Conflict)
	wantMessage(t, err, `a repository named "my-repo" already exists in project "PROJ"`)
	// The same slug in another project is fine.
	ok(t, s.CreateRepo(c, &store.Repository{ProjectID: q.ID, Name: "My Repo"}))

	explicit := &store.Repository{ProjectID: p.ID, Name: "Explicit", Slug: "exp.lib", DefaultBranch: "trunk"}
	ok(t, s.CreateRepo(c, explicit))
	if explicit.Slug != "exp.lib" || explicit.DefaultBranch != "trunk" {
		t.Errorf("explicit slug/branch: %+v", explicit)
	}

	for _, bad := range []store.Repository{
		{ProjectID: p.ID, Name: ""},
		{ProjectID: p.ID, Name: "../../etc"},
		{ProjectID: p.ID, Name: "-rf"},
		{ProjectID: p.ID, Name: "ok", Slug: "x.git"},
		{ProjectID: p.ID, Name: "ok", Slug: "UPPER"},
		{ProjectID: p.ID, Name: "ok", DefaultBranch: "-x"},
		{ProjectID: p.ID, Name: "ok", DefaultBranch: "a..b"},
	} {
		wantKind(t, s.CreateRepo(c, &bad), problem.Invalid)
	}
	err = s.CreateRepo(c, &store.Repository{ProjectID: p.ID + 1000, Name: "x"})
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "project not found")

	_, err = s.RepoBySlug(c, "PROJ", "missing")
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "repository not found")
	_, err = s.RepoBySlug(c, "MISSING", "my-repo")
	wantKind(t, err, problem.NotFound)
	_, err = s.RepoByID(c, r.ID+1000)
	wantKind(t, err, problem.NotFound)

	// Update renames (new slug), changes fields and can move projects.
	r.Name, r.Slug, r.Description, r.Public, r.DefaultBranch = "Renamed", "renamed", "", false, "develop"
	ok(t, s.UpdateRepo(c, r))
	got, err = s.RepoBySlug(c, "PROJ", "renamed")
	ok(t, err)
	if *got != *r {
		t.Errorf("after update = %+v, want %+v", got, r)
	}
	r.Slug = "exp.lib"
	err = s.UpdateRepo(c, r)
	wantKind(t, err, problem.Conflict)
	wantMessage(t, err, `"exp.lib"`)
	r.Slug, r.ProjectID = "renamed", q.ID
	ok(t, s.UpdateRepo(c, r))
	if r.ProjectKey != "OTHER" {
		t.Errorf("ProjectKey after move = %q", r.ProjectKey)
	}
	if _, err := s.RepoBySlug(c, "OTHER", "renamed"); err != nil {
		t.Errorf("moved repo not found in new project: %v", err)
	}
	wantKind(t, s.UpdateRepo(c, &store.Repository{ID: r.ID + 1000, ProjectID: p.ID, Name: "ghost"}), problem.NotFound)

	ok(t, s.DeleteRepo(c, r.ID))
	wantKind(t, s.DeleteRepo(c, r.ID), problem.NotFound)
	_, err = s.RepoByID(c, r.ID)
	wantKind(t, err, problem.NotFound)
	// Ids are not reused: on-disk locations derive from them.
	again := mkRepo(t, s, p, "again")
	if again.ID <= r.ID {
		t.Errorf("new repo id %d not above deleted %d", again.ID, r.ID)
	}
}

func testRepoList(t *testing.T, s store.Store) {
	c := ctx(t)
	a, b := mkProject(t, s, "BBB"), mkProject(t, s, "AAA")
	for _, n := range []string{"zeta", "Alpha", "mid"} {
		mkRepo(t, s, a, n)
	}
	mkRepo(t, s, b, "Other Alpha")

	list, err := s.ListRepos(c, a.ID, store.Page{})
	ok(t, err)
	wantNames(t, "repos", names(list, repoSlug), []string{"BBB/alpha", "BBB/mid", "BBB/zeta"})
	list, err = s.ListRepos(c, a.ID, store.Page{Start: 1, Limit: 1})
	ok(t, err)
	wantNames(t, "repos page", names(list, repoSlug), []string{"BBB/mid"})
	list, err = s.ListRepos(c, a.ID+1000, store.Page{})
	ok(t, err)
	wantNames(t, "repos of missing project", names(list, repoSlug), nil)

	all, err := s.ListAllRepos(c, "", store.Page{})
	ok(t, err)
	wantNames(t, "all repos", names(all, repoSlug), []string{"AAA/other-alpha", "BBB/alpha", "BBB/mid", "BBB/zeta"})
	all, err = s.ListAllRepos(c, "ALPHA", store.Page{})
	ok(t, err)
	wantNames(t, "all repos filtered", names(all, repoSlug), []string{"AAA/other-alpha", "BBB/alpha"})
}

func testForks(t *testing.T, s store.Store) {
	c := ctx(t)
	p := mkProject(t, s, "P")
	parent := mkRepo(t, s, p, "parent")
	fork := &store.Repository{ProjectID: p.ID, Name: "fork", ForkOf: parent.ID}
	ok(t, s.CreateRepo(c, fork))
	got, err := s.RepoByID(c, fork.ID)
	ok(t, err)
	if got.ForkOf != parent.ID {
		t.Fatalf("ForkOf = %d, want %d", got.ForkOf, parent.ID)
	}
	err = s.CreateRepo(c, &store.Repository{ProjectID: p.ID, Name: "orphan", ForkOf: parent.ID + 1000})
	wantKind(t, err, problem.NotFound)
	ok(t, s.CreateRepo(c, &store.Repository{ProjectID: p.ID, Name: "fork2", ForkOf: parent.ID}))
	for id, want := range map[int64]int{parent.ID: 2, fork.ID: 0} {
		if n, err := s.CountForks(c, id); err != nil || n != want {
			t.Errorf("CountForks(%d) = %d, %v; want %d", id, n, err, want)
		}
	}

	// Deleting the origin leaves the fork standing, no longer a fork.
	ok(t, s.DeleteRepo(c, parent.ID))
	got, err = s.RepoByID(c, fork.ID)
	ok(t, err)
	if got.ForkOf != 0 {
		t.Errorf("ForkOf after origin deleted = %d, want 0", got.ForkOf)
	}
}

func grantKeys(gs []store.Grant) []string {
	return names(gs, func(g store.Grant) string {
		if g.UserID != 0 {
			return fmt.Sprintf("user:%s=%s", g.UserName, g.Permission)
		}
		return fmt.Sprintf("group:%s=%s", g.GroupName, g.Permission)
	})
}

func testGlobalGrants(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe, amy := mkUser(t, s, "zoe"), mkUser(t, s, "amy")
	admins := mkGroup(t, s, "admins")

	ok(t, s.SetGlobalPermission(c, store.Grant{UserID: zoe.ID, Permission: store.PermProjectCreate}))
	ok(t, s.SetGlobalPermission(c, store.Grant{UserID: amy.ID, Permission: store.PermAdmin}))
	ok(t, s.SetGlobalPermission(c, store.Grant{GroupID: admins.ID, Permission: store.PermSysAdmin}))
	// Set replaces: one grant per grantee.
	ok(t, s.SetGlobalPermission(c, store.Grant{UserID: zoe.ID, Permission: store.PermAdmin}))

	gs, err := s.GlobalGrants(c)
	ok(t, err)
	wantNames(t, "global grants", grantKeys(gs), []string{"user:amy=ADMIN", "user:zoe=ADMIN", "group:admins=SYS_ADMIN"})
	for _, g := range gs {
		if (g.UserID == 0) == (g.GroupID == 0) {
			t.Errorf("grant %+v: want exactly one grantee id", g)
		}
	}

	for _, bad := range []store.Grant{
		{Permission: store.PermAdmin},
		{UserID: zoe.ID, GroupID: admins.ID, Permission: store.PermAdmin},
		{UserID: zoe.ID, Permission: store.PermRepoRead},
		{UserID: zoe.ID, Permission: "BOGUS"},
	} {
		wantKind(t, s.SetGlobalPermission(c, bad), problem.Invalid)
	}
	err = s.SetGlobalPermission(c, store.Grant{UserID: zoe.ID + 1000, Permission: store.PermAdmin})
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "user not found")
	err = s.SetGlobalPermission(c, store.Grant{GroupID: admins.ID + 1000, Permission: store.PermAdmin})
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "group not found")

	ok(t, s.RevokeGlobalPermission(c, zoe.ID, 0))
	ok(t, s.RevokeGlobalPermission(c, zoe.ID, 0)) // nothing left: still fine
	ok(t, s.RevokeGlobalPermission(c, 0, admins.ID))
	wantKind(t, s.RevokeGlobalPermission(c, 0, 0), problem.Invalid)
	gs, err = s.GlobalGrants(c)
	ok(t, err)
	wantNames(t, "global grants after revoke", grantKeys(gs), []string{"user:amy=ADMIN"})
}

func testProjectAndRepoGrants(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe := mkUser(t, s, "zoe")
	devs := mkGroup(t, s, "devs")
	p, q := mkProject(t, s, "P"), mkProject(t, s, "Q")
	r := mkRepo(t, s, p, "r")

	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{GroupID: devs.ID, Permission: store.PermProjectWrite}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectAdmin}))
	ok(t, s.SetProjectPermission(c, q.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead}))
	wantKind(t, s.SetProjectPermission(c, p.ID, store.Grant{UserID: zoe.ID, Permission: store.PermRepoRead}), problem.Invalid)
	err := s.SetProjectPermission(c, p.ID+1000, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead})
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "project not found")

	gs, err := s.ProjectGrants(c, p.ID)
	ok(t, err)
	wantNames(t, "project grants", grantKeys(gs), []string{"user:zoe=PROJECT_ADMIN", "group:devs=PROJECT_WRITE"})
	gs, err = s.ProjectGrants(c, q.ID)
	ok(t, err)
	wantNames(t, "other project grants", grantKeys(gs), []string{"user:zoe=PROJECT_READ"})

	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{GroupID: devs.ID, Permission: store.PermRepoRead}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{GroupID: devs.ID, Permission: store.PermRepoWrite}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: zoe.ID, Permission: store.PermRepoAdmin}))
	wantKind(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead}), problem.Invalid)
	err = s.SetRepoPermission(c, r.ID+1000, store.Grant{UserID: zoe.ID, Permission: store.PermRepoRead})
	wantKind(t, err, problem.NotFound)
	wantMessage(t, err, "repository not found")
	gs, err = s.RepoGrants(c, r.ID)
	ok(t, err)
	wantNames(t, "repo grants", grantKeys(gs), []string{"user:zoe=REPO_ADMIN", "group:devs=REPO_WRITE"})

	ok(t, s.RevokeProjectPermission(c, p.ID, 0, devs.ID))
	ok(t, s.RevokeRepoPermission(c, r.ID, zoe.ID, 0))
	wantKind(t, s.RevokeRepoPermission(c, r.ID, zoe.ID, devs.ID), problem.Invalid)
	gs, err = s.ProjectGrants(c, p.ID)
	ok(t, err)
	wantNames(t, "project grants after revoke", grantKeys(gs), []string{"user:zoe=PROJECT_ADMIN"})
	gs, err = s.RepoGrants(c, r.ID)
	ok(t, err)
	wantNames(t, "repo grants after revoke", grantKeys(gs), []string{"group:devs=REPO_WRITE"})
}

func perms(ps []store.Permission) []string {
	return names(ps, func(p store.Permission) string { return string(p) })
}

func testEffectiveGrants(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe, amy := mkUser(t, s, "zoe"), mkUser(t, s, "amy")
	devs, leads := mkGroup(t, s, "devs"), mkGroup(t, s, "leads")
	ok(t, s.AddGroupMember(c, devs.ID, zoe.ID))
	ok(t, s.AddGroupMember(c, leads.ID, zoe.ID))
	p, q := mkProject(t, s, "P"), mkProject(t, s, "Q")
	r, r2 := mkRepo(t, s, p, "r"), mkRepo(t, s, p, "r2")

	// Direct and through two groups, at every level; plus grants on other
	// resources and for another user that must not show.
	ok(t, s.SetGlobalPermission(c, store.Grant{UserID: zoe.ID, Permission: store.PermProjectCreate}))
	ok(t, s.SetGlobalPermission(c, store.Grant{GroupID: leads.ID, Permission: store.PermAdmin}))
	ok(t, s.SetGlobalPermission(c, store.Grant{GroupID: devs.ID, Permission: store.PermProjectCreate}))
	ok(t, s.SetGlobalPermission(c, store.Grant{UserID: amy.ID, Permission: store.PermSysAdmin}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{GroupID: devs.ID, Permission: store.PermProjectWrite}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead}))
	ok(t, s.SetProjectPermission(c, q.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectAdmin}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{GroupID: leads.ID, Permission: store.PermRepoAdmin}))
	ok(t, s.SetRepoPermission(c, r2.ID, store.Grant{UserID: zoe.ID, Permission: store.PermRepoWrite}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: amy.ID, Permission: store.PermRepoRead}))

	g, pr, rp, err := s.EffectiveGrants(c, zoe.ID, p.ID, r.ID)
	ok(t, err)
	wantNames(t, "global", perms(g), []string{"ADMIN", "PROJECT_CREATE"}) // PROJECT_CREATE twice, once listed
	wantNames(t, "project", perms(pr), []string{"PROJECT_READ", "PROJECT_WRITE"})
	wantNames(t, "repo", perms(rp), []string{"REPO_ADMIN"})

	g, pr, rp, err = s.EffectiveGrants(c, zoe.ID, q.ID, r2.ID)
	ok(t, err)
	wantNames(t, "global (q)", perms(g), []string{"ADMIN", "PROJECT_CREATE"})
	wantNames(t, "project (q)", perms(pr), []string{"PROJECT_ADMIN"})
	wantNames(t, "repo (r2)", perms(rp), []string{"REPO_WRITE"})

	// Global only.
	g, pr, rp, err = s.EffectiveGrants(c, zoe.ID, 0, 0)
	ok(t, err)
	wantNames(t, "global only", perms(g), []string{"ADMIN", "PROJECT_CREATE"})
	if len(pr) != 0 || len(rp) != 0 {
		t.Errorf("project/repo grants without ids: %v %v", pr, rp)
	}

	// Leaving a group takes its grants away at once.
	ok(t, s.RemoveGroupMember(c, leads.ID, zoe.ID))
	g, _, rp, err = s.EffectiveGrants(c, zoe.ID, p.ID, r.ID)
	ok(t, err)
	wantNames(t, "global after leaving leads", perms(g), []string{"PROJECT_CREATE"})
	wantNames(t, "repo after leaving leads", perms(rp), nil)

	g, pr, rp, err = s.EffectiveGrants(c, amy.ID, p.ID, r.ID)
	ok(t, err)
	wantNames(t, "amy global", perms(g), []string{"SYS_ADMIN"})
	wantNames(t, "amy project", perms(pr), nil)
	wantNames(t, "amy repo", perms(rp), []string{"REPO_READ"})

	// Anonymous (0) and unknown users hold nothing.
	for _, id := range []int64{0, amy.ID + 1000} {
		g, pr, rp, err = s.EffectiveGrants(c, id, p.ID, r.ID)
		ok(t, err)
		if len(g)+len(pr)+len(rp) != 0 {
			t.Errorf("user %d: got %v %v %v, want nothing", id, g, pr, rp)
		}
	}
}

func testGrantCascades(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe := mkUser(t, s, "zoe")
	devs := mkGroup(t, s, "devs")
	p := mkProject(t, s, "P")
	r := mkRepo(t, s, p, "r")
	ok(t, s.SetGlobalPermission(c, store.Grant{GroupID: devs.ID, Permission: store.PermAdmin}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{GroupID: devs.ID, Permission: store.PermProjectRead}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: zoe.ID, Permission: store.PermRepoRead}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead}))

	ok(t, s.DeleteGroup(c, devs.ID))
	gs, err := s.GlobalGrants(c)
	ok(t, err)
	wantNames(t, "global after group delete", grantKeys(gs), nil)
	gs, err = s.ProjectGrants(c, p.ID)
	ok(t, err)
	wantNames(t, "project after group delete", grantKeys(gs), []string{"user:zoe=PROJECT_READ"})

	ok(t, s.DeleteRepo(c, r.ID))
	gs, err = s.RepoGrants(c, r.ID)
	ok(t, err)
	wantNames(t, "repo grants after repo delete", grantKeys(gs), nil)

	ok(t, s.DeleteProject(c, p.ID))
	gs, err = s.ProjectGrants(c, p.ID)
	ok(t, err)
	wantNames(t, "project grants after project delete", grantKeys(gs), nil)
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func testTokens(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe, amy := mkUser(t, s, "zoe"), mkUser(t, s, "amy")
	exp := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.FixedZone("X", 3600))
	t1 := &store.Token{UserID: zoe.ID, Name: "ci", Hash: hash("secret1"), Scope: store.ScopeWrite, ExpiresAt: &exp}
	ok(t, s.CreateToken(c, t1))
	if t1.ID == 0 || t1.CreatedAt.IsZero() {
		t.Fatalf("after create: %+v", t1)
	}
	t2 := &store.Token{UserID: zoe.ID, Name: "read", Hash: hash("secret2"), Scope: store.ScopeRead}
	ok(t, s.CreateToken(c, t2))
	ok(t, s.CreateToken(c, &store.Token{UserID: amy.ID, Name: "amy", Hash: hash("secret3"), Scope: store.ScopeAdmin}))

	err := s.CreateToken(c, &store.Token{UserID: amy.ID, Name: "dup", Hash: hash("secret1"), Scope: store.ScopeRead})
	wantKind(t, err, problem.Conflict)
	wantKind(t, s.CreateToken(c, &store.Token{UserID: amy.ID + 1000, Name: "x", Hash: hash("x"), Scope: store.ScopeRead}), problem.NotFound)
	wantKind(t, s.CreateToken(c, &store.Token{UserID: amy.ID, Name: "x", Hash: hash("y"), Scope: "everything"}), problem.Invalid)
	wantKind(t, s.CreateToken(c, &store.Token{UserID: amy.ID, Name: "x", Scope: store.ScopeRead}), problem.Invalid)

	got, err := s.TokenByHash(c, hash("secret1"))
	ok(t, err)
	if got.ID != t1.ID || got.UserID != zoe.ID || got.Name != "ci" || got.Scope != store.ScopeWrite ||
		string(got.Hash) != string(t1.Hash) || !got.CreatedAt.Equal(t1.CreatedAt) {
		t.Errorf("TokenByHash = %+v, want %+v", got, t1)
	}
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || got.ExpiresAt.Location() != time.UTC {
		t.Errorf("ExpiresAt = %v, want %v in UTC", got.ExpiresAt, exp)
	}
	if got.LastUsedAt != nil || got.RevokedAt != nil {
		t.Errorf("new token used/revoked: %+v", got)
	}
	_, err = s.TokenByHash(c, hash("nope"))
	wantKind(t, err, problem.NotFound)

	list, err := s.ListTokens(c, zoe.ID)
	ok(t, err)
	wantNames(t, "tokens", names(list, func(t store.Token) string { return t.Name }), []string{"ci", "read"})

	used := time.Now().Add(-time.Minute)
	ok(t, s.TouchToken(c, t2.ID, used))
	wantKind(t, s.TouchToken(c, t2.ID+1000, used), problem.NotFound)
	got, err = s.TokenByHash(c, hash("secret2"))
	ok(t, err)
	if got.LastUsedAt == nil || got.LastUsedAt.Sub(used).Abs() > time.Millisecond {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, used)
	}

	// Revoking: only by the owner; twice keeps the first time.
	wantKind(t, s.RevokeToken(c, amy.ID, t2.ID), problem.NotFound)
	ok(t, s.RevokeToken(c, zoe.ID, t2.ID))
	got, err = s.TokenByHash(c, hash("secret2"))
	ok(t, err)
	if got.RevokedAt == nil {
		t.Fatal("RevokedAt not set")
	}
	first := *got.RevokedAt
	time.Sleep(2 * time.Millisecond)
	ok(t, s.RevokeToken(c, zoe.ID, t2.ID))
	got, err = s.TokenByHash(c, hash("secret2"))
	ok(t, err)
	if !got.RevokedAt.Equal(first) {
		t.Errorf("second revoke moved RevokedAt from %v to %v", first, got.RevokedAt)
	}
	wantKind(t, s.RevokeToken(c, zoe.ID, t2.ID+1000), problem.NotFound)
}

func testSSHKeys(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe := mkUser(t, s, "zoe")
	p := mkProject(t, s, "P")
	r := mkRepo(t, s, p, "r")

	k1 := &store.SSHKey{UserID: zoe.ID, Label: "laptop", PublicKey: "ssh-ed25519 AAAA1 zoe@laptop", Fingerprint: "SHA256:one"}
	ok(t, s.AddSSHKey(c, k1))
	k2 := &store.SSHKey{UserID: zoe.ID, Label: "desktop", PublicKey: "ssh-ed25519 AAAA2", Fingerprint: "SHA256:two"}
	ok(t, s.AddSSHKey(c, k2))
	ak := &store.SSHKey{RepoID: r.ID, Scope: store.ScopeRead, Label: "deploy", PublicKey: "ssh-ed25519 AAAA3", Fingerprint: "SHA256:three"}
	ok(t, s.AddSSHKey(c, ak))
	if k1.ID == 0 || k1.CreatedAt.IsZero() {
		t.Fatalf("after add: %+v", k1)
	}

	// A fingerprint names one principal, user or repository.
	err := s.AddSSHKey(c, &store.SSHKey{RepoID: r.ID, Scope: store.ScopeWrite, PublicKey: "ssh-ed25519 AAAA1", Fingerprint: "SHA256:one"})
	wantKind(t, err, problem.Conflict)
	for _, bad := range []store.SSHKey{
		{PublicKey: "k", Fingerprint: "f1"},
		{UserID: zoe.ID, RepoID: r.ID, PublicKey: "k", Fingerprint: "f2"},
		{RepoID: r.ID, Scope: store.ScopeAdmin, PublicKey: "k", Fingerprint: "f3"},
		{RepoID: r.ID, PublicKey: "k", Fingerprint: "f4"},
		{UserID: zoe.ID, Scope: store.ScopeRead, PublicKey: "k", Fingerprint: "f5"},
		{UserID: zoe.ID, PublicKey: "k\nssh-rsa evil", Fingerprint: "f6"},
		{UserID: zoe.ID, PublicKey: "", Fingerprint: "f7"},
	} {
		wantKind(t, s.AddSSHKey(c, &bad), problem.Invalid)
	}
	wantKind(t, s.AddSSHKey(c, &store.SSHKey{UserID: zoe.ID + 1000, PublicKey: "k", Fingerprint: "f8"}), problem.NotFound)
	wantKind(t, s.AddSSHKey(c, &store.SSHKey{RepoID: r.ID + 1000, Scope: store.ScopeRead, PublicKey: "k", Fingerprint: "f9"}), problem.NotFound)

	got, err := s.SSHKeyByFingerprint(c, "SHA256:one")
	ok(t, err)
	if *got != *k1 {
		t.Errorf("SSHKeyByFingerprint = %+v, want %+v", got, k1)
	}
	got, err = s.SSHKeyByFingerprint(c, "SHA256:three")
	ok(t, err)
	if *got != *ak {
		t.Errorf("access key = %+v, want %+v", got, ak)
	}
	_, err = s.SSHKeyByFingerprint(c, "SHA256:none")
	wantKind(t, err, problem.NotFound)

	label := func(k store.SSHKey) string { return k.Label }
	list, err := s.ListSSHKeys(c, zoe.ID)
	ok(t, err)
	wantNames(t, "user keys", names(list, label), []string{"laptop", "desktop"})
	list, err = s.ListAccessKeys(c, r.ID)
	ok(t, err)
	wantNames(t, "access keys", names(list, label), []string{"deploy"})

	at := time.Now().Add(-time.Hour)
	ok(t, s.TouchSSHKey(c, k2.ID, at))
	wantKind(t, s.TouchSSHKey(c, k2.ID+1000, at), problem.NotFound)
	got, err = s.SSHKeyByFingerprint(c, "SHA256:two")
	ok(t, err)
	if got.LastUsedAt == nil || got.LastUsedAt.Sub(at).Abs() > time.Millisecond || got.LastUsedAt.Location() != time.UTC {
		t.Errorf("LastUsedAt = %v, want %v UTC", got.LastUsedAt, at)
	}

	ok(t, s.DeleteSSHKey(c, k1.ID))
	wantKind(t, s.DeleteSSHKey(c, k1.ID), problem.NotFound)
	_, err = s.SSHKeyByFingerprint(c, "SHA256:one")
	wantKind(t, err, problem.NotFound)

	// Deleting the repository removes its access keys.
	ok(t, s.DeleteRepo(c, r.ID))
	_, err = s.SSHKeyByFingerprint(c, "SHA256:three")
	wantKind(t, err, problem.NotFound)
}

func testUserCascade(t *testing.T, s store.Store) {
	c := ctx(t)
	zoe, amy := mkUser(t, s, "zoe"), mkUser(t, s, "amy")
	devs := mkGroup(t, s, "devs")
	p := mkProject(t, s, "P")
	r := mkRepo(t, s, p, "r")
	ok(t, s.AddGroupMember(c, devs.ID, zoe.ID))
	ok(t, s.CreateToken(c, &store.Token{UserID: zoe.ID, Name: "t", Hash: hash("zoe"), Scope: store.ScopeRead}))
	ok(t, s.CreateToken(c, &store.Token{UserID: amy.ID, Name: "t", Hash: hash("amy"), Scope: store.ScopeRead}))
	ok(t, s.AddSSHKey(c, &store.SSHKey{UserID: zoe.ID, PublicKey: "k", Fingerprint: "SHA256:zoe"}))
	ok(t, s.SetGlobalPermission(c, store.Grant{UserID: zoe.ID, Permission: store.PermAdmin}))
	ok(t, s.SetProjectPermission(c, p.ID, store.Grant{UserID: zoe.ID, Permission: store.PermProjectRead}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: zoe.ID, Permission: store.PermRepoRead}))
	ok(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: amy.ID, Permission: store.PermRepoRead}))

	ok(t, s.DeleteUser(c, zoe.ID))
	_, err := s.TokenByHash(c, hash("zoe"))
	wantKind(t, err, problem.NotFound)
	_, err = s.SSHKeyByFingerprint(c, "SHA256:zoe")
	wantKind(t, err, problem.NotFound)
	members, err := s.GroupMembers(c, devs.ID)
	ok(t, err)
	if len(members) != 0 {
		t.Errorf("members after delete: %v", members)
	}
	gs, err := s.GlobalGrants(c)
	ok(t, err)
	wantNames(t, "global", grantKeys(gs), nil)
	gs, err = s.ProjectGrants(c, p.ID)
	ok(t, err)
	wantNames(t, "project", grantKeys(gs), nil)
	gs, err = s.RepoGrants(c, r.ID)
	ok(t, err)
	wantNames(t, "repo", grantKeys(gs), []string{"user:amy=REPO_READ"})
	// Another user's things stay.
	if _, err := s.TokenByHash(c, hash("amy")); err != nil {
		t.Errorf("amy's token gone: %v", err)
	}
}

func state(t *testing.T, s store.Store, repoID int64) store.RepoState {
	t.Helper()
	st, err := s.RepoState(ctx(t), repoID)
	ok(t, err)
	return st
}

func testRefTxns(t *testing.T, s store.Store) {
	c := ctx(t)
	p := mkProject(t, s, "P")
	r, other := mkRepo(t, s, p, "r"), mkRepo(t, s, p, "other")

	if st := state(t, s, r.ID); st != (store.RepoState{}) {
		t.Fatalf("new repo state = %+v, want zero", st)
	}
	_, err := s.RepoState(c, r.ID+1000)
	wantKind(t, err, problem.NotFound)

	id1, err := s.BeginRefTxn(c, r.ID, "node-a", "inst-a", "0000 1111 refs/heads/main\n")
	ok(t, err)
	if st := state(t, s, r.ID); st != (store.RepoState{Generation: 1, Pending: 1}) {
		t.Fatalf("after begin: %+v", st)
	}
	id2, err := s.BeginRefTxn(c, r.ID, "node-b", "inst-b", "1111 2222 refs/heads/dev\n")
	ok(t, err)
	id3, err := s.BeginRefTxn(c, other.ID, "node-a", "inst-a", "x")
	ok(t, err)
	if id1 == id2 || id2 == id3 {
		t.Fatalf("txn ids not distinct: %d %d %d", id1, id2, id3)
	}
	if st := state(t, s, r.ID); st != (store.RepoState{Generation: 2, Pending: 2}) {
		t.Fatalf("after second begin: %+v", st)
	}
	_, err = s.BeginRefTxn(c, r.ID+1000, "node-a", "inst-a", "x")
	wantKind(t, err, problem.NotFound)

	pending, err := s.PendingRefTxns(c, "node-a")
	ok(t, err)
	if len(pending) != 2 || pending[0].ID != id1 || pending[1].ID != id3 {
		t.Fatalf("pending for node-a = %+v", pending)
	}
	if pending[0].RepoID != r.ID || pending[0].NodeID != "node-a" || pending[0].Updates != "0000 1111 refs/heads/main\n" ||
		pending[0].CreatedAt.IsZero() || pending[0].CreatedAt.Location() != time.UTC {
		t.Errorf("pending[0] = %+v", pending[0])
	}
	all, err := s.PendingRefTxns(c, "")
	ok(t, err)
	if len(all) != 3 {
		t.Fatalf("all pending = %d, want 3 (the failed begin must leave none)", len(all))
	}
	if pending[0].Instance != "inst-a" || pending[0].ClaimedBy != "" {
		t.Errorf("pending[0] owner = %q, claimed by %q", pending[0].Instance, pending[0].ClaimedBy)
	}

	// Reconcilers lease an abandoned transaction: one at a time, the
	// holder again, anyone once the lease ran out, nobody once it ended.
	claim := func(id int64, who string, lease time.Duration, want bool) {
		t.Helper()
		got, err := s.ClaimRefTxn(c, id, who, lease)
		ok(t, err)
		if got != want {
			t.Errorf("ClaimRefTxn(%d, %q, %v) = %v, want %v", id, who, lease, got, want)
		}
	}
	claim(id3, "node-x", time.Hour, true)
	claim(id3, "node-y", time.Hour, false)
	claim(id3, "node-x", time.Hour, true)
	claim(id3, "node-y", -time.Second, true)
	claim(id3, "node-x", time.Hour, false)
	pending, err = s.PendingRefTxns(c, "node-a")
	ok(t, err)
	if pending[1].ID != id3 || pending[1].ClaimedBy != "node-y" {
		t.Errorf("claimed txn = %+v, want claimed by node-y", pending[1])
	}
	claim(id3+1000, "node-x", time.Hour, false)
	_, err = s.ClaimRefTxn(c, id3, "", time.Hour)
	wantKind(t, err, problem.Invalid)

	// Aborted: generation moves, pushed_at does not.
	ok(t, s.EndRefTxn(c, id2, false))
	if st := state(t, s, r.ID); st != (store.RepoState{Generation: 3, Pending: 1}) {
		t.Fatalf("after abort: %+v", st)
	}
	got, err := s.RepoByID(c, r.ID)
	ok(t, err)
	if !got.PushedAt.IsZero() {
		t.Errorf("PushedAt set by an aborted txn: %v", got.PushedAt)
	}

	// Committed: generation moves and pushed_at is stamped.
	before := time.Now().Add(-time.Second)
	ok(t, s.EndRefTxn(c, id1, true))
	if st := state(t, s, r.ID); st != (store.RepoState{Generation: 4, Pending: 0}) {
		t.Fatalf("after commit: %+v", st)
	}
	got, err = s.RepoByID(c, r.ID)
	ok(t, err)
	if got.PushedAt.Before(before) || got.PushedAt.Location() != time.UTC {
		t.Errorf("PushedAt = %v, want about now, UTC", got.PushedAt)
	}
	err = s.EndRefTxn(c, id1, true)
	wantKind(t, err, problem.NotFound)
	if st := state(t, s, r.ID); st.Generation != 4 {
		t.Errorf("failed end moved generation to %d", st.Generation)
	}

	ok(t, s.BumpGeneration(c, r.ID))
	if st := state(t, s, r.ID); st != (store.RepoState{Generation: 5}) {
		t.Fatalf("after bump: %+v", st)
	}
	wantKind(t, s.BumpGeneration(c, r.ID+1000), problem.NotFound)
	// Other repositories are untouched.
	if st := state(t, s, other.ID); st != (store.RepoState{Generation: 1, Pending: 1}) {
		t.Errorf("other repo state = %+v", st)
	}

	// Deleting a repository drops its pending transactions.
	ok(t, s.DeleteRepo(c, other.ID))
	all, err = s.PendingRefTxns(c, "")
	ok(t, err)
	if len(all) != 0 {
		t.Errorf("pending after repo delete: %+v", all)
	}
}

func testConcurrentBumps(t *testing.T, s store.Store) {
	c := ctx(t)
	r := mkRepo(t, s, mkProject(t, s, "P"), "r")
	const workers, rounds = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for range workers {
		wg.Go(func() {
			for range rounds {
				errs <- s.BumpGeneration(c, r.ID)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		ok(t, err)
	}
	if st := state(t, s, r.ID); st.Generation != workers*rounds {
		t.Fatalf("generation = %d after %d concurrent bumps", st.Generation, workers*rounds)
	}
}

// testConcurrentRefTxns interleaves begin/end from several goroutines with
// readers that check the generation never goes backwards.
func testConcurrentRefTxns(t *testing.T, s store.Store) {
	c := ctx(t)
	r := mkRepo(t, s, mkProject(t, s, "P"), "r")
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	done := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			id, err := s.BeginRefTxn(c, r.ID, fmt.Sprintf("node-%d", i), "i", "u")
			if err != nil {
				errs <- err
				return
			}
			errs <- s.EndRefTxn(c, id, i%2 == 0)
		})
	}
	var readerErr error
	var rwg sync.WaitGroup
	rwg.Go(func() {
		var last int64
		for {
			select {
			case <-done:
				return
			default:
			}
			st, err := s.RepoState(c, r.ID)
			if err != nil {
				readerErr = err
				return
			}
			if st.Generation < last {
				readerErr = fmt.Errorf("generation went back from %d to %d", last, st.Generation)
				return
			}
			last = st.Generation
		}
	})
	wg.Wait()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		ok(t, err)
	}
	ok(t, readerErr)
	if st := state(t, s, r.ID); st != (store.RepoState{Generation: 2 * workers}) {
		t.Fatalf("state = %+v, want generation %d and nothing pending", st, 2*workers)
	}
}

func testSettings(t *testing.T, s store.Store) {
	c := ctx(t)
	_, err := s.GetSetting(c, "rate_limits")
	wantKind(t, err, problem.NotFound)
	ok(t, s.PutSetting(c, "rate_limits", `{"a":1}`))
	v, err := s.GetSetting(c, "rate_limits")
	ok(t, err)
	if v != `{"a":1}` {
		t.Errorf("GetSetting = %q", v)
	}
	ok(t, s.PutSetting(c, "rate_limits", `{"a":2}`))
	ok(t, s.PutSetting(c, "host_keys", `[]`))
	v, err = s.GetSetting(c, "rate_limits")
	ok(t, err)
	if v != `{"a":2}` {
		t.Errorf("GetSetting after replace = %q", v)
	}
	wantKind(t, s.PutSetting(c, "", "x"), problem.Invalid)
}

// testSettingIfAbsent is what lets nodes starting at once agree on one SSH
// host key set: of many concurrent writers exactly one stores its value,
// and everyone then reads that value.
func testSettingIfAbsent(t *testing.T, s store.Store) {
	c := ctx(t)
	const writers = 8
	var wg sync.WaitGroup
	won := make([]bool, writers)
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won[i], errs[i] = s.PutSettingIfAbsent(c, "ssh.host_keys", fmt.Sprintf("value-%d", i))
		}()
	}
	wg.Wait()
	winner := -1
	for i := range writers {
		ok(t, errs[i])
		if won[i] {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both stored", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no writer stored its value")
	}
	v, err := s.GetSetting(c, "ssh.host_keys")
	ok(t, err)
	if want := fmt.Sprintf("value-%d", winner); v != want {
		t.Errorf("stored %q, want the winner's %q", v, want)
	}
	stored, err := s.PutSettingIfAbsent(c, "ssh.host_keys", "late")
	ok(t, err)
	if stored {
		t.Error("PutSettingIfAbsent replaced an existing value")
	}
	_, err = s.PutSettingIfAbsent(c, "", "x")
	wantKind(t, err, problem.Invalid)
}

// testReadsSeeWrites: the reads every request makes (user, token,
// grants, repository) see each write made before them, from any pooled
// connection, while other goroutines run the same queries. A store that
// keeps statements prepared must reset them after each use: one left
// open would pin its connection to an old snapshot.
func testReadsSeeWrites(t *testing.T, s store.Store) {
	c := ctx(t)
	u := mkUser(t, s, "ana")
	p := mkProject(t, s, "RSW")
	r := mkRepo(t, s, p, "repo")
	tok := &store.Token{UserID: u.ID, Name: "t", Hash: hash("rsw"), Scope: store.ScopeRead}
	ok(t, s.CreateToken(c, tok))
	const readers, rounds = 4, 30
	var wg sync.WaitGroup
	errs := make(chan error, readers*rounds)
	for g := 0; g < readers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if _, err := s.UserByID(c, u.ID); err != nil {
					errs <- err
				}
				if _, err := s.TokenByHash(c, hash("rsw")); err != nil {
					errs <- err
				}
				if _, _, _, err := s.EffectiveGrants(c, u.ID, p.ID, r.ID); err != nil {
					errs <- err
				}
			}
		}()
	}
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < rounds; i++ {
		name := fmt.Sprintf("Ana %d", i)
		cur, err := s.UserByID(c, u.ID)
		ok(t, err)
		cur.DisplayName, cur.Active = name, i%2 == 0
		ok(t, s.UpdateUser(c, cur))
		at := base.Add(time.Duration(i) * time.Minute)
		ok(t, s.TouchToken(c, tok.ID, at))
		perm := store.PermRepoRead
		if i%2 == 1 {
			perm = store.PermRepoWrite
		}
		ok(t, s.SetRepoPermission(c, r.ID, store.Grant{UserID: u.ID, Permission: perm}))
		// Several reads, so that more than one pooled connection answers.
		for j := 0; j < 3; j++ {
			got, err := s.UserByID(c, u.ID)
			ok(t, err)
			if got.DisplayName != name || got.Active != (i%2 == 0) {
				t.Fatalf("round %d: user %q active=%t, want %q active=%t", i, got.DisplayName, got.Active, name, i%2 == 0)
			}
			gt, err := s.TokenByHash(c, hash("rsw"))
			ok(t, err)
			if gt.LastUsedAt == nil || !gt.LastUsedAt.Equal(at) {
				t.Fatalf("round %d: token last used %v, want %v", i, gt.LastUsedAt, at)
			}
			_, _, repo, err := s.EffectiveGrants(c, u.ID, p.ID, r.ID)
			ok(t, err)
			if !slices.Equal(repo, []store.Permission{perm}) {
				t.Fatalf("round %d: repo grants %v, want [%s]", i, repo, perm)
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent read: %v", err)
	}
}

func testGitRuns(t *testing.T, s store.Store) {
	c := ctx(t)
	p := mkProject(t, s, "P")
	r := mkRepo(t, s, p, "r")
	before := time.Now().Add(-time.Second)
	id1, err := s.BeginGitRun(c, r.ID, "node-a", "inst-a")
	ok(t, err)
	id2, err := s.BeginGitRun(c, r.ID+1000, "node-b", "inst-b") // no such repository: recorded all the same
	ok(t, err)
	runs, err := s.GitRuns(c)
	ok(t, err)
	if len(runs) != 2 || runs[0].ID != id1 || runs[1].ID != id2 {
		t.Fatalf("git runs = %+v, want ids %d, %d", runs, id1, id2)
	}
	g := runs[0]
	if g.RepoID != r.ID || g.NodeID != "node-a" || g.Instance != "inst-a" ||
		g.StartedAt.Before(before) || g.StartedAt.After(time.Now().Add(time.Second)) || g.StartedAt.Location() != time.UTC {
		t.Errorf("git run = %+v", g)
	}
	ok(t, s.EndGitRun(c, id1))
	ok(t, s.EndGitRun(c, id1)) // already gone: no error
	runs, err = s.GitRuns(c)
	ok(t, err)
	if len(runs) != 1 || runs[0].ID != id2 {
		t.Fatalf("git runs after end = %+v, want only %d", runs, id2)
	}
	ok(t, s.EndGitRun(c, id2))
}
