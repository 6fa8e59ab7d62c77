package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// ReviewStore keeps the review tooling of issue 15: default reviewer
// conditions and Code Insights (reports, their annotations and the
// reports a repository requires before a merge). It is part of
// PullStore; the rules (matcher types, limits, who may change what) live
// in internal/pull and the transports.
type ReviewStore interface {
	// CreateReviewerCondition stores c (exactly one of RepoID and
	// ProjectID set) and sets its ID and CreatedAt.
	CreateReviewerCondition(ctx context.Context, c *ReviewerCondition) error
	// UpdateReviewerCondition replaces the matchers, reviewers and
	// required approvals of the condition c.ID in c's scope; NotFound
	// when that scope has no such condition.
	UpdateReviewerCondition(ctx context.Context, c *ReviewerCondition) error
	// DeleteReviewerCondition removes condition id of the scope (a
	// repository, projectID 0, or a project, repoID 0).
	DeleteReviewerCondition(ctx context.Context, repoID, projectID, id int64) error
	// ReviewerConditions lists the conditions of exactly one scope,
	// oldest first.
	ReviewerConditions(ctx context.Context, repoID, projectID int64) ([]ReviewerCondition, error)
	// ReviewerConditionsFor lists the conditions that apply to a
	// repository: its own and its project's, oldest first.
	ReviewerConditionsFor(ctx context.Context, repoID, projectID int64) ([]ReviewerCondition, error)

	// PutInsightReport creates or replaces the report (RepoID, CommitSHA,
	// Key); a replaced report loses its annotations, as in Bitbucket.
	// Sets ID and CreatedAt.
	PutInsightReport(ctx context.Context, r *InsightReport) error
	InsightReport(ctx context.Context, repoID int64, sha, key string) (*InsightReport, error)
	// InsightReports lists a commit's reports in one repository, newest
	// first.
	InsightReports(ctx context.Context, repoID int64, sha string) ([]InsightReport, error)
	// DeleteInsightReport removes a report and its annotations.
	DeleteInsightReport(ctx context.Context, repoID int64, sha, key string) error
	// AddInsightAnnotations adds as to report reportID, in one
	// transaction, unless the report would then hold more than max
	// (Invalid, nothing added).
	AddInsightAnnotations(ctx context.Context, reportID int64, as []InsightAnnotation, max int) error
	// InsightAnnotations lists annotations of reportIDs, in the order
	// they were added.
	InsightAnnotations(ctx context.Context, reportIDs []int64) ([]InsightAnnotation, error)
	// DeleteInsightAnnotations removes a report's annotations with one of
	// externalIDs, or all of them when externalIDs is empty.
	DeleteInsightAnnotations(ctx context.Context, reportID int64, externalIDs []string) error

	// CreateRequiredReport stores r and sets its ID and CreatedAt.
	CreateRequiredReport(ctx context.Context, r *RequiredReport) error
	// UpdateRequiredReport replaces the key and matcher of r.ID in
	// r.RepoID; NotFound when that repository has none such.
	UpdateRequiredReport(ctx context.Context, r *RequiredReport) error
	DeleteRequiredReport(ctx context.Context, repoID, id int64) error
	// RequiredReports lists a repository's required reports, oldest
	// first.
	RequiredReports(ctx context.Context, repoID int64) ([]RequiredReport, error)
}

// RefMatcher selects branches: Type is BRANCH, PATTERN, ANY_REF,
// MODEL_BRANCH or MODEL_CATEGORY, ID what that type matches.
type RefMatcher struct {
	Type string
	ID   string
}

// ReviewerCondition adds Reviewers to pull requests from a branch Source
// matches into one Target matches, and requires RequiredApprovals of
// them to approve before a merge.
type ReviewerCondition struct {
	ID                int64
	RepoID            int64
	ProjectID         int64
	Source, Target    RefMatcher
	Reviewers         []int64
	RequiredApprovals int
	CreatedAt         time.Time
}

// InsightReport is one Code Insights report on a commit of a repository.
// Data is the JSON array of the report's data fields, kept as sent once
// validated (the API owns its shape).
type InsightReport struct {
	ID        int64
	RepoID    int64
	CommitSHA string
	Key       string
	Title     string
	Details   string
	Result    string // PASS, FAIL or "" (pending)
	Data      string
	Reporter  string
	Link      string
	LogoURL   string
	CreatedAt time.Time
}

