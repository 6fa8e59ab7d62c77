package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
)

// TestBulk loads every bulk kind on both dialects (COPY on PostgreSQL,
// multi-row INSERT on SQLite, with more rows than one SQLite batch) and
// reads the rows back through the ordinary store methods.
func TestBulk(t *testing.T) {
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t).(*store.DB)
			const nUsers = 4000 // > one SQLite batch of users
			users := make([]store.User, nUsers)
			for i := range users {
				users[i] = store.User{Name: fmt.Sprintf("Bulk-%04d", i), Active: true}
			}
			if err := db.BulkCreateUsers(ctx, users); err != nil {
				t.Fatal(err)
			}
			uids, err := db.NameIDs(ctx, store.BulkUsers)
			if err != nil || len(uids) != nUsers {
				t.Fatalf("user ids: %d, %v", len(uids), err)
			}
			if u, err := db.UserByName(ctx, "bulk-0042"); err != nil || u.Name != "Bulk-0042" {
				t.Fatalf("UserByName: %+v, %v", u, err)
			}
			if err := db.BulkCreateGroups(ctx, []store.Group{{Name: "g1"}}); err != nil {
				t.Fatal(err)
			}
			gids, _ := db.NameIDs(ctx, store.BulkGroups)
			if err := db.BulkAddGroupMembers(ctx, []store.GroupMember{{GroupID: gids["g1"], UserID: uids["bulk-0001"]}}); err != nil {
				t.Fatal(err)
			}
			if err := db.BulkCreateProjects(ctx, []store.Project{{Key: "bk", Name: "Bulk"}}); err != nil {
				t.Fatal(err)
			}
			pids, _ := db.NameIDs(ctx, store.BulkProjects)
			if err := db.BulkProjectGrants(ctx, []store.ProjectGrant{{ProjectID: pids["BK"], Grant: store.Grant{GroupID: gids["g1"], Permission: store.PermProjectWrite}}}); err != nil {
				t.Fatal(err)
			}
			global, project, _, err := db.EffectiveGrants(ctx, uids["bulk-0001"], pids["BK"], 0)
			if err != nil || len(global) != 0 || len(project) != 1 || project[0] != store.PermProjectWrite {
				t.Fatalf("grants: %v %v %v", global, project, err)
			}
			if err := db.BulkCreateRepos(ctx, []store.Repository{{ProjectID: pids["BK"], Slug: "r1", Name: "r1"}, {ProjectID: pids["BK"], Slug: "r2", Name: "r2"}}); err != nil {
				t.Fatal(err)
			}
			rids, _ := db.NameIDs(ctx, store.BulkRepos)
			if rids["BK/r1"] == 0 || rids["BK/r2"] == 0 {
				t.Fatalf("repo ids: %v", rids)
			}
			sha := "1111111111111111111111111111111111111111"
			if err := db.BulkCreatePullRequests(ctx, []store.PullRequest{{RepoID: rids["BK/r1"], Number: 7, FromRepoID: rids["BK/r1"],
				FromRef: "refs/heads/t", FromSHA: sha, ToRef: "refs/heads/main", ToSHA: sha, Title: "t", AuthorID: uids["bulk-0002"]}}); err != nil {
				t.Fatal(err)
			}
			prs, _ := db.NameIDs(ctx, store.BulkPullRequests)
			prID := prs[fmt.Sprintf("%d/7", rids["BK/r1"])]
			if err := db.BulkAddParticipants(ctx, []store.PullParticipant{{PRID: prID, Participant: store.Participant{UserID: uids["bulk-0003"], Role: store.RoleReviewer}}}); err != nil {
				t.Fatal(err)
			}
			if err := db.BulkCreateComments(ctx, []store.PullComment{{PRID: prID, AuthorID: uids["bulk-0003"], Text: "ok"}}); err != nil {
				t.Fatal(err)
			}
			pr, err := db.PullRequestByNumber(ctx, rids["BK/r1"], 7)
			if err != nil || pr.State != store.PullOpen || pr.Title != "t" {
				t.Fatalf("pull request: %+v, %v", pr, err)
			}
			// The next ordinary creation numbers after the bulk-loaded one.
			next := &store.PullRequest{RepoID: rids["BK/r1"], FromRepoID: rids["BK/r1"], FromRef: "refs/heads/u", FromSHA: sha, ToRef: "refs/heads/main", ToSHA: sha, Title: "u"}
			if err := db.CreatePullRequest(ctx, next, nil); err != nil || next.Number != 8 {
				t.Fatalf("next pull request: number %d, %v", next.Number, err)
			}
			cs, err := db.ListComments(ctx, prID)
			if err != nil || len(cs) != 1 || cs[0].Text != "ok" {
				t.Fatalf("comments: %+v, %v", cs, err)
			}
			for table, want := range map[string]int64{store.BulkUsers: nUsers, "pull_request_participants": 1, "group_members": 1} {
				if n, err := db.CountRows(ctx, table); err != nil || n != want {
					t.Errorf("%s: %d rows, %v; want %d", table, n, err, want)
				}
			}
			// A user created the ordinary way after a bulk load gets a fresh id
			// (PostgreSQL's identity sequence was advanced by COPY).
			u := &store.User{Name: "after-bulk", Active: true}
			if err := db.CreateUser(ctx, u); err != nil {
				t.Fatal(err)
			}
		})
	}
}
