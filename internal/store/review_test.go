package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestReviewStore runs the default reviewer and Code Insights queries on
// both dialects.
func TestReviewStore(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runReviewStore(t, open(t))
		})
	}
}

func runReviewStore(t *testing.T, st store.Store) {
	ctx := context.Background()
	rs := st.(store.ReviewStore)
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
	q := &store.Project{Key: "OTH", Name: "o"}
	must(st.CreateProject(ctx, q))
	r := &store.Repository{ProjectID: p.ID, Slug: "app", Name: "app"}
	must(st.CreateRepo(ctx, r))
	r2 := &store.Repository{ProjectID: p.ID, Slug: "lib", Name: "lib"}
	must(st.CreateRepo(ctx, r2))

	// Conditions: one per scope, scoped reads, updates and deletes.
	anyRef := store.RefMatcher{Type: "ANY_REF", ID: "ANY_REF_MATCHER_ID"}
	main := store.RefMatcher{Type: "BRANCH", ID: "refs/heads/main"}
	c1 := &store.ReviewerCondition{RepoID: r.ID, Source: anyRef, Target: main, Reviewers: []int64{u.ID, v.ID}, RequiredApprovals: 1}
	must(rs.CreateReviewerCondition(ctx, c1))
	c2 := &store.ReviewerCondition{ProjectID: p.ID, Source: anyRef, Target: anyRef, Reviewers: []int64{v.ID}}
	must(rs.CreateReviewerCondition(ctx, c2))
	if err := rs.CreateReviewerCondition(ctx, &store.ReviewerCondition{RepoID: r.ID, ProjectID: p.ID}); !problem.Is(err, problem.Invalid) {
		t.Fatalf("two scopes: %v", err)
	}
	if err := rs.CreateReviewerCondition(ctx, &store.ReviewerCondition{RepoID: 999999, Source: anyRef, Target: anyRef}); !problem.Is(err, problem.NotFound) {
		t.Fatalf("missing repository: %v", err)
	}
	own, err := rs.ReviewerConditions(ctx, r.ID, 0)
	must(err)
	if len(own) != 1 || own[0].ID != c1.ID || own[0].Target != main || len(own[0].Reviewers) != 2 || own[0].RequiredApprovals != 1 {
		t.Fatalf("repository conditions: %+v", own)
	}
	all, err := rs.ReviewerConditionsFor(ctx, r.ID, p.ID)
	must(err)
	if len(all) != 2 || all[0].ID != c1.ID || all[1].ID != c2.ID || all[1].ProjectID != p.ID {
		t.Fatalf("conditions for the repository: %+v", all)
	}
	other, err := rs.ReviewerConditionsFor(ctx, r2.ID, p.ID)
	must(err)
	if len(other) != 1 || other[0].ID != c2.ID {
		t.Fatalf("conditions for the other repository: %+v", other)
	}
	// An id of another scope neither updates nor deletes anything.
	wrong := *c1
	wrong.RepoID = r2.ID
	if err := rs.UpdateReviewerCondition(ctx, &wrong); !problem.Is(err, problem.NotFound) {
		t.Fatalf("update through another repository: %v", err)
	}
	if err := rs.DeleteReviewerCondition(ctx, 0, q.ID, c2.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("delete through another project: %v", err)
	}
	up := *c1
	up.Reviewers, up.RequiredApprovals, up.Source = []int64{v.ID}, 0, main
	must(rs.UpdateReviewerCondition(ctx, &up))
	if len(up.Reviewers) != 1 || up.Source != main || up.CreatedAt.IsZero() {
		t.Fatalf("updated: %+v", up)
	}
	must(rs.DeleteReviewerCondition(ctx, r.ID, 0, c1.ID))
	if own, _ = rs.ReviewerConditions(ctx, r.ID, 0); len(own) != 0 {
		t.Fatalf("after delete: %+v", own)
	}

	// Reports: one per (repository, commit, key); replacing drops the
	// annotations; another repository's report is its own.
	sha := strings.Repeat("a", 40)
	rep := &store.InsightReport{RepoID: r.ID, CommitSHA: sha, Key: "lint", Title: "Lint", Result: "FAIL", Data: `[{"title":"n","value":3}]`}
	must(rs.PutInsightReport(ctx, rep))
	if err := rs.PutInsightReport(ctx, &store.InsightReport{RepoID: 999999, CommitSHA: sha, Key: "x", Title: "x"}); !problem.Is(err, problem.NotFound) {
		t.Fatalf("report of a missing repository: %v", err)
	}
	must(rs.PutInsightReport(ctx, &store.InsightReport{RepoID: r2.ID, CommitSHA: sha, Key: "lint", Title: "Other", Result: "PASS"}))
	must(rs.AddInsightAnnotations(ctx, rep.ID, []store.InsightAnnotation{
		{ExternalID: "e1", Path: "a.go", Line: 3, Message: "m1", Severity: "HIGH", Type: "BUG"},
		{ExternalID: "e2", Path: "b.go", Message: "m2", Severity: "LOW"},
	}, 3))
	if err := rs.AddInsightAnnotations(ctx, rep.ID, []store.InsightAnnotation{{Message: "a", Severity: "LOW"}, {Message: "b", Severity: "LOW"}}, 3); !problem.Is(err, problem.Invalid) {
		t.Fatalf("over the limit: %v", err)
	}
	if err := rs.AddInsightAnnotations(ctx, 999999, []store.InsightAnnotation{{Message: "a", Severity: "LOW"}}, 3); !problem.Is(err, problem.NotFound) {
		t.Fatalf("annotation of a missing report: %v", err)
	}
	as, err := rs.InsightAnnotations(ctx, []int64{rep.ID})
	must(err)
	if len(as) != 2 || as[0].ExternalID != "e1" || as[0].Line != 3 || as[0].Type != "BUG" || as[1].Path != "b.go" {
		t.Fatalf("annotations: %+v", as)
	}
	must(rs.DeleteInsightAnnotations(ctx, rep.ID, []string{"e1"}))
	if as, _ = rs.InsightAnnotations(ctx, []int64{rep.ID}); len(as) != 1 || as[0].ExternalID != "e2" {
		t.Fatalf("after deleting e1: %+v", as)
	}
	got, err := rs.InsightReport(ctx, r.ID, sha, "lint")
	must(err)
	if got.Title != "Lint" || got.Result != "FAIL" || got.Data != rep.Data || got.CreatedAt.IsZero() {
		t.Fatalf("read back: %+v", got)
	}
	again := &store.InsightReport{RepoID: r.ID, CommitSHA: sha, Key: "lint", Title: "Lint 2", Result: "PASS", Data: "[]"}
	must(rs.PutInsightReport(ctx, again))
	if as, _ = rs.InsightAnnotations(ctx, []int64{rep.ID, again.ID}); len(as) != 0 {
		t.Fatalf("a replaced report keeps annotations: %+v", as)
	}
	must(rs.PutInsightReport(ctx, &store.InsightReport{RepoID: r.ID, CommitSHA: sha, Key: "cov", Title: "Coverage", Data: "[]"}))
	list, err := rs.InsightReports(ctx, r.ID, sha)
	must(err)
	if len(list) != 2 {
		t.Fatalf("reports of the commit: %+v", list)
	}
	must(rs.AddInsightAnnotations(ctx, again.ID, []store.InsightAnnotation{{Message: "a", Severity: "LOW"}}, 3))
	must(rs.DeleteInsightAnnotations(ctx, again.ID, nil))
	if as, _ = rs.InsightAnnotations(ctx, []int64{again.ID}); len(as) != 0 {
		t.Fatalf("delete all annotations: %+v", as)
	}
	must(rs.DeleteInsightReport(ctx, r.ID, sha, "lint"))
	if _, err := rs.InsightReport(ctx, r.ID, sha, "lint"); !problem.Is(err, problem.NotFound) {
		t.Fatalf("deleted report: %v", err)
	}
	if err := rs.DeleteInsightReport(ctx, r.ID, sha, "lint"); !problem.Is(err, problem.NotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if o, err := rs.InsightReport(ctx, r2.ID, sha, "lint"); err != nil || o.Title != "Other" {
		t.Fatalf("the other repository's report: %+v %v", o, err)
	}

	// Required reports.
	req := &store.RequiredReport{RepoID: r.ID, Key: "lint", Target: anyRef}
	must(rs.CreateRequiredReport(ctx, req))
	if err := rs.UpdateRequiredReport(ctx, &store.RequiredReport{ID: req.ID, RepoID: r2.ID, Key: "x", Target: anyRef}); !problem.Is(err, problem.NotFound) {
		t.Fatalf("update through another repository: %v", err)
	}
	req.Key, req.Target = "sec", main
	must(rs.UpdateRequiredReport(ctx, req))
	reqs, err := rs.RequiredReports(ctx, r.ID)
	must(err)
	if len(reqs) != 1 || reqs[0].Key != "sec" || reqs[0].Target != main {
		t.Fatalf("required reports: %+v", reqs)
	}
	if err := rs.DeleteRequiredReport(ctx, r2.ID, req.ID); !problem.Is(err, problem.NotFound) {
		t.Fatalf("delete through another repository: %v", err)
	}
	must(rs.DeleteRequiredReport(ctx, r.ID, req.ID))
	if reqs, _ = rs.RequiredReports(ctx, r.ID); len(reqs) != 0 {
		t.Fatalf("after delete: %+v", reqs)
	}
}