// InsightAnnotation is one finding of a report, on a line of a file (Line
// 0: the whole file; Path "": the whole commit).
type InsightAnnotation struct {
	ID         int64
	ReportID   int64
	ExternalID string
	Path       string
	Line       int
	Message    string
	Severity   string // LOW, MEDIUM, HIGH
	Type       string // VULNERABILITY, CODE_SMELL, BUG or ""
	Link       string
	CreatedAt  time.Time
}

// RequiredReport makes a merge into a branch Target matches wait for a
// passing report with Key on the pull request's source commit.
type RequiredReport struct {
	ID        int64
	RepoID    int64
	Key       string
	Target    RefMatcher
	CreatedAt time.Time
}

const conditionCols = `id, repo_id, project_id, source_type, source_id, target_type, target_id, reviewer_ids,
	required_approvals, created_at`

func scanCondition(sc interface{ Scan(...any) error }, c *ReviewerCondition) error {
	var repo, proj sql.NullInt64
	var ids string
	if err := sc.Scan(&c.ID, &repo, &proj, &c.Source.Type, &c.Source.ID, &c.Target.Type, &c.Target.ID, &ids,
		&c.RequiredApprovals, &c.CreatedAt); err != nil {
		return err
	}
	c.RepoID, c.ProjectID, c.Reviewers, c.CreatedAt = repo.Int64, proj.Int64, splitIDs(ids), c.CreatedAt.UTC()
	return nil
}

func oneScope(repoID, projectID int64) error {
	if (repoID == 0) == (projectID == 0) {
		return problem.New(problem.Invalid, "a condition belongs to exactly one repository or project")
	}
	return nil
}

func (d *DB) CreateReviewerCondition(ctx context.Context, c *ReviewerCondition) error {
	if err := oneScope(c.RepoID, c.ProjectID); err != nil {
		return err
	}
	c.CreatedAt = now()
	err := d.queryRow(ctx, `INSERT INTO default_reviewer_conditions (repo_id, project_id, source_type, source_id, target_type, target_id,
		reviewer_ids, required_approvals, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		nullID(c.RepoID), nullID(c.ProjectID), c.Source.Type, c.Source.ID, c.Target.Type, c.Target.ID, joinIDs(c.Reviewers),
		c.RequiredApprovals, c.CreatedAt).Scan(&c.ID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository or project not found")
	}
	return d.fail(err, "create reviewer condition")
}

// scopeClause picks the scope column, so that an id from another
// repository or project never matches.
func scopeClause(repoID, projectID int64) (string, int64) {
	if repoID != 0 {
		return "repo_id = ?", repoID
	}
	return "project_id = ?", projectID
}

func (d *DB) UpdateReviewerCondition(ctx context.Context, c *ReviewerCondition) error {
	if err := oneScope(c.RepoID, c.ProjectID); err != nil {
		return err
	}
	where, scope := scopeClause(c.RepoID, c.ProjectID)
	res, err := d.exec(ctx, `UPDATE default_reviewer_conditions SET source_type = ?, source_id = ?, target_type = ?, target_id = ?,
		reviewer_ids = ?, required_approvals = ? WHERE id = ? AND `+where,
		c.Source.Type, c.Source.ID, c.Target.Type, c.Target.ID, joinIDs(c.Reviewers), c.RequiredApprovals, c.ID, scope)
	if err := d.mustAffect(res, err, "update reviewer condition", "condition not found"); err != nil {
		return err
	}
	got, err := d.reviewerCondition(ctx, c.ID)
	if err != nil {
		return err
	}
	*c = *got
	return nil
}

func (d *DB) reviewerCondition(ctx context.Context, id int64) (*ReviewerCondition, error) {
	var c ReviewerCondition
	if err := scanCondition(d.queryRow(ctx, "SELECT "+conditionCols+" FROM default_reviewer_conditions WHERE id = ?", id), &c); err != nil {
		return nil, d.notFound(err, "reviewer condition", "condition not found")
	}
	return &c, nil
}

func (d *DB) DeleteReviewerCondition(ctx context.Context, repoID, projectID, id int64) error {
	if err := oneScope(repoID, projectID); err != nil {
		return err
	}
	where, scope := scopeClause(repoID, projectID)
	res, err := d.exec(ctx, "DELETE FROM default_reviewer_conditions WHERE id = ? AND "+where, id, scope)
	return d.mustAffect(res, err, "delete reviewer condition", "condition not found")
}

func (d *DB) ReviewerConditions(ctx context.Context, repoID, projectID int64) ([]ReviewerCondition, error) {
	if err := oneScope(repoID, projectID); err != nil {
		return nil, err
	}
	where, scope := scopeClause(repoID, projectID)
	rows, err := d.query(ctx, "SELECT "+conditionCols+" FROM default_reviewer_conditions WHERE "+where+" ORDER BY id", scope)
	if err != nil {
		return nil, d.fail(err, "reviewer conditions")
	}
	return collect(rows, d, "reviewer conditions", scanCondition)
}

func (d *DB) ReviewerConditionsFor(ctx context.Context, repoID, projectID int64) ([]ReviewerCondition, error) {
	rows, err := d.query(ctx, "SELECT "+conditionCols+" FROM default_reviewer_conditions WHERE repo_id = ? OR project_id = ? ORDER BY id",
		repoID, projectID)
	if err != nil {
		return nil, d.fail(err, "reviewer conditions for")
	}
	return collect(rows, d, "reviewer conditions for", scanCondition)
}

const reportCols = "id, repo_id, commit_sha, report_key, title, details, result, data, reporter, link, logo_url, created_at"

func scanReport(sc interface{ Scan(...any) error }, r *InsightReport) error {
	if err := sc.Scan(&r.ID, &r.RepoID, &r.CommitSHA, &r.Key, &r.Title, &r.Details, &r.Result, &r.Data, &r.Reporter, &r.Link,
		&r.LogoURL, &r.CreatedAt); err != nil {
		return err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return nil
}

func (d *DB) PutInsightReport(ctx context.Context, r *InsightReport) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now()
	}
	err := d.tx(ctx, func(tx *sql.Tx) error {
		// Delete and insert rather than upsert: the new report starts
		// without the old one's annotations, and ON DELETE CASCADE
		// removes those in the same transaction.
		if _, err := tx.ExecContext(ctx, d.q("DELETE FROM insight_reports WHERE repo_id = ? AND commit_sha = ? AND report_key = ?"),
			r.RepoID, r.CommitSHA, r.Key); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, d.q(`INSERT INTO insight_reports (repo_id, commit_sha, report_key, title, details, result, data,
			reporter, link, logo_url, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
			r.RepoID, r.CommitSHA, r.Key, r.Title, r.Details, r.Result, r.Data, r.Reporter, r.Link, r.LogoURL, r.CreatedAt).Scan(&r.ID)
	})
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository not found")
	}
	if isUnique(err) {
		// Two reporters replaced the same report at once; the other won.
		return problem.New(problem.Conflict, "report %q was replaced concurrently; try again", r.Key)
	}
	return d.fail(err, "put insight report")
}

