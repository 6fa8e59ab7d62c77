package pull

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Code Insights: reports that analysis tools (linters, scanners,
// coverage) attach to a commit, with annotations on lines of files, as
// in Bitbucket Data Center. Reports belong to repositories for the same
// reasons build statuses do (builds.go): a report is stored for the one
// repository it was sent to, only when that repository holds the commit
// (its refs reach it, or it is an open pull request's source), and only
// that repository's readers see it and only its pull requests count it.
//
// Sending a report again under the same key replaces it, annotations
// included (the tool's new run supersedes the old one). A result is PASS,
// FAIL or absent (pending). A required report (RequiredReport) is a merge
// check: a pull request into a matching branch cannot merge until a
// report with that key says PASS for its source commit; a FAIL, a pending
// result and a missing report are each a veto that says which.

// Report results and annotation vocabularies, as Bitbucket names them.
const (
	ReportPass = "PASS"
	ReportFail = "FAIL"
)

var (
	annotationSeverities = []string{"LOW", "MEDIUM", "HIGH"}
	annotationTypes      = []string{"VULNERABILITY", "CODE_SMELL", "BUG"}
	datumTypes           = []string{"BOOLEAN", "DATE", "DURATION", "LINK", "NUMBER", "PERCENTAGE", "TEXT"}
)

// Limits, Bitbucket's: a report carries at most 6 data fields and 1000
// annotations; titles and keys are short, details and messages a
// paragraph.
const (
	MaxReportData        = 6
	MaxReportAnnotations = 1000
	maxReportKey         = 450
	maxReportTitle       = 450
	maxReportDetails     = 2000
	maxAnnotationMessage = 2000
	maxInsightURL        = 2048
	maxAnnotationPath    = 4096
)

// InsightDatum is one data field of a report: a title and a value whose
// JSON form depends on Type (LINK is {linktext, href}).
type InsightDatum struct {
	Title string          `json:"title"`
	Type  string          `json:"type,omitempty"`
	Value json.RawMessage `json:"value"`
}

// ValidReportKey checks a report key: it is a path segment of every
// report route, so it is limited to characters that need no escaping.
func ValidReportKey(key string) error {
	if key == "" || len(key) > maxReportKey || strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != "" {
		return problem.New(problem.Invalid, "invalid report key %q (letters, digits, '.', '-' and '_', at most %d)", key, maxReportKey)
	}
	return nil
}

// checkInsightURL accepts empty or absolute http(s) URLs: links and logos
// are shown to readers, and a javascript: or data: link would run in
// their browser.
func checkInsightURL(what, v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || len(v) > maxInsightURL || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return problem.New(problem.Invalid, "%s must be an http or https URL", what)
	}
	return nil
}

