package api_test

import (
	"fmt"
	"testing"
)

const (
	openInsights   = "/rest/insights/1.0/projects/PRJ/repos/open"
	secretInsights = "/rest/insights/1.0/projects/PRJ/repos/secret"
)

type insightReport struct {
	Key    string `json:"key"`
	Title  string `json:"title"`
	Result string `json:"result"`
	Data   []struct {
		Title string `json:"title"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	} `json:"data"`
	CreatedDate int64 `json:"createdDate"`
}

type insightAnnotations struct {
	TotalCount  int `json:"totalCount"`
	Annotations []struct {
		ReportKey  string `json:"reportKey"`
		ExternalID string `json:"externalId"`
		Path       string `json:"path"`
		Line       int    `json:"line"`
		Severity   string `json:"severity"`
	} `json:"annotations"`
}

// TestInsightReports: a report and its annotations belong to the one
// repository they were sent to, which must hold the commit; a reader of
// another repository with the same commit sees nothing of it.
func TestInsightReports(t *testing.T) {
	w := newBuildWorld(t)
	report := openInsights + "/commits/" + w.shared + "/reports/lint"

	body := map[string]any{"title": "Lint", "details": "3 findings", "result": "FAIL", "reporter": "linter",
		"link": "https://ci.example/lint/1", "data": []any{
			map[string]any{"title": "Findings", "type": "NUMBER", "value": 3},
			map[string]any{"title": "Run", "type": "LINK", "value": map[string]string{"linktext": "run", "href": "https://ci.example/1"}}}}
	var got insightReport
	w.must(200, w.alice, "PUT", report, body, &got)
	if got.Key != "lint" || got.Result != "FAIL" || len(got.Data) != 2 || got.CreatedDate == 0 {
		t.Fatalf("stored report: %+v", got)
	}
	// Not held by open: the private commit; not readable: secret.
	if code, _ := w.call(w.alice, "PUT", openInsights+"/commits/"+w.private+"/reports/lint", body); code != 404 {
		t.Fatalf("report on a commit open does not hold: %d", code)
	}
	if code, _ := w.call(w.alice, "PUT", secretInsights+"/commits/"+w.shared+"/reports/lint", body); code != 404 {
		t.Fatalf("report to a repository alice cannot read: %d", code)
	}
	if code, _ := w.call("", "PUT", report, body); code != 401 {
		t.Fatalf("anonymous report: %d", code)
	}
	bad := map[string]any{"title": "x", "link": "javascript:alert(1)"}
	if code, _ := w.call(w.alice, "PUT", report, bad); code != 400 {
		t.Fatalf("javascript link: %d", code)
	}

	w.must(204, w.alice, "POST", report+"/annotations", map[string]any{"annotations": []any{
		map[string]any{"externalId": "a1", "path": "feature.txt", "line": 1, "message": "trailing space", "severity": "LOW"},
		map[string]any{"externalId": "a2", "path": "feature.txt", "message": "no licence", "severity": "HIGH", "type": "CODE_SMELL"},
	}}, nil)
	// Resending an externalId replaces that finding.
	w.must(204, w.alice, "POST", report+"/annotations", map[string]any{"annotations": []any{
		map[string]any{"externalId": "a1", "path": "feature.txt", "line": 1, "message": "trailing spaces", "severity": "MEDIUM"}}}, nil)
	if code, _ := w.call(w.alice, "POST", report+"/annotations", map[string]any{"annotations": []any{
		map[string]any{"message": "x", "severity": "FATAL"}}}); code != 400 {
		t.Fatalf("bad severity: %d", code)
	}
	var as insightAnnotations
	w.must(200, w.alice, "GET", report+"/annotations", nil, &as)
	if as.TotalCount != 2 || as.Annotations[0].ExternalID != "a2" || as.Annotations[1].Severity != "MEDIUM" || as.Annotations[1].ReportKey != "lint" {
		t.Fatalf("annotations: %+v", as)
	}
	w.must(200, w.alice, "GET", openInsights+"/commits/"+w.shared+"/annotations?severity=HIGH", nil, &as)
	if as.TotalCount != 1 || as.Annotations[0].ExternalID != "a2" {
		t.Fatalf("commit annotations, HIGH only: %+v", as)
	}
	w.must(204, w.alice, "DELETE", report+"/annotations?externalId=a2", nil, nil)
	w.must(200, w.alice, "GET", report+"/annotations", nil, &as)
	if as.TotalCount != 1 {
		t.Fatalf("after deleting a2: %+v", as)
	}

	var page struct {
		Values []insightReport `json:"values"`
	}
	w.must(200, w.admin, "GET", secretInsights+"/commits/"+w.shared+"/reports", nil, &page)
	if len(page.Values) != 0 {
		t.Fatalf("secret shows open's report: %+v", page.Values)
	}
	w.must(200, w.alice, "GET", openInsights+"/commits/"+w.shared+"/reports", nil, &page)
	if len(page.Values) != 1 {
		t.Fatalf("open's reports: %+v", page.Values)
	}
	if code, _ := w.call(w.eve, "GET", report, nil); code != 404 {
		t.Fatalf("eve reads the report: %d", code)
	}

	// Replacing drops the annotations; deleting removes the report.
	w.must(200, w.alice, "PUT", report, map[string]any{"title": "Lint", "result": "PASS"}, &got)
	w.must(200, w.alice, "GET", report+"/annotations", nil, &as)
	if as.TotalCount != 0 {
		t.Fatalf("replaced report keeps annotations: %+v", as)
	}
	w.must(204, w.alice, "DELETE", report, nil, nil)
	if code, _ := w.call(w.alice, "GET", report, nil); code != 404 {
		t.Fatalf("deleted report: %d", code)
	}
}

// TestRequiredReportsAndConditionsAccess: readers list merge checks and
// conditions; only administrators change them; ids of another
// repository are not found.
func TestRequiredReportsAndConditionsAccess(t *testing.T) {
	w := newBuildWorld(t)
	rq := map[string]any{"reportKey": "sec", "targetRefMatcher": map[string]any{"id": "release/*", "type": map[string]string{"id": "PATTERN"}}}
	if code, _ := w.call(w.alice, "POST", openInsights+"/merge-checks", rq); code != 403 {
		t.Fatalf("reader adds a merge check: %d", code)
	}
	var made struct {
		ID               int64  `json:"id"`
		ReportKey        string `json:"reportKey"`
		TargetRefMatcher struct {
			ID   string `json:"id"`
			Type struct {
				ID string `json:"id"`
			} `json:"type"`
		} `json:"targetRefMatcher"`
	}
	w.must(201, w.admin, "POST", openInsights+"/merge-checks", rq, &made)
	if made.ReportKey != "sec" || made.TargetRefMatcher.Type.ID != "PATTERN" {
		t.Fatalf("merge check: %+v", made)
	}
	one := fmt.Sprintf("%s/merge-checks/%d", openInsights, made.ID)
	w.must(200, w.alice, "GET", one, nil, &made)
	if code, _ := w.call(w.admin, "DELETE", fmt.Sprintf("%s/merge-checks/%d", secretInsights, made.ID), nil); code != 404 {
		t.Fatalf("delete through another repository: %d", code)
	}
	w.must(200, w.admin, "PUT", one, map[string]any{"reportKey": "sec2"}, &made)
	if made.ReportKey != "sec2" || made.TargetRefMatcher.Type.ID != "ANY_REF" {
		t.Fatalf("updated merge check: %+v", made)
	}
	if code, _ := w.call(w.admin, "POST", openInsights+"/merge-checks", map[string]any{"reportKey": "a b"}); code != 400 {
		t.Fatalf("bad key: %d", code)
	}
	w.must(204, w.admin, "DELETE", one, nil, nil)

	// Conditions: readers list (with the project's), admins change.
	const drOpen = "/rest/default-reviewers/1.0/projects/PRJ/repos/open"
	cond := map[string]any{"sourceRefMatcher": map[string]any{"type": map[string]string{"id": "ANY_REF"}},
		"targetRefMatcher": map[string]any{"id": "main", "type": map[string]string{"id": "BRANCH"}},
		"reviewers":        []any{map[string]any{"name": "alice"}}, "requiredApprovals": "1"}
	type condJSON struct {
		ID    int64 `json:"id"`
		Scope struct {
			Type string `json:"type"`
		} `json:"scope"`
		TargetRefMatcher struct {
			ID string `json:"id"`
		} `json:"targetRefMatcher"`
		Reviewers []struct {
			Name string `json:"name"`
		} `json:"reviewers"`
		RequiredApprovals int `json:"requiredApprovals"`
	}
	var c condJSON
	if code, _ := w.call(w.alice, "POST", drOpen+"/condition", cond); code != 403 {
		t.Fatalf("reader adds a condition: %d", code)
	}
	w.must(200, w.admin, "POST", drOpen+"/condition", cond, &c)
	if c.Scope.Type != "REPOSITORY" || c.TargetRefMatcher.ID != "refs/heads/main" || len(c.Reviewers) != 1 || c.RequiredApprovals != 1 {
		t.Fatalf("condition: %+v", c)
	}
	// alice cannot read the project as a whole, so she cannot review
	// every repository of it.
	if code, _ := w.call(w.admin, "POST", "/rest/default-reviewers/1.0/projects/PRJ/condition", cond); code != 400 {
		t.Fatalf("project condition with a reviewer who cannot read the project: %d", code)
	}
	cond["reviewers"] = []any{map[string]any{"name": "admin"}}
	var pc condJSON
	w.must(200, w.admin, "POST", "/rest/default-reviewers/1.0/projects/PRJ/condition", cond, &pc)
	var list []condJSON
	w.must(200, w.alice, "GET", drOpen+"/conditions", nil, &list)
	if len(list) != 2 || list[0].Scope.Type != "REPOSITORY" || list[1].Scope.Type != "PROJECT" {
		t.Fatalf("conditions of open: %+v", list)
	}
	if code, _ := w.call(w.eve, "GET", drOpen+"/conditions", nil); code != 404 {
		t.Fatalf("eve lists conditions: %d", code)
	}
	// The project's condition is not the repository's to change.
	if code, _ := w.call(w.admin, "DELETE", fmt.Sprintf("%s/condition/%d", drOpen, pc.ID), nil); code != 404 {
		t.Fatalf("project condition deleted through the repository: %d", code)
	}
	cond["requiredApprovals"] = 2
	if code, _ := w.call(w.admin, "PUT", fmt.Sprintf("%s/condition/%d", drOpen, c.ID), cond); code != 400 {
		t.Fatalf("more approvals than reviewers: %d", code)
	}
	cond["requiredApprovals"] = 0
	w.must(200, w.admin, "PUT", fmt.Sprintf("%s/condition/%d", drOpen, c.ID), cond, &c)
	if c.Reviewers[0].Name != "admin" || c.RequiredApprovals != 0 {
		t.Fatalf("updated condition: %+v", c)
	}
	w.must(204, w.admin, "DELETE", fmt.Sprintf("%s/condition/%d", drOpen, c.ID), nil, nil)
	// The latest alias reaches the same routes.
	w.must(200, w.alice, "GET", "/rest/default-reviewers/latest/projects/PRJ/repos/open/conditions", nil, &list)
	if len(list) != 1 {
		t.Fatalf("conditions after delete, through latest: %+v", list)
	}
}