func (d *DB) InsightReport(ctx context.Context, repoID int64, sha, key string) (*InsightReport, error) {
	var r InsightReport
	err := scanReport(d.queryRow(ctx, "SELECT "+reportCols+" FROM insight_reports WHERE repo_id = ? AND commit_sha = ? AND report_key = ?",
		repoID, sha, key), &r)
	if err != nil {
		return nil, d.notFound(err, "insight report", "report not found")
	}
	return &r, nil
}

func (d *DB) InsightReports(ctx context.Context, repoID int64, sha string) ([]InsightReport, error) {
	rows, err := d.query(ctx, "SELECT "+reportCols+" FROM insight_reports WHERE repo_id = ? AND commit_sha = ? ORDER BY created_at DESC, id DESC",
		repoID, sha)
	if err != nil {
		return nil, d.fail(err, "insight reports")
	}
	return collect(rows, d, "insight reports", scanReport)
}

func (d *DB) DeleteInsightReport(ctx context.Context, repoID int64, sha, key string) error {
	res, err := d.exec(ctx, "DELETE FROM insight_reports WHERE repo_id = ? AND commit_sha = ? AND report_key = ?", repoID, sha, key)
	return d.mustAffect(res, err, "delete insight report", "report not found")
}

const annotationCols = "id, report_id, external_id, path, line, message, severity, type, link, created_at"

