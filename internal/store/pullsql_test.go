package store_test

import (
	"context"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestPullStore runs the pull request queries on both dialects.
func TestPullStore(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runPullStore(t, open(t))
		})
	}
}

func runPullStore(t *testing.T, st store.Store) {
	ctx := context.Background()
	ps := st.(store.PullStore)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	u := &store.User{Name: "ann", Active: true}
	must(st.CreateUser(ctx, u))
	v := &store.User{Name: "ben", Active: true}
	must(st.CreateUser(ctx, v))
	p := &store.Project{Key: "PRJ", Name: "p"}
	must(st.CreateProject(ctx, p))
	r := &store.Repository{ProjectID: p.ID, Slug: "app", Name: "app"}
	must(st.CreateRepo(ctx, r))

	sha := func(c byte) string {
		b := make([]byte, 40)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	newPR := func(from string) *store.PullRequest {
		pr := &store.PullRequest{RepoID: r.ID, FromRepoID: r.ID, FromRef: from, FromSHA: sha('a'), ToRef: "refs/heads/main",
			ToSHA: sha('b'), BaseSHA: sha('c'), Title: "t", AuthorID: u.ID}
		must(ps.CreatePullRequest(ctx, pr, []store.Participant{{UserID: u.ID, Role: store.RoleAuthor, Status: store.StatusUnapproved},
			{UserID: v.ID, Role: store.RoleReviewer, Status: store.StatusUnapproved}}))
		return pr
	}
	pr1, pr2 := newPR("refs/heads/a"), newPR("refs/heads/b")
	if pr1.Number != 1 || pr2.Number != 2 || pr1.State != store.PullOpen {
		t.Fatalf("numbers %d %d", pr1.Number, pr2.Number)
	}
	got, err := ps.PullRequestByNumber(ctx, r.ID, 2)
	must(err)
	if got.ID != pr2.ID || got.FromRef != "refs/heads/b" || got.MergeStatus != "UNKNOWN" || got.ClosedAt != nil {
		t.Fatalf("read back %+v", got)
	}
	list, err := ps.ListPullRequests(ctx, store.PullFilter{RepoID: r.ID, State: store.PullOpen}, store.Page{})
	must(err)
	if len(list) != 2 || list[0].Number != 2 {
		t.Fatalf("list newest first: %+v", list)
	}
	touch, err := ps.OpenPullRequestsTouching(ctx, r.ID, []string{"refs/heads/a"})
	must(err)
	if len(touch) != 1 || touch[0].ID != pr1.ID {
		t.Fatalf("touching a: %+v", touch)
	}
	touch, err = ps.OpenPullRequestsTouching(ctx, r.ID, []string{"refs/heads/main"})
	must(err)
	if len(touch) != 2 {
		t.Fatalf("touching main: %d", len(touch))
	}

	// Optimistic versions.
	upd := *pr1
	upd.Title = "new"
	must(ps.UpdatePullRequest(ctx, &upd, 0))
	if upd.Version != 1 {
		t.Fatalf("version %d", upd.Version)
	}
	if err := ps.UpdatePullRequest(ctx, &upd, 0); !problem.Is(err, problem.Conflict) {
		t.Fatalf("stale update: %v", err)
	}
	ok, err := ps.RescopePullRequest(ctx, pr1.ID, sha('a'), sha('b'), sha('d'), sha('b'), sha('c'))
	must(err)
	if !ok {
		t.Fatal("rescope did not apply")
	}
	if ok, _ := ps.RescopePullRequest(ctx, pr1.ID, sha('a'), sha('b'), sha('e'), sha('b'), sha('c')); ok {
		t.Fatal("rescope from stale commits applied")
	}
	must(ps.SetMergeStatus(ctx, pr1.ID, sha('d'), sha('b'), "CONFLICTED", "x.txt"))
	got, _ = ps.PullRequestByID(ctx, pr1.ID)
	if got.MergeStatus != "CONFLICTED" || got.Conflicts != "x.txt" || got.Version != 1 {
		t.Fatalf("after rescope: %+v", got)
	}

	// Watchers: idempotent both ways, unknown users refused, gone with
	// the pull request (checked after the delete below).
	must(ps.Watch(ctx, pr1.ID, v.ID))
	must(ps.Watch(ctx, pr1.ID, v.ID))
	must(ps.Watch(ctx, pr1.ID, u.ID))
	if w, err := ps.Watchers(ctx, pr1.ID); err != nil || len(w) != 2 || w[0] != u.ID || w[1] != v.ID {
		t.Fatalf("watchers: %v %v", w, err)
	}
	must(ps.Unwatch(ctx, pr1.ID, u.ID))
	must(ps.Unwatch(ctx, pr1.ID, u.ID))
	if w, err := ps.Watchers(ctx, pr1.ID); err != nil || len(w) != 1 || w[0] != v.ID {
		t.Fatalf("watchers after unwatch: %v %v", w, err)
	}
	if err := ps.Watch(ctx, pr1.ID, 1<<40); !problem.Is(err, problem.NotFound) {
		t.Fatalf("watch by an unknown user: %v", err)
	}

	must(ps.PutParticipant(ctx, pr1.ID, store.Participant{UserID: v.ID, Role: store.RoleReviewer, Status: store.StatusApproved}))
	must(ps.ResetApprovals(ctx, pr1.ID))
	parts, err := ps.Participants(ctx, pr1.ID)
	must(err)
	if len(parts) != 2 || parts[1].Status != store.StatusUnapproved {
		t.Fatalf("participants: %+v", parts)
	}

	c := &store.PullComment{PRID: pr1.ID, AuthorID: v.ID, Text: "hi", Path: "a.txt", Line: 3, LineType: "ADDED", FileType: "TO"}
	must(ps.CreateComment(ctx, c))
	reply := &store.PullComment{PRID: pr1.ID, AuthorID: u.ID, Text: "yes", ParentID: c.ID}
	must(ps.CreateComment(ctx, reply))
	c.Text = "hello"
	must(ps.UpdateComment(ctx, c, 0))
	if err := ps.UpdateComment(ctx, c, 0); !problem.Is(err, problem.Conflict) {
		t.Fatalf("stale comment update: %v", err)
	}
	c.Line, c.Outdated = 5, true
	must(ps.MoveComment(ctx, c))
	cs, err := ps.ListComments(ctx, pr1.ID)
	must(err)
	if len(cs) != 2 || cs[0].Line != 5 || !cs[0].Outdated || cs[0].Text != "hello" || cs[1].ParentID != c.ID {
		t.Fatalf("comments: %+v", cs)
	}
	if _, err := ps.CommentByID(ctx, pr2.ID, c.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("comment of another pull request: %v", err)
	}
	must(ps.DeleteComment(ctx, pr1.ID, reply.ID, 0))

	must(ps.AddActivity(ctx, &store.PullActivity{PRID: pr1.ID, UserID: u.ID, Action: "OPENED"}))
	must(ps.AddActivity(ctx, &store.PullActivity{PRID: pr1.ID, Action: "RESCOPED", Detail: `{"a":1}`}))
	acts, err := ps.ListActivities(ctx, pr1.ID, store.Page{})
	must(err)
	if len(acts) != 2 || acts[0].Action != "RESCOPED" || acts[0].UserID != 0 {
		t.Fatalf("activities: %+v", acts)
	}

	if _, err := ps.PullDiff(ctx, pr1.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("missing diff: %v", err)
	}
	must(ps.PutPullDiff(ctx, &store.PullDiff{PRID: pr1.ID, BaseSHA: sha('c'), FromSHA: sha('d'), Stat: "[]", Diff: []byte("x\x00y")}))
	must(ps.PutPullDiff(ctx, &store.PullDiff{PRID: pr1.ID, BaseSHA: sha('c'), FromSHA: sha('e'), Stat: "[]", Diff: nil, Truncated: true}))
	d, err := ps.PullDiff(ctx, pr1.ID)
	must(err)
	if d.FromSHA != sha('e') || !d.Truncated || len(d.Diff) != 0 {
		t.Fatalf("diff: %+v", d)
	}

	// Build statuses belong to repositories: a report to one never
	// replaces another's under the same commit and key.
	other := &store.Repository{ProjectID: p.ID, Slug: "other", Name: "other"}
	must(st.CreateRepo(ctx, other))
	must(ps.PutBuildStatus(ctx, &store.BuildStatus{CommitSHA: sha('d'), Key: "ci", State: "FAILED"}, []int64{r.ID, other.ID}))
	must(ps.PutBuildStatus(ctx, &store.BuildStatus{CommitSHA: sha('d'), Key: "ci", State: "SUCCESSFUL", Ref: "refs/heads/a",
		DurationMS: 1500, Tests: &store.TestResults{Successful: 3, Failed: 1, Skipped: 2}}, []int64{r.ID}))
	bs, err := ps.RepoBuildStatuses(ctx, r.ID, sha('d'))
	must(err)
	if len(bs) != 1 || bs[0].State != "SUCCESSFUL" || bs[0].RepoID != r.ID || bs[0].Ref != "refs/heads/a" || bs[0].DurationMS != 1500 ||
		bs[0].Tests == nil || *bs[0].Tests != (store.TestResults{Successful: 3, Failed: 1, Skipped: 2}) {
		t.Fatalf("builds of %d: %+v", r.ID, bs)
	}
	bs, err = ps.RepoBuildStatuses(ctx, other.ID, sha('d'))
	must(err)
	if len(bs) != 1 || bs[0].State != "FAILED" || bs[0].RepoID != other.ID || bs[0].Tests != nil {
		t.Fatalf("builds of %d: %+v", other.ID, bs)
	}
	bs, err = ps.BuildStatuses(ctx, sha('d'))
	must(err)
	if len(bs) != 2 || bs[0].RepoID != r.ID || bs[1].RepoID != other.ID {
		t.Fatalf("builds of every repository, newest first: %+v", bs)
	}
	if bs, err := ps.RepoBuildStatuses(ctx, r.ID, sha('e')); err != nil || len(bs) != 0 {
		t.Fatalf("builds of another commit: %+v %v", bs, err)
	}
	for _, tc := range []struct {
		repo int64
		sha  string
		want bool
	}{{r.ID, sha('a'), true}, {r.ID, sha('e'), false}, {other.ID, sha('a'), false}} {
		if got, err := ps.HasOpenPullRequestFrom(ctx, tc.repo, tc.sha); err != nil || got != tc.want {
			t.Fatalf("open pull request into %d from %s: %v %v", tc.repo, tc.sha[:1], got, err)
		}
	}

	g := &store.Group{Name: "devs"}
	must(st.CreateGroup(ctx, g))
	br := &store.BranchRestriction{RepoID: r.ID, Type: "read-only", MatcherType: "BRANCH", MatcherID: "refs/heads/main", UserIDs: []int64{u.ID, v.ID}, GroupIDs: []int64{g.ID}}
	must(ps.CreateRestriction(ctx, br))
	must(ps.CreateRestriction(ctx, &store.BranchRestriction{ProjectID: p.ID, Type: "no-deletes", MatcherType: "PATTERN", MatcherID: "*"}))
	if err := ps.CreateRestriction(ctx, &store.BranchRestriction{Type: "x"}); !problem.Is(err, problem.Invalid) {
		t.Fatalf("scopeless restriction: %v", err)
	}
	rs, err := ps.RestrictionsFor(ctx, r.ID, p.ID)
	must(err)
	if len(rs) != 2 || len(rs[0].UserIDs) != 2 || rs[0].GroupIDs[0] != g.ID || rs[1].ProjectID != p.ID {
		t.Fatalf("restrictions: %+v", rs)
	}
	if rs, _ := ps.ListRestrictions(ctx, r.ID, 0); len(rs) != 1 {
		t.Fatalf("repo restrictions: %+v", rs)
	}
	must(ps.DeleteRestriction(ctx, br.ID))
	if err := ps.DeleteRestriction(ctx, br.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("second delete: %v", err)
	}

	if s, err := ps.PullSettings(ctx, r.ID); err != nil || s != "" {
		t.Fatalf("unset settings: %q %v", s, err)
	}
	must(ps.PutPullSettings(ctx, r.ID, `{"a":1}`))
	must(ps.PutPullSettings(ctx, r.ID, `{"a":2}`))
	if s, _ := ps.PullSettings(ctx, r.ID); s != `{"a":2}` {
		t.Fatalf("settings %q", s)
	}

	h := &store.Webhook{RepoID: r.ID, Name: "ci", URL: "https://ci.example/hook", Secret: "s", Events: []string{"pr:merged", "pr:opened"}, Active: true}
	must(ps.CreateWebhook(ctx, h))
	hs, err := ps.ListWebhooks(ctx, r.ID)
	must(err)
	if len(hs) != 1 || len(hs[0].Events) != 2 || hs[0].Secret != "s" {
		t.Fatalf("webhooks: %+v", hs)
	}
	dl := &store.WebhookDelivery{WebhookID: h.ID, Event: "pr:merged", Payload: "{}"}
	must(ps.CreateDelivery(ctx, dl))
	must(ps.RecordAttempt(ctx, dl.ID, 500, "boom", false))
	must(ps.RecordAttempt(ctx, dl.ID, 200, "", true))
	got2, err := ps.DeliveryByID(ctx, dl.ID)
	must(err)
	if got2.Attempts != 2 || !got2.Delivered || got2.StatusCode != 200 {
		t.Fatalf("delivery: %+v", got2)
	}
	if ds, _ := ps.ListDeliveries(ctx, h.ID, store.Page{}); len(ds) != 1 {
		t.Fatalf("deliveries: %+v", ds)
	}
	h.Name, h.URL, h.Events, h.Active = "ci2", "https://ci.example/other", []string{"repo:refs_changed"}, false
	must(ps.UpdateWebhook(ctx, h))
	if got, err := ps.WebhookByID(ctx, h.ID); err != nil || got.Name != "ci2" || got.URL != h.URL || got.Active ||
		len(got.Events) != 1 || got.Events[0] != "repo:refs_changed" || got.Secret != "s" {
		t.Fatalf("updated webhook = %+v, %v", got, err)
	}
	moved := *h
	moved.RepoID++
	if err := ps.UpdateWebhook(ctx, &moved); !problem.Is(err, problem.NotFound) {
		t.Fatalf("update through another repository: %v", err)
	}
	if err := ps.DeleteWebhook(ctx, r.ID+1, h.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("delete from another repository: %v", err)
	}
	must(ps.DeleteWebhook(ctx, r.ID, h.ID))

	// Deleting a pull request checks its version and takes its rows along.
	cur, err := ps.PullRequestByID(ctx, pr1.ID)
	must(err)
	if err := ps.DeletePullRequest(ctx, pr1.ID, cur.Version+1); !problem.Is(err, problem.Conflict) {
		t.Fatalf("delete at a stale version: %v", err)
	}
	must(ps.DeletePullRequest(ctx, pr1.ID, cur.Version))
	if _, err := ps.PullRequestByID(ctx, pr1.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("deleted pull request: %v", err)
	}
	if parts, err := ps.Participants(ctx, pr1.ID); err != nil || len(parts) != 0 {
		t.Fatalf("participants after delete: %+v %v", parts, err)
	}
	if w, err := ps.Watchers(ctx, pr1.ID); err != nil || len(w) != 0 {
		t.Fatalf("watchers after delete: %v %v", w, err)
	}
	if err := ps.DeletePullRequest(ctx, pr1.ID, cur.Version); !problem.Is(err, problem.NotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
