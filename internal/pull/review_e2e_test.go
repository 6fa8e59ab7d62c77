package pull_test

import (
	"fmt"
	"strings"
	"testing"
)

type mergeVetoes struct {
	CanMerge bool `json:"canMerge"`
	Vetoes   []struct {
		Summary string `json:"summaryMessage"`
		Detail  string `json:"detailedMessage"`
	} `json:"vetoes"`
}

func (m mergeVetoes) has(summary, detail string) bool {
	for _, v := range m.Vetoes {
		if v.Summary == summary && strings.Contains(v.Detail, detail) {
			return true
		}
	}
	return false
}

// TestDefaultReviewersAndRequiredReports: a pull request opened without
// reviewers gets the matching conditions' readers; one opened with
// reviewers keeps the author's choice; required approvals and a required
// Code Insights report veto the merge until they are met.
func TestDefaultReviewersAndRequiredReports(t *testing.T) {
	w := newWorld(t)
	const dr = "/rest/default-reviewers/1.0/projects/PRJ/repos/app"
	const insights = "/rest/insights/1.0/projects/PRJ/repos/app"
	matcher := func(typ, id string) map[string]any {
		return map[string]any{"id": id, "type": map[string]string{"id": typ}}
	}

	// eve cannot read the repository: she can be neither a reviewer nor
	// learn the conditions; bob reads but does not administer.
	cond := map[string]any{"sourceMatcher": matcher("ANY_REF", ""), "targetMatcher": matcher("BRANCH", "main"),
		"reviewers": []any{map[string]any{"name": "eve"}}, "requiredApprovals": 1}
	if code := w.call(w.admin, "POST", dr+"/condition", cond, nil); code != 400 {
		t.Fatalf("eve as reviewer: %d", code)
	}
	cond["reviewers"] = []any{map[string]any{"id": w.bobID}}
	if code := w.call(w.bob, "POST", dr+"/condition", cond, nil); code != 403 {
		t.Fatalf("reader creates a condition: %d", code)
	}
	w.must(200, w.admin, "POST", dr+"/condition", cond, nil)
	// A project condition for feature branches only.
	w.must(200, w.admin, "POST", "/rest/default-reviewers/1.0/projects/PRJ/condition", map[string]any{
		"sourceMatcher": matcher("MODEL_CATEGORY", "feature"), "targetMatcher": matcher("ANY_REF", ""),
		"reviewers": []any{map[string]any{"name": "admin"}}}, nil)

	var users []struct {
		Name string `json:"name"`
	}
	w.must(200, w.bob, "GET", dr+"/reviewers?sourceRefId=refs/heads/feature/x&targetRefId=refs/heads/main", nil, &users)
	if len(users) != 2 || users[0].Name != "bob" || users[1].Name != "admin" {
		t.Fatalf("default reviewers of feature/x → main: %+v", users)
	}
	w.must(200, w.bob, "GET", dr+"/reviewers?sourceRefId=topic&targetRefId=other", nil, &users)
	if len(users) != 0 {
		t.Fatalf("no condition matches topic → other: %+v", users)
	}
	if code := w.call(w.eve, "GET", dr+"/reviewers?sourceRefId=topic&targetRefId=main", nil, nil); code != 404 {
		t.Fatalf("eve asks for reviewers: %d", code)
	}

	tip := w.branch("topic", "main", map[string]string{"t.txt": "t\n"})
	var pr struct {
		ID        int64 `json:"id"`
		Reviewers []struct {
			User struct {
				Name string `json:"name"`
			} `json:"user"`
		} `json:"reviewers"`
	}
	w.must(201, w.admin, "POST", prs, map[string]any{"title": "topic",
		"fromRef": map[string]any{"id": "refs/heads/topic"}, "toRef": map[string]any{"id": "refs/heads/main"}}, &pr)
	if len(pr.Reviewers) != 1 || pr.Reviewers[0].User.Name != "bob" {
		t.Fatalf("reviewers added by the condition: %+v", pr.Reviewers)
	}
	base := fmt.Sprintf("%s/%d", prs, pr.ID)

	w.must(201, w.admin, "POST", insights+"/merge-checks", map[string]any{"reportKey": "lint"}, nil)
	var st mergeVetoes
	w.must(200, w.bob, "GET", base+"/merge", nil, &st)
	if st.CanMerge || !st.has("Default reviewer approvals", "1 approval") || !st.has("Required report", "has not been published") {
		t.Fatalf("vetoes before approval and report: %+v", st)
	}

	// The analysis tool reports through bob's account; eve's report on
	// the same commit is refused like a missing repository.
	report := insights + "/commits/" + tip + "/reports/lint"
	if code := w.call(w.eve, "PUT", report, map[string]any{"title": "Lint", "result": "PASS"}, nil); code != 404 {
		t.Fatalf("eve reports: %d", code)
	}
	w.must(200, w.bob, "PUT", report, map[string]any{"title": "Lint", "result": "FAIL"}, nil)
	w.must(200, w.bob, "POST", base+"/approve", nil, nil)
	w.must(200, w.bob, "GET", base+"/merge", nil, &st)
	if st.CanMerge || len(st.Vetoes) != 1 || !st.has("Required report", "failed") {
		t.Fatalf("vetoes with a failed report: %+v", st)
	}
	w.must(200, w.bob, "PUT", report, map[string]any{"title": "Lint"}, nil)
	w.must(200, w.bob, "GET", base+"/merge", nil, &st)
	if st.CanMerge || !st.has("Required report", "no result yet") {
		t.Fatalf("vetoes with a pending report: %+v", st)
	}
	w.must(200, w.bob, "PUT", report, map[string]any{"title": "Lint", "result": "PASS"}, nil)
	w.must(200, w.bob, "GET", base+"/merge", nil, &st)
	if !st.CanMerge {
		t.Fatalf("every check passes but: %+v", st)
	}

	// The author's own choice of reviewers is kept.
	w.branch("chosen", "main", map[string]string{"c.txt": "c\n"})
	w.must(201, w.admin, "POST", prs, map[string]any{"title": "chosen",
		"fromRef": map[string]any{"id": "refs/heads/chosen"}, "toRef": map[string]any{"id": "refs/heads/main"},
		"reviewers": []any{map[string]any{"user": map[string]string{"name": "admin"}}}}, &pr)
	if len(pr.Reviewers) != 0 {
		t.Fatalf("the author named only themself, yet: %+v", pr.Reviewers)
	}
	w.must(200, w.admin, "POST", base+"/merge?version=0", nil, nil)
}
