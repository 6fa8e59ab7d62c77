package api

import (
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
)

// Code Insights, at Bitbucket's /rest/insights/1.0 paths (latest through
// the router's alias), over internal/pull/insights.go.
//
// Reports and annotations are read and written with read access to the
// repository, as in Bitbucket, where the analysis tool reports with the
// same account that cloned; writing also takes a signed-in caller, never
// an anonymous reader of a public repository. A report is stored only
// when the repository holds the commit (404 otherwise, the same answer a
// repository the caller cannot read gives).
//
// Required reports, the merge check, are a repository setting at
// …/merge-checks (Bitbucket keeps them in its repository settings page;
// this path is Sluice's): {id, reportKey, targetRefMatcher}; readers may
// list them (they explain a veto), REPO_ADMIN changes them.

const insightsRepo = "/rest/insights/1.0/projects/{key}/repos/{slug}"

func (s *server) insightRoutes() []route {
	report := insightsRepo + "/commits/{commitId}/reports/{reportKey}"
	const reportBody = "{title, details, result: PASS|FAIL, data: [{title, type: BOOLEAN|DATE|DURATION|LINK|NUMBER|PERCENTAGE|TEXT, value}], reporter, link, logoUrl}"
	filters := []param{q("externalId", "only these external ids; may be repeated"), q("path", "only these paths; may be repeated"),
		q("severity", "only LOW, MEDIUM or HIGH; may be repeated"), q("type", "only VULNERABILITY, CODE_SMELL or BUG; may be repeated")}
	const requiredBody = "{reportKey, targetRefMatcher: {id, type: {id: BRANCH|PATTERN|ANY_REF|MODEL_BRANCH|MODEL_CATEGORY}}}"
	return []route{
		{Method: "GET", Pattern: insightsRepo + "/commits/{commitId}/reports", Summary: "A commit's Code Insights reports in this repository (REPO_READ)",
			Paged: true, handle: (*call).listReports},
		{Method: "GET", Pattern: report, Summary: "A Code Insights report (REPO_READ)", handle: (*call).getReport},
		{Method: "PUT", Pattern: report, Summary: "Create or replace a Code Insights report, dropping its annotations (REPO_READ)",
			Body: reportBody, handle: (*call).putReport},
		{Method: "DELETE", Pattern: report, Summary: "Delete a Code Insights report and its annotations (REPO_READ)", Success: 204,
			handle: (*call).deleteReport},
		{Method: "GET", Pattern: report + "/annotations", Summary: "A report's annotations (REPO_READ)", Query: filters,
			handle: (*call).listAnnotations},
		{Method: "POST", Pattern: report + "/annotations", Summary: "Add annotations to a report; an externalId replaces the earlier one (REPO_READ)",
			Body: "{annotations: [{path, line, message, severity: LOW|MEDIUM|HIGH, type, link, externalId}]}", Success: 204,
			handle: (*call).addAnnotations},
		{Method: "DELETE", Pattern: report + "/annotations", Summary: "Delete a report's annotations, or only those with the given external ids (REPO_READ)",
			Query: []param{q("externalId", "only these; may be repeated")}, Success: 204, handle: (*call).deleteAnnotations},
		{Method: "GET", Pattern: insightsRepo + "/commits/{commitId}/annotations", Summary: "The annotations of every report of a commit (REPO_READ)",
			Query: filters, handle: (*call).listAnnotations},
		{Method: "GET", Pattern: insightsRepo + "/pull-requests/{id}/reports", Summary: "The reports of a pull request's source commit (REPO_READ)",
			Paged: true, handle: (*call).listPullReports},
		{Method: "GET", Pattern: insightsRepo + "/merge-checks", Summary: "Reports that must pass before a pull request merges (REPO_READ)",
			handle: (*call).listRequiredReports},
		{Method: "POST", Pattern: insightsRepo + "/merge-checks", Summary: "Require a passing report for merges into matching branches (REPO_ADMIN)",
			Body: requiredBody, Success: 201, handle: (*call).createRequiredReport},
		{Method: "GET", Pattern: insightsRepo + "/merge-checks/{id}", Summary: "One required report (REPO_READ)", handle: (*call).getRequiredReport},
		{Method: "PUT", Pattern: insightsRepo + "/merge-checks/{id}", Summary: "Change a required report (REPO_ADMIN)", Body: requiredBody,
			handle: (*call).updateRequiredReport},
		{Method: "DELETE", Pattern: insightsRepo + "/merge-checks/{id}", Summary: "Stop requiring a report (REPO_ADMIN)", Success: 204,
			handle: (*call).deleteRequiredReport},
	}
}

