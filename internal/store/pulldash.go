package store

import (
	"context"
	"database/sql"
	"strings"
)

// The dashboard's pull requests, across repositories: "my open pull
// requests" and "reviews waiting for me". Both are one query each instead
// of a scan of the user's repositories (which can only ever look at a
// bounded number of them and misses the rest), served by the indexes of
// migration 00012: pull_requests (author_id, state, updated_at) and
// pull_request_participants (user_id, status, role).
//
// Visibility is narrowed in SQL with the same condition as
// RecentlyPushedRepos (readableRepo, see dashboard.go): a user who lost
// read access to a repository does not see its pull requests, and those
// do not use up the limit. As there, the web UI still passes each row
// through auth.Authorize.

// DashboardPull is an open pull request with its target repository.
type DashboardPull struct {
	PullRequest
	Repo Repository
}

// dashPullCols are pullCols of the pull_requests row aliased pr.
var dashPullCols = func() string {
	cols := strings.Split(pullCols, ",")
	for i, c := range cols {
		cols[i] = "pr." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}()

const dashPullFrom = ` FROM pull_requests pr
	JOIN repositories r ON r.id = pr.repo_id
	JOIN projects p ON p.id = r.project_id `

func scanDashPull(sc interface{ Scan(...any) error }, dp *DashboardPull) error {
	return scanPullRepo(sc, &dp.PullRequest, &dp.Repo)
}

// OpenPullRequestsAuthoredBy lists up to limit open pull requests userID
// created, in repositories the user may still read, most recently
// updated first.
func (d *DB) OpenPullRequestsAuthoredBy(ctx context.Context, userID int64, limit int) ([]DashboardPull, error) {
	limit = max(1, min(limit, 1000))
	query := "SELECT " + dashPullCols + ", " + repoCols + dashPullFrom + `
		WHERE pr.author_id = ? AND pr.state = '` + PullOpen + `' AND ` + readableRepo + `
		ORDER BY pr.updated_at DESC, pr.id DESC
		LIMIT ?`
	args := append([]any{userID}, readableArgs(userID)...)
	rows, err := d.query(ctx, query, append(args, limit)...)
	if err != nil {
		return nil, d.fail(err, "list authored pull requests")
	}
	return collect(rows, d, "list authored pull requests", scanDashPull)
}

// OpenPullRequestsToReview lists up to limit open pull requests on which
// userID is a reviewer who has not reviewed yet (UNAPPROVED), in
// repositories the user may read, most recently updated first.
func (d *DB) OpenPullRequestsToReview(ctx context.Context, userID int64, limit int) ([]DashboardPull, error) {
	limit = max(1, min(limit, 1000))
	query := "SELECT " + dashPullCols + ", " + repoCols + dashPullFrom + `
		JOIN pull_request_participants me ON me.pr_id = pr.id
		WHERE me.user_id = ? AND me.status = '` + StatusUnapproved + `' AND me.role = '` + RoleReviewer + `'
		AND pr.state = '` + PullOpen + `' AND ` + readableRepo + `
		ORDER BY pr.updated_at DESC, pr.id DESC
		LIMIT ?`
	args := append([]any{userID}, readableArgs(userID)...)
	rows, err := d.query(ctx, query, append(args, limit)...)
	if err != nil {
		return nil, d.fail(err, "list pull requests to review")
	}
	return collect(rows, d, "list pull requests to review", scanDashPull)
}

// scanPullRepo scans dashPullCols then repoCols, with the same
// conversions as scanPull and scanRepo.
func scanPullRepo(sc interface{ Scan(...any) error }, pr *PullRequest, r *Repository) error {
	var author, fork sql.NullInt64
	var closed, pushed sql.NullTime
	if err := sc.Scan(&pr.ID, &pr.RepoID, &pr.Number, &pr.FromRepoID, &pr.FromRef, &pr.FromSHA, &pr.ToRef, &pr.ToSHA,
		&pr.BaseSHA, &pr.Title, &pr.Description, &pr.State, &author, &pr.Version, &pr.MergeStatus, &pr.Conflicts,
		&pr.MergeSHA, &pr.CreatedAt, &pr.UpdatedAt, &closed,
		&r.ID, &r.ProjectID, &r.ProjectKey, &r.Slug, &r.Name, &r.Description, &r.Public,
		&r.DefaultBranch, &fork, &r.CreatedAt, &pushed); err != nil {
		return err
	}
	pr.AuthorID = author.Int64
	pr.CreatedAt, pr.UpdatedAt, pr.ClosedAt = pr.CreatedAt.UTC(), pr.UpdatedAt.UTC(), timePtr(closed)
	r.ForkOf = fork.Int64
	r.CreatedAt = r.CreatedAt.UTC()
	r.PushedAt = timeVal(pushed)
	return nil
}