func scanAnnotation(sc interface{ Scan(...any) error }, a *InsightAnnotation) error {
	if err := sc.Scan(&a.ID, &a.ReportID, &a.ExternalID, &a.Path, &a.Line, &a.Message, &a.Severity, &a.Type, &a.Link, &a.CreatedAt); err != nil {
		return err
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return nil
}

func (d *DB) AddInsightAnnotations(ctx context.Context, reportID int64, as []InsightAnnotation, max int) error {
	t := now()
	err := d.tx(ctx, func(tx *sql.Tx) error {
		// Lock the report row first so that two concurrent batches cannot
		// both pass the count below (SQLite serialises writers anyway).
		var id int64
		lock := "SELECT id FROM insight_reports WHERE id = ?"
		if d.dialect == "postgres" {
			lock += " FOR UPDATE"
		}
		if err := tx.QueryRowContext(ctx, d.q(lock), reportID).Scan(&id); err != nil {
			return d.notFound(err, "lock insight report", "report not found")
		}
		var n int
		if err := tx.QueryRowContext(ctx, d.q("SELECT count(*) FROM insight_annotations WHERE report_id = ?"), reportID).Scan(&n); err != nil {
			return err
		}
		if n+len(as) > max {
			return problem.New(problem.Invalid, "a report holds at most %d annotations (%d stored, %d sent)", max, n, len(as))
		}
		for i := range as {
			a := &as[i]
			a.ReportID, a.CreatedAt = reportID, t
			if err := tx.QueryRowContext(ctx, d.q(`INSERT INTO insight_annotations (report_id, external_id, path, line, message, severity,
				type, link, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
				reportID, a.ExternalID, a.Path, a.Line, a.Message, a.Severity, a.Type, a.Link, t).Scan(&a.ID); err != nil {
				return err
			}
		}
		return nil
	})
	return d.fail(err, "add insight annotations")
}

func (d *DB) InsightAnnotations(ctx context.Context, reportIDs []int64) ([]InsightAnnotation, error) {
	if len(reportIDs) == 0 {
		return nil, nil
	}
	args := make([]any, len(reportIDs))
	for i, id := range reportIDs {
		args[i] = id
	}
	rows, err := d.queryDynamic(ctx, "SELECT "+annotationCols+" FROM insight_annotations WHERE report_id IN ("+reviewMarks(len(args))+
		") ORDER BY id", args...)
	if err != nil {
		return nil, d.fail(err, "insight annotations")
	}
	return collect(rows, d, "insight annotations", scanAnnotation)
}

func (d *DB) DeleteInsightAnnotations(ctx context.Context, reportID int64, externalIDs []string) error {
	if len(externalIDs) == 0 {
		_, err := d.exec(ctx, "DELETE FROM insight_annotations WHERE report_id = ?", reportID)
		return d.fail(err, "delete insight annotations")
	}
	args := []any{reportID}
	for _, e := range externalIDs {
		args = append(args, e)
	}
	_, err := d.execDynamic(ctx, "DELETE FROM insight_annotations WHERE report_id = ? AND external_id IN ("+reviewMarks(len(externalIDs))+")",
		args...)
	return d.fail(err, "delete insight annotations")
}

const requiredCols = "id, repo_id, report_key, target_type, target_id, created_at"

func scanRequired(sc interface{ Scan(...any) error }, r *RequiredReport) error {
	if err := sc.Scan(&r.ID, &r.RepoID, &r.Key, &r.Target.Type, &r.Target.ID, &r.CreatedAt); err != nil {
		return err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return nil
}

func (d *DB) CreateRequiredReport(ctx context.Context, r *RequiredReport) error {
	r.CreatedAt = now()
	err := d.queryRow(ctx, `INSERT INTO insight_required_reports (repo_id, report_key, target_type, target_id, created_at)
		VALUES (?, ?, ?, ?, ?) RETURNING id`, r.RepoID, r.Key, r.Target.Type, r.Target.ID, r.CreatedAt).Scan(&r.ID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository not found")
	}
	return d.fail(err, "create required report")
}

func (d *DB) UpdateRequiredReport(ctx context.Context, r *RequiredReport) error {
	res, err := d.exec(ctx, "UPDATE insight_required_reports SET report_key = ?, target_type = ?, target_id = ? WHERE id = ? AND repo_id = ?",
		r.Key, r.Target.Type, r.Target.ID, r.ID, r.RepoID)
	if err := d.mustAffect(res, err, "update required report", "required report not found"); err != nil {
		return err
	}
	return scanRequired(d.queryRow(ctx, "SELECT "+requiredCols+" FROM insight_required_reports WHERE id = ?", r.ID), r)
}

func (d *DB) DeleteRequiredReport(ctx context.Context, repoID, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM insight_required_reports WHERE id = ? AND repo_id = ?", id, repoID)
	return d.mustAffect(res, err, "delete required report", "required report not found")
}

func (d *DB) RequiredReports(ctx context.Context, repoID int64) ([]RequiredReport, error) {
	rows, err := d.query(ctx, "SELECT "+requiredCols+" FROM insight_required_reports WHERE repo_id = ? ORDER BY id", repoID)
	if err != nil {
		return nil, d.fail(err, "required reports")
	}
	return collect(rows, d, "required reports", scanRequired)
}

// reviewMarks is n comma-separated placeholders for an IN list.
func reviewMarks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
