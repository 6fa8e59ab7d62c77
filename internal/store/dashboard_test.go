package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

func TestRecentlyPushedRepos(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRecentlyPushedRepos(t, open(t).(*store.DB))
		})
	}
}

func testRecentlyPushedRepos(t *testing.T, db *store.DB) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	user := func(name string, active bool) int64 {
		u := &store.User{Name: name, Active: active}
		must(db.CreateUser(ctx, u))
		return u.ID
	}
	group := func(name string, members ...int64) int64 {
		g := &store.Group{Name: name}
		must(db.CreateGroup(ctx, g))
		for _, m := range members {
			must(db.AddGroupMember(ctx, g.ID, m))
		}
		return g.ID
	}
	projects := map[string]*store.Project{}
	for _, p := range []*store.Project{{Key: "A", Name: "A"}, {Key: "B", Name: "B", Public: true}, {Key: "C", Name: "C"}} {
		must(db.CreateProject(ctx, p))
		projects[p.Key] = p
	}
	repos := map[string]*store.Repository{}
	for _, r := range []struct {
		key, name string
		public    bool
	}{{"A", "a1", false}, {"A", "a2", true}, {"B", "b1", false}, {"C", "c1", false}, {"C", "c2", false}, {"C", "c3", false}} {
		repo := &store.Repository{ProjectID: projects[r.key].ID, Name: r.name, Public: r.public}
		must(db.CreateRepo(ctx, repo))
		repos[r.name] = repo
	}
	// Pushes, oldest first; c3 is never pushed. The pause keeps the
	// pushed_at stamps apart at any clock resolution a database has.
	for _, name := range []string{"a1", "c1", "b1", "a2", "c2"} {
		id, err := db.BeginRefTxn(ctx, repos[name].ID, "node", "i", "update")
		must(err)
		must(db.EndRefTxn(ctx, id, true))
		time.Sleep(5 * time.Millisecond)
	}
	// A refs change that was aborted is not a push.
	id, err := db.BeginRefTxn(ctx, repos["c3"].ID, "node", "i", "update")
	must(err)
	must(db.EndRefTxn(ctx, id, false))

	ann := user("ann", true)
	bob := user("bob", true)
	must(db.SetRepoPermission(ctx, repos["c1"].ID, store.Grant{UserID: bob, Permission: store.PermRepoRead}))
	cat := user("cat", true)
	readers := group("a-readers", cat)
	must(db.SetProjectPermission(ctx, projects["A"].ID, store.Grant{GroupID: readers, Permission: store.PermProjectRead}))
	dan := user("dan", true)
	admins := group("admins", dan)
	must(db.SetGlobalPermission(ctx, store.Grant{GroupID: admins, Permission: store.PermAdmin}))
	eve := user("eve", false) // disabled: her grant must not count
	must(db.SetProjectPermission(ctx, projects["C"].ID, store.Grant{UserID: eve, Permission: store.PermProjectAdmin}))
	fay := user("fay", true) // may create projects, which reads nothing
	must(db.SetGlobalPermission(ctx, store.Grant{UserID: fay, Permission: store.PermProjectCreate}))
	gus := user("gus", true) // writes one repository through a group
	writers := group("c2-writers", gus)
	must(db.SetRepoPermission(ctx, repos["c2"].ID, store.Grant{GroupID: writers, Permission: store.PermRepoWrite}))

	public := []string{"a2", "b1"}
	tests := []struct {
		name   string
		userID int64
		limit  int
		want   []string
	}{
		{"anonymous", 0, 10, public},
		{"no grants", ann, 10, public},
		{"repository grant", bob, 10, []string{"a2", "b1", "c1"}},
		{"project grant through a group", cat, 10, []string{"a2", "b1", "a1"}},
		{"global admin through a group sees all, never pushed last", dan, 10, []string{"c2", "a2", "b1", "c1", "a1", "c3"}},
		{"limit", dan, 2, []string{"c2", "a2"}},
		{"disabled user", eve, 10, public},
		{"project create is not read", fay, 10, public},
		{"repository write through a group", gus, 10, []string{"c2", "a2", "b1"}},
	}
	for _, tc := range tests {
		got, err := db.RecentlyPushedRepos(ctx, tc.userID, tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
			if r.ProjectKey == "" || r.ID == 0 {
				t.Errorf("%s: row %+v not filled", tc.name, r)
			}
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, names, tc.want)
		}
	}
	got, err := db.RecentlyPushedRepos(ctx, dan, 1)
	must(err)
	if len(got) != 1 || got[0].PushedAt.IsZero() {
		t.Errorf("most recent repository %+v has no push time", got)
	}
}