type reportJSON struct {
	Key         string              `json:"key"`
	Title       string              `json:"title"`
	Details     string              `json:"details,omitempty"`
	Result      string              `json:"result,omitempty"`
	Data        []pull.InsightDatum `json:"data"`
	Reporter    string              `json:"reporter,omitempty"`
	Link        string              `json:"link,omitempty"`
	LogoURL     string              `json:"logoUrl,omitempty"`
	CreatedDate int64               `json:"createdDate"`
}

func toReportJSON(r store.InsightReport) reportJSON {
	return reportJSON{Key: r.Key, Title: r.Title, Details: r.Details, Result: r.Result, Data: pull.ReportData(&r), Reporter: r.Reporter,
		Link: r.Link, LogoURL: r.LogoURL, CreatedDate: millis(r.CreatedAt)}
}

type annotationJSON struct {
	ReportKey   string `json:"reportKey,omitempty"`
	ExternalID  string `json:"externalId,omitempty"`
	Path        string `json:"path,omitempty"`
	Line        int    `json:"line,omitempty"`
	Message     string `json:"message"`
	Severity    string `json:"severity"`
	Type        string `json:"type,omitempty"`
	Link        string `json:"link,omitempty"`
	CreatedDate int64  `json:"createdDate,omitempty"`
}

// insightRepo loads the repository for a Code Insights call; writers
// must be signed in.
func (c *call) insightRepo(write bool) (*store.Repository, error) {
	if write && c.p.IsAnonymous() {
		return nil, problem.New(problem.Unauthenticated, msgAuthRequired)
	}
	_, r, err := c.repoFor(auth.Read)
	return r, err
}

func (c *call) listReports() error {
	r, err := c.insightRepo(false)
	if err != nil {
		return err
	}
	return c.reportPage(r.ID, c.path("commitId"))
}

func (c *call) reportPage(repoID int64, sha string) error {
	pg, err := c.page()
	if err != nil {
		return err
	}
	rs, err := c.s.Pulls.InsightReports(c.ctx, repoID, sha)
	if err != nil {
		return err
	}
	return c.json(mapPage(slicePage(rs, pg), toReportJSON))
}

func (c *call) listPullReports() error {
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	return c.reportPage(r.ID, pr.FromSHA)
}

func (c *call) getReport() error {
	r, err := c.insightRepo(false)
	if err != nil {
		return err
	}
	rep, err := c.s.Pulls.InsightReport(c.ctx, r.ID, c.path("commitId"), c.path("reportKey"))
	if err != nil {
		return err
	}
	return c.json(toReportJSON(*rep))
}

func (c *call) putReport() error {
	r, err := c.insightRepo(true)
	if err != nil {
		return err
	}
	var in reportJSON
	if err := c.decode(&in, false); err != nil {
		return err
	}
	rep := &store.InsightReport{RepoID: r.ID, CommitSHA: c.path("commitId"), Key: c.path("reportKey"), Title: in.Title, Details: in.Details,
		Result: strings.ToUpper(in.Result), Reporter: in.Reporter, Link: in.Link, LogoURL: in.LogoURL}
	if err := c.s.Pulls.PutInsightReport(c.ctx, rep, in.Data); err != nil {
		return err
	}
	c.s.logger.Info("insight report", "repo_id", r.ID, "commit", rep.CommitSHA, "key", rep.Key, "result", rep.Result, "principal", c.p.String())
	return c.json(toReportJSON(*rep))
}

func (c *call) deleteReport() error {
	r, err := c.insightRepo(true)
	if err != nil {
		return err
	}
	if err := c.s.Pulls.DeleteInsightReport(c.ctx, r.ID, c.path("commitId"), c.path("reportKey")); err != nil {
		return err
	}
	return c.noContent()
}

func (c *call) listAnnotations() error {
	r, err := c.insightRepo(false)
	if err != nil {
		return err
	}
	qv := c.r.URL.Query()
	f := pull.AnnotationFilter{ExternalIDs: qv["externalId"], Paths: qv["path"], Severities: qv["severity"], Types: qv["type"]}
	as, reports, err := c.s.Pulls.InsightAnnotations(c.ctx, r.ID, c.path("commitId"), c.path("reportKey"), f)
	if err != nil {
		return err
	}
	out := struct {
		TotalCount  int              `json:"totalCount"`
		Annotations []annotationJSON `json:"annotations"`
	}{TotalCount: len(as), Annotations: make([]annotationJSON, len(as))}
	for i, a := range as {
		out.Annotations[i] = annotationJSON{ReportKey: reports[a.ReportID].Key, ExternalID: a.ExternalID, Path: a.Path, Line: a.Line,
			Message: a.Message, Severity: a.Severity, Type: a.Type, Link: a.Link, CreatedDate: millis(a.CreatedAt)}
	}
	return c.json(out)
}