func checkDatum(d InsightDatum) error {
	if err := checkText("data title", d.Title, maxReportTitle, true); err != nil {
		return err
	}
	v := bytes.TrimSpace(d.Value)
	if len(v) == 0 {
		return problem.New(problem.Invalid, "data field %q has no value", d.Title)
	}
	var ok bool
	switch d.Type {
	case "":
		var x any
		ok = json.Unmarshal(v, &x) == nil
		switch x.(type) {
		case map[string]any, []any, nil:
			ok = false
		}
	case "BOOLEAN":
		var b bool
		ok = json.Unmarshal(v, &b) == nil
	case "DATE", "DURATION", "NUMBER":
		var n float64
		ok = json.Unmarshal(v, &n) == nil && n >= 0
	case "PERCENTAGE":
		var n float64
		ok = json.Unmarshal(v, &n) == nil && n >= 0 && n <= 100
	case "TEXT":
		var s string
		ok = json.Unmarshal(v, &s) == nil && checkText("data value", s, maxReportDetails, false) == nil
	case "LINK":
		var l struct {
			LinkText string `json:"linktext"`
			Href     string `json:"href"`
		}
		ok = json.Unmarshal(v, &l) == nil && l.Href != "" && checkInsightURL("link", l.Href) == nil &&
			checkText("link text", l.LinkText, maxReportTitle, false) == nil
	default:
		return problem.New(problem.Invalid, "invalid data type %q (%s)", d.Type, strings.Join(datumTypes, ", "))
	}
	if !ok {
		return problem.New(problem.Invalid, "data field %q: invalid value for type %s", d.Title, orDefault(d.Type, "(none)"))
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func checkReport(r *store.InsightReport, data []InsightDatum) error {
	sha, err := CheckCommitID(r.CommitSHA)
	if err != nil {
		return err
	}
	r.CommitSHA = sha
	if err := ValidReportKey(r.Key); err != nil {
		return err
	}
	if err := checkText("title", r.Title, maxReportTitle, true); err != nil {
		return err
	}
	if err := checkText("details", r.Details, maxReportDetails, false); err != nil {
		return err
	}
	if err := checkText("reporter", r.Reporter, maxReportTitle, false); err != nil {
		return err
	}
	switch r.Result {
	case "", ReportPass, ReportFail:
	default:
		return problem.New(problem.Invalid, "invalid result %q (PASS or FAIL)", r.Result)
	}
	if err := checkInsightURL("link", r.Link); err != nil {
		return err
	}
	if err := checkInsightURL("logoUrl", r.LogoURL); err != nil {
		return err
	}
	if len(data) > MaxReportData {
		return problem.New(problem.Invalid, "a report carries at most %d data fields", MaxReportData)
	}
	for _, d := range data {
		if err := checkDatum(d); err != nil {
			return err
		}
	}
	if data == nil {
		data = []InsightDatum{}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode report data: %w", err)
	}
	r.Data = string(b)
	return nil
}

// PutInsightReport creates or replaces report r (its RepoID, CommitSHA
// and Key) with data. NotFound when the repository does not hold the
// commit.
func (s *Service) PutInsightReport(ctx context.Context, r *store.InsightReport, data []InsightDatum) error {
	if err := checkReport(r, data); err != nil {
		return err
	}
	ok, err := s.holdsCommit(ctx, r.RepoID, r.CommitSHA)
	if err != nil {
		return err
	}
	if !ok {
		return problem.New(problem.NotFound, "commit %s not found", r.CommitSHA)
	}
	return s.ps.PutInsightReport(ctx, r)
}

// ReportData decodes a stored report's data fields.
func ReportData(r *store.InsightReport) []InsightDatum {
	out := []InsightDatum{}
	if err := json.Unmarshal([]byte(r.Data), &out); err != nil || out == nil {
		// Stored only after checkReport encoded it; never expected.
		return []InsightDatum{}
	}
	return out
}

// InsightReport reads report key of a commit in a repository.
func (s *Service) InsightReport(ctx context.Context, repoID int64, sha, key string) (*store.InsightReport, error) {
	sha, err := CheckCommitID(sha)
	if err != nil {
		return nil, err
	}
	if err := ValidReportKey(key); err != nil {
		return nil, problem.New(problem.NotFound, "report not found")
	}
	return s.ps.InsightReport(ctx, repoID, sha, key)
}

// InsightReports lists a commit's reports in a repository, newest first.
func (s *Service) InsightReports(ctx context.Context, repoID int64, sha string) ([]store.InsightReport, error) {
	sha, err := CheckCommitID(sha)
	if err != nil {
		return nil, err
	}
	return s.ps.InsightReports(ctx, repoID, sha)
}

// DeleteInsightReport removes a report and its annotations.
func (s *Service) DeleteInsightReport(ctx context.Context, repoID int64, sha, key string) error {
	r, err := s.InsightReport(ctx, repoID, sha, key)
	if err != nil {
		return err
	}
	return s.ps.DeleteInsightReport(ctx, repoID, r.CommitSHA, r.Key)
}

func checkAnnotation(a *store.InsightAnnotation) error {
	if err := checkText("message", a.Message, maxAnnotationMessage, true); err != nil {
		return err
	}
	if err := checkText("externalId", a.ExternalID, maxReportKey, false); err != nil {
		return err
	}
	if err := checkText("path", a.Path, maxAnnotationPath, false); err != nil {
		return err
	}
	if a.Line < 0 {
		return problem.New(problem.Invalid, "line must not be negative")
	}
	if a.Line > 0 && a.Path == "" {
		return problem.New(problem.Invalid, "an annotation on a line needs a path")
	}
	if !contains(annotationSeverities, a.Severity) {
		return problem.New(problem.Invalid, "invalid severity %q (%s)", a.Severity, strings.Join(annotationSeverities, ", "))
	}
	if a.Type != "" && !contains(annotationTypes, a.Type) {
		return problem.New(problem.Invalid, "invalid annotation type %q (%s)", a.Type, strings.Join(annotationTypes, ", "))
	}
	return checkInsightURL("link", a.Link)
}

// AddInsightAnnotations adds annotations to report key, all or none.
// An annotation with an externalId replaces the report's earlier one
// with that id, as in Bitbucket, so a tool can resend a finding.
func (s *Service) AddInsightAnnotations(ctx context.Context, repoID int64, sha, key string, as []store.InsightAnnotation) error {
	r, err := s.InsightReport(ctx, repoID, sha, key)
	if err != nil {
		return err
	}
	if len(as) == 0 {
		return problem.New(problem.Invalid, "no annotations")
	}
	if len(as) > MaxReportAnnotations {
		return problem.New(problem.Invalid, "a report holds at most %d annotations", MaxReportAnnotations)
	}
	var ext []string
	seen := map[string]bool{}
	for i := range as {
		if err := checkAnnotation(&as[i]); err != nil {
			return err
		}
		if e := as[i].ExternalID; e != "" {
			if seen[e] {
				return problem.New(problem.Invalid, "externalId %q appears twice", e)
			}
			seen[e] = true
			ext = append(ext, e)
		}
	}
	if len(ext) > 0 {
		// Not in the insert's transaction: a failed insert after this
		// leaves the tool's old findings removed, and the tool resends.
		if err := s.ps.DeleteInsightAnnotations(ctx, r.ID, ext); err != nil {
			return err
		}
	}
	return s.ps.AddInsightAnnotations(ctx, r.ID, as, MaxReportAnnotations)
}

// AnnotationFilter narrows a listing of annotations; empty fields match
// everything.
type AnnotationFilter struct {
	ExternalIDs []string
	Paths       []string
	Severities  []string
	Types       []string
}

func (f AnnotationFilter) keep(a store.InsightAnnotation) bool {
	in := func(list []string, v string) bool { return len(list) == 0 || contains(list, v) }
	return in(f.ExternalIDs, a.ExternalID) && in(f.Paths, a.Path) && in(f.Severities, a.Severity) && in(f.Types, a.Type)
}

// InsightAnnotations lists the annotations of report key of a commit, or
// of every report of the commit when key is "", with the reports they
// belong to.
func (s *Service) InsightAnnotations(ctx context.Context, repoID int64, sha, key string, f AnnotationFilter) ([]store.InsightAnnotation, map[int64]*store.InsightReport, error) {
	var reports []store.InsightReport
	if key != "" {
		r, err := s.InsightReport(ctx, repoID, sha, key)
		if err != nil {
			return nil, nil, err
		}
		reports = []store.InsightReport{*r}
	} else {
		var err error
		if reports, err = s.InsightReports(ctx, repoID, sha); err != nil {
			return nil, nil, err
		}
	}
	byID := map[int64]*store.InsightReport{}
	ids := make([]int64, len(reports))
	for i := range reports {
		ids[i] = reports[i].ID
		byID[reports[i].ID] = &reports[i]
	}
	all, err := s.ps.InsightAnnotations(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	out := []store.InsightAnnotation{}
	for _, a := range all {
		if f.keep(a) {
			out = append(out, a)
		}
	}
	return out, byID, nil
}

// DeleteInsightAnnotations removes the annotations of report key with
// one of externalIDs, or all of them when there are none.
func (s *Service) DeleteInsightAnnotations(ctx context.Context, repoID int64, sha, key string, externalIDs []string) error {
	r, err := s.InsightReport(ctx, repoID, sha, key)
	if err != nil {
		return err
	}
	return s.ps.DeleteInsightAnnotations(ctx, r.ID, externalIDs)
}

func checkRequired(r *store.RequiredReport) error {
	if err := ValidReportKey(r.Key); err != nil {
		return err
	}
	if r.Target.Type == "" {
		r.Target.Type = MatchAnyRef
	}
	return ValidRefMatcher(&r.Target)
}

// RequiredReports lists a repository's required reports.
func (s *Service) RequiredReports(ctx context.Context, repoID int64) ([]store.RequiredReport, error) {
	return s.ps.RequiredReports(ctx, repoID)
}

// CreateRequiredReport validates and stores r; a missing target matcher
// means every branch.
func (s *Service) CreateRequiredReport(ctx context.Context, r *store.RequiredReport) error {
	if err := checkRequired(r); err != nil {
		return err
	}
	return s.ps.CreateRequiredReport(ctx, r)
}

// UpdateRequiredReport replaces required report r.ID of r.RepoID.
func (s *Service) UpdateRequiredReport(ctx context.Context, r *store.RequiredReport) error {
	if err := checkRequired(r); err != nil {
		return err
	}
	return s.ps.UpdateRequiredReport(ctx, r)
}

// DeleteRequiredReport removes required report id of repoID.
func (s *Service) DeleteRequiredReport(ctx context.Context, repoID, id int64) error {
	return s.ps.DeleteRequiredReport(ctx, repoID, id)
}

// requiredReportChecks is the required reports merge check: a veto for
// each required report of a matching target branch that has not passed
// on the pull request's source commit in its own repository.
func (s *Service) requiredReportChecks(ctx context.Context, target *store.Repository, pr *store.PullRequest) ([]Veto, error) {
	reqs, err := s.ps.RequiredReports(ctx, target.ID)
	if err != nil {
		return nil, err
	}
	var vetoes []Veto
	for _, rq := range reqs {
		if !refMatches(rq.Target, target, pr.ToRef) {
			continue
		}
		r, err := s.ps.InsightReport(ctx, target.ID, pr.FromSHA, rq.Key)
		switch {
		case problem.Is(err, problem.NotFound):
			vetoes = append(vetoes, Veto{"Required report", fmt.Sprintf("report %q has not been published for the source commit", rq.Key)})
		case err != nil:
			return nil, err
		case r.Result == ReportFail:
			vetoes = append(vetoes, Veto{"Required report", fmt.Sprintf("report %q (%s) failed", rq.Key, r.Title)})
		case r.Result != ReportPass:
			vetoes = append(vetoes, Veto{"Required report", fmt.Sprintf("report %q (%s) has no result yet", rq.Key, r.Title)})
		}
	}
	return vetoes, nil
}
