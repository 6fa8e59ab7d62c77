package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

// TestDashboardPulls runs the dashboard's pull request queries on both
// dialects: who sees which open pull request, across repositories, with
// visibility decided like RecentlyPushedRepos.
func TestDashboardPulls(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testDashboardPulls(t, open(t).(*store.DB))
		})
	}
}

func testDashboardPulls(t *testing.T, db *store.DB) {
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
	ann, bob, cat := user("ann", true), user("bob", true), user("cat", true)

	pub := &store.Project{Key: "PUB", Name: "pub", Public: true}
	must(db.CreateProject(ctx, pub))
	priv := &store.Project{Key: "PRIV", Name: "priv"}
	must(db.CreateProject(ctx, priv))
	repo := func(p *store.Project, name string) *store.Repository {
		r := &store.Repository{ProjectID: p.ID, Name: name}
		must(db.CreateRepo(ctx, r))
		return r
	}
	open1, open2, secret := repo(pub, "one"), repo(pub, "two"), repo(priv, "secret")
	// bob reads the private repository through a group; ann does not.
	g := &store.Group{Name: "secret-readers"}
	must(db.CreateGroup(ctx, g))
	must(db.AddGroupMember(ctx, g.ID, bob))
	must(db.SetRepoPermission(ctx, secret.ID, store.Grant{GroupID: g.ID, Permission: store.PermRepoRead}))

	sha := fmt.Sprintf("%040d", 1)
	n := 0
	pr := func(r *store.Repository, author int64, state string, reviewers map[int64]string) int64 {
		t.Helper()
		n++
		parts := []store.Participant{{UserID: author, Role: store.RoleAuthor, Status: store.StatusUnapproved}}
		for id, status := range reviewers {
			parts = append(parts, store.Participant{UserID: id, Role: store.RoleReviewer, Status: status})
		}
		p := &store.PullRequest{RepoID: r.ID, FromRepoID: r.ID, FromRef: fmt.Sprintf("refs/heads/b%d", n), FromSHA: sha,
			ToRef: "refs/heads/main", ToSHA: sha, Title: fmt.Sprintf("pr%d", n), AuthorID: author}
		must(db.CreatePullRequest(ctx, p, parts))
		if state != store.PullOpen {
			upd := *p
			upd.State = state
			must(db.UpdatePullRequest(ctx, &upd, p.Version))
		}
		// Distinct update times at any clock resolution.
		time.Sleep(5 * time.Millisecond)
		return p.ID
	}
	a1 := pr(open1, ann, store.PullOpen, map[int64]string{bob: store.StatusUnapproved})
	a2 := pr(open2, ann, store.PullOpen, map[int64]string{bob: store.StatusApproved, cat: store.StatusUnapproved})
	pr(open1, ann, store.PullMerged, map[int64]string{bob: store.StatusUnapproved})
	b1 := pr(secret, bob, store.PullOpen, map[int64]string{ann: store.StatusUnapproved, cat: store.StatusNeedsWork})
	b2 := pr(open2, bob, store.PullOpen, map[int64]string{ann: store.StatusUnapproved})
	pr(open1, bob, store.PullDeclined, map[int64]string{ann: store.StatusUnapproved})
	// ann took part in bob's pull request without being a reviewer.
	b3 := pr(open1, bob, store.PullOpen, nil)
	must(db.PutParticipant(ctx, b3, store.Participant{UserID: ann, Role: store.RoleParticipant, Status: store.StatusUnapproved}))

	ids := func(list []store.DashboardPull, err error) []int64 {
		t.Helper()
		must(err)
		var out []int64
		for _, p := range list {
			if p.Repo.ID != p.RepoID || p.Repo.ProjectKey == "" || p.Repo.Slug == "" || p.State != store.PullOpen {
				t.Errorf("row not filled: %+v", p)
			}
			out = append(out, p.ID)
		}
		return out
	}
	tests := []struct {
		name string
		got  []int64
		want []int64
	}{
		{"ann's own, newest first", ids(db.OpenPullRequestsAuthoredBy(ctx, ann, 10)), []int64{a2, a1}},
		{"limit", ids(db.OpenPullRequestsAuthoredBy(ctx, ann, 1)), []int64{a2}},
		{"bob's own, private one included", ids(db.OpenPullRequestsAuthoredBy(ctx, bob, 10)), []int64{b3, b2, b1}},
		{"ann reviews only what she can read and has not reviewed", ids(db.OpenPullRequestsToReview(ctx, ann, 10)), []int64{b2}},
		{"bob has one review left", ids(db.OpenPullRequestsToReview(ctx, bob, 10)), []int64{a1}},
		{"needs work is not waiting", ids(db.OpenPullRequestsToReview(ctx, cat, 10)), []int64{a2}},
		{"anonymous has nothing", ids(db.OpenPullRequestsAuthoredBy(ctx, 0, 10)), nil},
	}
	for _, tc := range tests {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	// Losing access hides one's own pull requests too.
	must(db.RemoveGroupMember(ctx, g.ID, bob))
	if got := ids(db.OpenPullRequestsAuthoredBy(ctx, bob, 10)); !slices.Equal(got, []int64{b3, b2}) {
		t.Errorf("bob after losing access: %v", got)
	}
}