func (c *call) addAnnotations() error {
	r, err := c.insightRepo(true)
	if err != nil {
		return err
	}
	var in struct {
		Annotations []annotationJSON `json:"annotations"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	as := make([]store.InsightAnnotation, len(in.Annotations))
	for i, a := range in.Annotations {
		as[i] = store.InsightAnnotation{ExternalID: a.ExternalID, Path: a.Path, Line: a.Line, Message: a.Message,
			Severity: strings.ToUpper(a.Severity), Type: strings.ToUpper(a.Type), Link: a.Link}
	}
	if err := c.s.Pulls.AddInsightAnnotations(c.ctx, r.ID, c.path("commitId"), c.path("reportKey"), as); err != nil {
		return err
	}
	return c.noContent()
}

func (c *call) deleteAnnotations() error {
	r, err := c.insightRepo(true)
	if err != nil {
		return err
	}
	if err := c.s.Pulls.DeleteInsightAnnotations(c.ctx, r.ID, c.path("commitId"), c.path("reportKey"), c.r.URL.Query()["externalId"]); err != nil {
		return err
	}
	return c.noContent()
}

type requiredReportJSON struct {
	ID               int64          `json:"id"`
	ReportKey        string         `json:"reportKey"`
	TargetRefMatcher refMatcherJSON `json:"targetRefMatcher"`
}

func toRequiredJSON(r store.RequiredReport) requiredReportJSON {
	return requiredReportJSON{ID: r.ID, ReportKey: r.Key, TargetRefMatcher: toRefMatcherJSON(r.Target)}
}

func (c *call) requiredID() (int64, error) {
	id, err := strconv.ParseInt(c.path("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "required report not found")
	}
	return id, nil
}

func (c *call) readRequired(r *store.Repository) (*store.RequiredReport, error) {
	var in struct {
		ReportKey        string        `json:"reportKey"`
		TargetRefMatcher *matcherInput `json:"targetRefMatcher"`
	}
	if err := c.decode(&in, false); err != nil {
		return nil, err
	}
	rq := &store.RequiredReport{RepoID: r.ID, Key: in.ReportKey}
	if m := in.TargetRefMatcher; m != nil {
		rq.Target = store.RefMatcher{Type: strings.ToUpper(m.Type.ID), ID: m.ID}
	}
	return rq, nil
}

func (c *call) listRequiredReports() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	rs, err := c.s.Pulls.RequiredReports(c.ctx, r.ID)
	if err != nil {
		return err
	}
	out := make([]requiredReportJSON, len(rs))
	for i := range rs {
		out[i] = toRequiredJSON(rs[i])
	}
	return c.json(out)
}

func (c *call) getRequiredReport() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	id, err := c.requiredID()
	if err != nil {
		return err
	}
	rs, err := c.s.Pulls.RequiredReports(c.ctx, r.ID)
	if err != nil {
		return err
	}
	for _, rq := range rs {
		if rq.ID == id {
			return c.json(toRequiredJSON(rq))
		}
	}
	return problem.New(problem.NotFound, "required report not found")
}

func (c *call) createRequiredReport() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	rq, err := c.readRequired(r)
	if err != nil {
		return err
	}
	if err := c.s.Pulls.CreateRequiredReport(c.ctx, rq); err != nil {
		return err
	}
	return c.jsonStatus(201, toRequiredJSON(*rq))
}

func (c *call) updateRequiredReport() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	id, err := c.requiredID()
	if err != nil {
		return err
	}
	rq, err := c.readRequired(r)
	if err != nil {
		return err
	}
	rq.ID = id
	if err := c.s.Pulls.UpdateRequiredReport(c.ctx, rq); err != nil {
		return err
	}
	return c.json(toRequiredJSON(*rq))
}

func (c *call) deleteRequiredReport() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	id, err := c.requiredID()
	if err != nil {
		return err
	}
	if err := c.s.Pulls.DeleteRequiredReport(c.ctx, r.ID, id); err != nil {
		return err
	}
	return c.noContent()
}
