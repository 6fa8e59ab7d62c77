package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
)

var _ PullStore = (*DB)(nil)

const pullCols = `id, repo_id, number, from_repo_id, from_ref, from_sha, to_ref, to_sha, base_sha, title, description,
	state, author_id, version, merge_status, conflicts, merge_sha, created_at, updated_at, closed_at`

func scanPull(sc interface{ Scan(...any) error }, pr *PullRequest) error {
	var author sql.NullInt64
	var closed sql.NullTime
	if err := sc.Scan(&pr.ID, &pr.RepoID, &pr.Number, &pr.FromRepoID, &pr.FromRef, &pr.FromSHA, &pr.ToRef, &pr.ToSHA,
		&pr.BaseSHA, &pr.Title, &pr.Description, &pr.State, &author, &pr.Version, &pr.MergeStatus, &pr.Conflicts,
		&pr.MergeSHA, &pr.CreatedAt, &pr.UpdatedAt, &closed); err != nil {
		return err
	}
	pr.AuthorID = author.Int64
	pr.CreatedAt, pr.UpdatedAt, pr.ClosedAt = pr.CreatedAt.UTC(), pr.UpdatedAt.UTC(), timePtr(closed)
	return nil
}

// CreatePullRequest numbers the pull request max+1 within its target
// repository inside the inserting transaction; two creations racing for
// the same number meet the unique index and the loser tries again.
func (d *DB) CreatePullRequest(ctx context.Context, pr *PullRequest, participants []Participant) error {
	created := now()
	if pr.State == "" {
		pr.State = PullOpen
	}
	if pr.MergeStatus == "" {
		pr.MergeStatus = "UNKNOWN"
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = d.tx(ctx, func(tx *sql.Tx) error {
			var n int64
			if err := tx.QueryRowContext(ctx, d.q("SELECT COALESCE(MAX(number), 0) + 1 FROM pull_requests WHERE repo_id = ?"), pr.RepoID).Scan(&n); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, d.q(`INSERT INTO pull_requests (repo_id, number, from_repo_id, from_ref, from_sha, to_ref, to_sha,
				base_sha, title, description, state, author_id, version, merge_status, conflicts, merge_sha, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, '', '', ?, ?) RETURNING id`),
				pr.RepoID, n, pr.FromRepoID, pr.FromRef, pr.FromSHA, pr.ToRef, pr.ToSHA, pr.BaseSHA, pr.Title, pr.Description,
				pr.State, nullID(pr.AuthorID), pr.MergeStatus, created, created).Scan(&pr.ID); err != nil {
				return err
			}
			for _, p := range participants {
				if _, err := tx.ExecContext(ctx, d.q("INSERT INTO pull_request_participants (pr_id, user_id, role, status) VALUES (?, ?, ?, ?)"),
					pr.ID, p.UserID, p.Role, p.Status); err != nil {
					return err
				}
			}
			pr.Number = n
			return nil
		})
		if !isUnique(err) {
			break
		}
	}
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository or user not found")
	}
	if err != nil {
		return d.fail(err, "create pull request")
	}
	pr.Version, pr.CreatedAt, pr.UpdatedAt = 0, created, created
	return nil
}

func (d *DB) PullRequestByID(ctx context.Context, id int64) (*PullRequest, error) {
	var pr PullRequest
	if err := scanPull(d.queryRow(ctx, "SELECT "+pullCols+" FROM pull_requests WHERE id = ?", id), &pr); err != nil {
		return nil, d.notFound(err, "pull request by id", "pull request not found")
	}
	return &pr, nil
}

func (d *DB) PullRequestByNumber(ctx context.Context, repoID, number int64) (*PullRequest, error) {
	var pr PullRequest
	if err := scanPull(d.queryRow(ctx, "SELECT "+pullCols+" FROM pull_requests WHERE repo_id = ? AND number = ?", repoID, number), &pr); err != nil {
		return nil, d.notFound(err, "pull request by number", "pull request not found")
	}
	return &pr, nil
}

func (d *DB) ListPullRequests(ctx context.Context, f PullFilter, p Page) ([]PullRequest, error) {
	limit, offset := p.Bounds()
	where := []string{"repo_id = ?"}
	args := []any{f.RepoID}
	// Numbers count per target repository; across targets, creation
	// order is the id's.
	orderBy := "number"
	if f.FromRepoID != 0 && f.RepoID == 0 {
		where, args, orderBy = []string{"from_repo_id = ?"}, []any{f.FromRepoID}, "id"
	} else if f.FromRepoID != 0 {
		where, args = append(where, "from_repo_id = ?"), append(args, f.FromRepoID)
	}
	if f.State != "" && f.State != "ALL" {
		where = append(where, "state = ?")
		args = append(args, f.State)
	}
	if f.AuthorID != 0 {
		where = append(where, "author_id = ?")
		args = append(args, f.AuthorID)
	}
	order := "DESC"
	if f.Oldest {
		order = "ASC"
	}
	args = append(args, limit, offset)
	rows, err := d.query(ctx, "SELECT "+pullCols+" FROM pull_requests WHERE "+strings.Join(where, " AND ")+
		" ORDER BY "+orderBy+" "+order+" LIMIT ? OFFSET ?", args...)
	if err != nil {
		return nil, d.fail(err, "list pull requests")
	}
	return collect(rows, d, "list pull requests", scanPull)
}

func (d *DB) OpenPullRequestsTouching(ctx context.Context, repoID int64, refs []string) ([]PullRequest, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(refs)), ", ")
	args := []any{PullOpen, repoID}
	for _, r := range refs {
		args = append(args, r)
	}
	args = append(args, repoID)
	for _, r := range refs {
		args = append(args, r)
	}
	query := d.queryDynamic
	if len(refs) == 1 {
		// Every push to one branch asks this: one text, kept prepared.
		query = d.query
	}
	rows, err := query(ctx, "SELECT "+pullCols+" FROM pull_requests WHERE state = ? AND ((repo_id = ? AND to_ref IN ("+marks+
		")) OR (from_repo_id = ? AND from_ref IN ("+marks+"))) ORDER BY id", args...)
	if err != nil {
		return nil, d.fail(err, "open pull requests touching")
	}
	return collect(rows, d, "open pull requests touching", scanPull)
}

// versionConflict tells a missing row from a stale version after an
// UPDATE … WHERE version = ? changed nothing.
func (d *DB) versionConflict(ctx context.Context, table string, id int64, what string) error {
	var v int64
	err := d.queryRow(ctx, "SELECT version FROM "+table+" WHERE id = ?", id).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return problem.New(problem.NotFound, "%s not found", what)
	}
	if err != nil {
		return d.fail(err, "read version")
	}
	return problem.New(problem.Conflict, "the %s was changed by someone else (now at version %d); reload it and try again", what, v)
}

func (d *DB) UpdatePullRequest(ctx context.Context, pr *PullRequest, expectVersion int64) error {
	t := now()
	res, err := d.exec(ctx, `UPDATE pull_requests SET title = ?, description = ?, state = ?, merge_sha = ?, closed_at = ?,
		to_ref = ?, version = version + 1, updated_at = ? WHERE id = ? AND version = ?`,
		pr.Title, pr.Description, pr.State, pr.MergeSHA, nullTimePtr(pr.ClosedAt), pr.ToRef, t, pr.ID, expectVersion)
	if err != nil {
		return d.fail(err, "update pull request")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return d.versionConflict(ctx, "pull_requests", pr.ID, "pull request")
	}
	pr.Version, pr.UpdatedAt = expectVersion+1, t
	return nil
}

func (d *DB) DeletePullRequest(ctx context.Context, id, expectVersion int64) error {
	// The rows that belong to it go with it (ON DELETE CASCADE).
	res, err := d.exec(ctx, "DELETE FROM pull_requests WHERE id = ? AND version = ?", id, expectVersion)
	if err != nil {
		return d.fail(err, "delete pull request")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return d.versionConflict(ctx, "pull_requests", id, "pull request")
	}
	return nil
}

func (d *DB) RescopePullRequest(ctx context.Context, id int64, oldFrom, oldTo, from, to, base string) (bool, error) {
	res, err := d.exec(ctx, `UPDATE pull_requests SET from_sha = ?, to_sha = ?, base_sha = ?, merge_status = 'UNKNOWN', conflicts = '',
		updated_at = ? WHERE id = ? AND from_sha = ? AND to_sha = ?`, from, to, base, now(), id, oldFrom, oldTo)
	if err != nil {
		return false, d.fail(err, "rescope pull request")
	}
	n, err := res.RowsAffected()
	return n > 0, d.fail(err, "rescope pull request")
}

func (d *DB) SetMergeStatus(ctx context.Context, id int64, from, to, status, conflicts string) error {
	_, err := d.exec(ctx, "UPDATE pull_requests SET merge_status = ?, conflicts = ? WHERE id = ? AND from_sha = ? AND to_sha = ?",
		status, conflicts, id, from, to)
	return d.fail(err, "set merge status")
}

func (d *DB) Participants(ctx context.Context, prID int64) ([]Participant, error) {
	rows, err := d.query(ctx, "SELECT user_id, role, status FROM pull_request_participants WHERE pr_id = ? ORDER BY user_id", prID)
	if err != nil {
		return nil, d.fail(err, "participants")
	}
	return collect(rows, d, "participants", func(sc interface{ Scan(...any) error }, p *Participant) error {
		return sc.Scan(&p.UserID, &p.Role, &p.Status)
	})
}

func (d *DB) PutParticipant(ctx context.Context, prID int64, p Participant) error {
	_, err := d.exec(ctx, `INSERT INTO pull_request_participants (pr_id, user_id, role, status) VALUES (?, ?, ?, ?)
		ON CONFLICT (pr_id, user_id) DO UPDATE SET role = excluded.role, status = excluded.status`, prID, p.UserID, p.Role, p.Status)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "pull request or user not found")
	}
	return d.fail(err, "put participant")
}

func (d *DB) ResetApprovals(ctx context.Context, prID int64) error {
	_, err := d.exec(ctx, "UPDATE pull_request_participants SET status = ? WHERE pr_id = ? AND status = ?", StatusUnapproved, prID, StatusApproved)
	return d.fail(err, "reset approvals")
}

const commentCols = `id, pr_id, parent_id, author_id, text, severity, state, version, anchor_path, anchor_line, anchor_line_type,
	anchor_file_type, anchor_from_sha, anchor_to_sha, outdated, created_at, updated_at`

func scanComment(sc interface{ Scan(...any) error }, c *PullComment) error {
	var parent, author sql.NullInt64
	if err := sc.Scan(&c.ID, &c.PRID, &parent, &author, &c.Text, &c.Severity, &c.State, &c.Version, &c.Path, &c.Line,
		&c.LineType, &c.FileType, &c.FromSHA, &c.ToSHA, &c.Outdated, &c.Created, &c.Updated); err != nil {
		return err
	}
	c.ParentID, c.AuthorID = parent.Int64, author.Int64
	c.Created, c.Updated = c.Created.UTC(), c.Updated.UTC()
	return nil
}

func (d *DB) CreateComment(ctx context.Context, c *PullComment) error {
	t := now()
	if c.Severity == "" {
		c.Severity = "NORMAL"
	}
	if c.State == "" {
		c.State = "OPEN"
	}
	err := d.queryRow(ctx, `INSERT INTO pull_request_comments (pr_id, parent_id, author_id, text, severity, state, version,
		anchor_path, anchor_line, anchor_line_type, anchor_file_type, anchor_from_sha, anchor_to_sha, outdated, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		c.PRID, nullID(c.ParentID), nullID(c.AuthorID), c.Text, c.Severity, c.State, c.Path, c.Line, c.LineType, c.FileType,
		c.FromSHA, c.ToSHA, c.Outdated, t, t).Scan(&c.ID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "pull request or parent comment not found")
	}
	if err != nil {
		return d.fail(err, "create comment")
	}
	c.Version, c.Created, c.Updated = 0, t, t
	return nil
}

func (d *DB) CommentByID(ctx context.Context, prID, id int64) (*PullComment, error) {
	var c PullComment
	if err := scanComment(d.queryRow(ctx, "SELECT "+commentCols+" FROM pull_request_comments WHERE id = ? AND pr_id = ?", id, prID), &c); err != nil {
		return nil, d.notFound(err, "comment by id", "comment not found")
	}
	return &c, nil
}

func (d *DB) ListComments(ctx context.Context, prID int64) ([]PullComment, error) {
	rows, err := d.query(ctx, "SELECT "+commentCols+" FROM pull_request_comments WHERE pr_id = ? ORDER BY id", prID)
	if err != nil {
		return nil, d.fail(err, "list comments")
	}
	return collect(rows, d, "list comments", scanComment)
}

func (d *DB) UpdateComment(ctx context.Context, c *PullComment, expectVersion int64) error {
	t := now()
	res, err := d.exec(ctx, `UPDATE pull_request_comments SET text = ?, severity = ?, state = ?, version = version + 1, updated_at = ?
		WHERE id = ? AND pr_id = ? AND version = ?`, c.Text, c.Severity, c.State, t, c.ID, c.PRID, expectVersion)
	if err != nil {
		return d.fail(err, "update comment")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return d.versionConflict(ctx, "pull_request_comments", c.ID, "comment")
	}
	c.Version, c.Updated = expectVersion+1, t
	return nil
}

func (d *DB) MoveComment(ctx context.Context, c *PullComment) error {
	_, err := d.exec(ctx, `UPDATE pull_request_comments SET anchor_path = ?, anchor_line = ?, anchor_from_sha = ?, anchor_to_sha = ?,
		outdated = ? WHERE id = ?`, c.Path, c.Line, c.FromSHA, c.ToSHA, c.Outdated, c.ID)
	return d.fail(err, "move comment")
}

func (d *DB) DeleteComment(ctx context.Context, prID, id, expectVersion int64) error {
	res, err := d.exec(ctx, "DELETE FROM pull_request_comments WHERE id = ? AND pr_id = ? AND version = ?", id, prID, expectVersion)
	if err != nil {
		return d.fail(err, "delete comment")
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return d.versionConflict(ctx, "pull_request_comments", id, "comment")
	}
	return nil
}

func (d *DB) AddActivity(ctx context.Context, a *PullActivity) error {
	a.CreatedAt = now()
	err := d.queryRow(ctx, `INSERT INTO pull_request_activities (pr_id, user_id, action, comment_id, detail, created_at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`, a.PRID, nullID(a.UserID), a.Action, nullID(a.CommentID), a.Detail, a.CreatedAt).Scan(&a.ID)
	return d.fail(err, "add activity")
}

func (d *DB) ListActivities(ctx context.Context, prID int64, p Page) ([]PullActivity, error) {
	limit, offset := p.Bounds()
	rows, err := d.query(ctx, `SELECT id, pr_id, user_id, action, comment_id, detail, created_at FROM pull_request_activities
		WHERE pr_id = ? ORDER BY id DESC LIMIT ? OFFSET ?`, prID, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list activities")
	}
	return collect(rows, d, "list activities", func(sc interface{ Scan(...any) error }, a *PullActivity) error {
		var user, comment sql.NullInt64
		if err := sc.Scan(&a.ID, &a.PRID, &user, &a.Action, &comment, &a.Detail, &a.CreatedAt); err != nil {
			return err
		}
		a.UserID, a.CommentID, a.CreatedAt = user.Int64, comment.Int64, a.CreatedAt.UTC()
		return nil
	})
}

func (d *DB) PutPullDiff(ctx context.Context, pd *PullDiff) error {
	pd.CreatedAt = now()
	if pd.Diff == nil {
		pd.Diff = []byte{} // an empty diff is a diff, not NULL
	}
	_, err := d.exec(ctx, `INSERT INTO pull_request_diffs (pr_id, base_sha, from_sha, stat, diff, truncated, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pr_id) DO UPDATE SET base_sha = excluded.base_sha, from_sha = excluded.from_sha,
		stat = excluded.stat, diff = excluded.diff, truncated = excluded.truncated, created_at = excluded.created_at`,
		pd.PRID, pd.BaseSHA, pd.FromSHA, pd.Stat, pd.Diff, pd.Truncated, pd.CreatedAt)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "pull request not found")
	}
	return d.fail(err, "put pull diff")
}

func (d *DB) PullDiff(ctx context.Context, prID int64) (*PullDiff, error) {
	var pd PullDiff
	err := d.queryRow(ctx, "SELECT pr_id, base_sha, from_sha, stat, diff, truncated, created_at FROM pull_request_diffs WHERE pr_id = ?", prID).
		Scan(&pd.PRID, &pd.BaseSHA, &pd.FromSHA, &pd.Stat, &pd.Diff, &pd.Truncated, &pd.CreatedAt)
	if err != nil {
		return nil, d.notFound(err, "pull diff", "diff not computed")
	}
	pd.CreatedAt = pd.CreatedAt.UTC()
	return &pd, nil
}

const buildCols = `id, repo_id, commit_sha, key, state, name, url, description, ref, parent, build_number, duration_ms,
	tests_successful, tests_failed, tests_skipped, created_at, updated_at`

func (d *DB) PutBuildStatus(ctx context.Context, b *BuildStatus, repoIDs []int64) error {
	t := now()
	var ok, failed, skipped sql.NullInt64
	if b.Tests != nil {
		ok = sql.NullInt64{Int64: b.Tests.Successful, Valid: true}
		failed = sql.NullInt64{Int64: b.Tests.Failed, Valid: true}
		skipped = sql.NullInt64{Int64: b.Tests.Skipped, Valid: true}
	}
	err := d.tx(ctx, func(tx *sql.Tx) error {
		for _, repoID := range repoIDs {
			err := tx.QueryRowContext(ctx, d.q(`INSERT INTO repo_build_statuses (repo_id, commit_sha, key, state, name, url, description,
				ref, parent, build_number, duration_ms, tests_successful, tests_failed, tests_skipped, created_at, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (repo_id, commit_sha, key) DO UPDATE SET state = excluded.state, name = excluded.name,
				url = excluded.url, description = excluded.description, ref = excluded.ref, parent = excluded.parent,
				build_number = excluded.build_number, duration_ms = excluded.duration_ms,
				tests_successful = excluded.tests_successful, tests_failed = excluded.tests_failed,
				tests_skipped = excluded.tests_skipped, updated_at = excluded.updated_at RETURNING id`),
				repoID, b.CommitSHA, b.Key, b.State, b.Name, b.URL, b.Description, b.Ref, b.Parent, b.BuildNumber, b.DurationMS,
				ok, failed, skipped, t, t).Scan(&b.ID)
			if err != nil {
				return err
			}
		}
		return nil
	})
	b.UpdatedAt = t
	return d.fail(err, "put build status")
}

func (d *DB) BuildStatuses(ctx context.Context, sha string) ([]BuildStatus, error) {
	rows, err := d.query(ctx, "SELECT "+buildCols+" FROM repo_build_statuses WHERE commit_sha = ? ORDER BY updated_at DESC, id DESC", sha)
	if err != nil {
		return nil, d.fail(err, "build statuses")
	}
	return collect(rows, d, "build statuses", scanBuild)
}

func (d *DB) RepoBuildStatuses(ctx context.Context, repoID int64, sha string) ([]BuildStatus, error) {
	rows, err := d.query(ctx, "SELECT "+buildCols+" FROM repo_build_statuses WHERE repo_id = ? AND commit_sha = ? ORDER BY updated_at DESC, id DESC",
		repoID, sha)
	if err != nil {
		return nil, d.fail(err, "build statuses")
	}
	return collect(rows, d, "build statuses", scanBuild)
}

func scanBuild(sc interface{ Scan(...any) error }, b *BuildStatus) error {
	var ok, failed, skipped sql.NullInt64
	if err := sc.Scan(&b.ID, &b.RepoID, &b.CommitSHA, &b.Key, &b.State, &b.Name, &b.URL, &b.Description, &b.Ref, &b.Parent,
		&b.BuildNumber, &b.DurationMS, &ok, &failed, &skipped, &b.CreatedAt, &b.UpdatedAt); err != nil {
		return err
	}
	if ok.Valid || failed.Valid || skipped.Valid {
		b.Tests = &TestResults{Successful: ok.Int64, Failed: failed.Int64, Skipped: skipped.Int64}
	}
	b.CreatedAt, b.UpdatedAt = b.CreatedAt.UTC(), b.UpdatedAt.UTC()
	return nil
}

func (d *DB) HasOpenPullRequestFrom(ctx context.Context, repoID int64, sha string) (bool, error) {
	var n int
	err := d.queryRow(ctx, "SELECT count(*) FROM pull_requests WHERE repo_id = ? AND state = ? AND from_sha = ?", repoID, PullOpen, sha).Scan(&n)
	if err != nil {
		return false, d.fail(err, "open pull requests from a commit")
	}
	return n > 0, nil
}

// Exempt users and groups are stored as comma-separated ids: a short list
// read with the restriction and never queried by member.
func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

func splitIDs(s string) []int64 {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			out = append(out, id)
		}
	}
	return out
}

const restrictionCols = "id, repo_id, project_id, type, matcher_type, matcher_id, user_ids, group_ids, created_at"

func scanRestriction(sc interface{ Scan(...any) error }, r *BranchRestriction) error {
	var repo, proj sql.NullInt64
	var users, groups string
	if err := sc.Scan(&r.ID, &repo, &proj, &r.Type, &r.MatcherType, &r.MatcherID, &users, &groups, &r.CreatedAt); err != nil {
		return err
	}
	r.RepoID, r.ProjectID = repo.Int64, proj.Int64
	r.UserIDs, r.GroupIDs, r.CreatedAt = splitIDs(users), splitIDs(groups), r.CreatedAt.UTC()
	return nil
}

func (d *DB) CreateRestriction(ctx context.Context, r *BranchRestriction) error {
	if (r.RepoID == 0) == (r.ProjectID == 0) {
		return problem.New(problem.Invalid, "a restriction belongs to exactly one repository or project")
	}
	r.CreatedAt = now()
	err := d.queryRow(ctx, `INSERT INTO branch_restrictions (repo_id, project_id, type, matcher_type, matcher_id, user_ids, group_ids, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, nullID(r.RepoID), nullID(r.ProjectID), r.Type, r.MatcherType, r.MatcherID,
		joinIDs(r.UserIDs), joinIDs(r.GroupIDs), r.CreatedAt).Scan(&r.ID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository or project not found")
	}
	return d.fail(err, "create restriction")
}

func (d *DB) RestrictionByID(ctx context.Context, id int64) (*BranchRestriction, error) {
	var r BranchRestriction
	if err := scanRestriction(d.queryRow(ctx, "SELECT "+restrictionCols+" FROM branch_restrictions WHERE id = ?", id), &r); err != nil {
		return nil, d.notFound(err, "restriction by id", "restriction not found")
	}
	return &r, nil
}

func (d *DB) ListRestrictions(ctx context.Context, repoID, projectID int64) ([]BranchRestriction, error) {
	var rows *sql.Rows
	var err error
	if repoID != 0 {
		rows, err = d.query(ctx, "SELECT "+restrictionCols+" FROM branch_restrictions WHERE repo_id = ? ORDER BY id", repoID)
	} else {
		rows, err = d.query(ctx, "SELECT "+restrictionCols+" FROM branch_restrictions WHERE project_id = ? ORDER BY id", projectID)
	}
	if err != nil {
		return nil, d.fail(err, "list restrictions")
	}
	return collect(rows, d, "list restrictions", scanRestriction)
}

func (d *DB) RestrictionsFor(ctx context.Context, repoID, projectID int64) ([]BranchRestriction, error) {
	rows, err := d.query(ctx, "SELECT "+restrictionCols+" FROM branch_restrictions WHERE repo_id = ? OR project_id = ? ORDER BY id", repoID, projectID)
	if err != nil {
		return nil, d.fail(err, "restrictions for")
	}
	return collect(rows, d, "restrictions for", scanRestriction)
}

func (d *DB) DeleteRestriction(ctx context.Context, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM branch_restrictions WHERE id = ?", id)
	return d.mustAffect(res, err, "delete restriction", "restriction not found")
}

func (d *DB) PullSettings(ctx context.Context, repoID int64) (string, error) {
	var s string
	err := d.queryRow(ctx, "SELECT config FROM pull_request_settings WHERE repo_id = ?", repoID).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return s, d.fail(err, "pull settings")
}

func (d *DB) PutPullSettings(ctx context.Context, repoID int64, config string) error {
	_, err := d.exec(ctx, `INSERT INTO pull_request_settings (repo_id, config) VALUES (?, ?)
		ON CONFLICT (repo_id) DO UPDATE SET config = excluded.config`, repoID, config)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository not found")
	}
	return d.fail(err, "put pull settings")
}

const webhookCols = "id, repo_id, name, url, secret, events, active, created_at"

func scanWebhook(sc interface{ Scan(...any) error }, h *Webhook) error {
	var events string
	if err := sc.Scan(&h.ID, &h.RepoID, &h.Name, &h.URL, &h.Secret, &events, &h.Active, &h.CreatedAt); err != nil {
		return err
	}
	h.Events = nil
	if events != "" {
		h.Events = strings.Split(events, ",")
	}
	h.CreatedAt = h.CreatedAt.UTC()
	return nil
}

func (d *DB) CreateWebhook(ctx context.Context, h *Webhook) error {
	h.CreatedAt = now()
	err := d.queryRow(ctx, "INSERT INTO webhooks (repo_id, name, url, secret, events, active, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
		h.RepoID, h.Name, h.URL, h.Secret, strings.Join(h.Events, ","), h.Active, h.CreatedAt).Scan(&h.ID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "repository not found")
	}
	return d.fail(err, "create webhook")
}

func (d *DB) WebhookByID(ctx context.Context, id int64) (*Webhook, error) {
	var h Webhook
	if err := scanWebhook(d.queryRow(ctx, "SELECT "+webhookCols+" FROM webhooks WHERE id = ?", id), &h); err != nil {
		return nil, d.notFound(err, "webhook by id", "webhook not found")
	}
	return &h, nil
}

func (d *DB) ListWebhooks(ctx context.Context, repoID int64) ([]Webhook, error) {
	rows, err := d.query(ctx, "SELECT "+webhookCols+" FROM webhooks WHERE repo_id = ? ORDER BY id", repoID)
	if err != nil {
		return nil, d.fail(err, "list webhooks")
	}
	return collect(rows, d, "list webhooks", scanWebhook)
}

func (d *DB) UpdateWebhook(ctx context.Context, h *Webhook) error {
	res, err := d.exec(ctx, "UPDATE webhooks SET name = ?, url = ?, secret = ?, events = ?, active = ? WHERE id = ? AND repo_id = ?",
		h.Name, h.URL, h.Secret, strings.Join(h.Events, ","), h.Active, h.ID, h.RepoID)
	return d.mustAffect(res, err, "update webhook", "webhook not found")
}

func (d *DB) DeleteWebhook(ctx context.Context, repoID, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM webhooks WHERE id = ? AND repo_id = ?", id, repoID)
	return d.mustAffect(res, err, "delete webhook", "webhook not found")
}

const deliveryCols = "id, webhook_id, event, payload, attempts, status_code, error, delivered, created_at, updated_at"

func scanDelivery(sc interface{ Scan(...any) error }, w *WebhookDelivery) error {
	if err := sc.Scan(&w.ID, &w.WebhookID, &w.Event, &w.Payload, &w.Attempts, &w.StatusCode, &w.Error, &w.Delivered, &w.CreatedAt, &w.UpdatedAt); err != nil {
		return err
	}
	w.CreatedAt, w.UpdatedAt = w.CreatedAt.UTC(), w.UpdatedAt.UTC()
	return nil
}

func (d *DB) CreateDelivery(ctx context.Context, w *WebhookDelivery) error {
	t := now()
	err := d.queryRow(ctx, `INSERT INTO webhook_deliveries (webhook_id, event, payload, attempts, status_code, error, delivered, created_at, updated_at)
		VALUES (?, ?, ?, 0, 0, '', FALSE, ?, ?) RETURNING id`, w.WebhookID, w.Event, w.Payload, t, t).Scan(&w.ID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "webhook not found")
	}
	w.CreatedAt, w.UpdatedAt = t, t
	return d.fail(err, "create delivery")
}

func (d *DB) DeliveryByID(ctx context.Context, id int64) (*WebhookDelivery, error) {
	var w WebhookDelivery
	if err := scanDelivery(d.queryRow(ctx, "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE id = ?", id), &w); err != nil {
		return nil, d.notFound(err, "delivery by id", "delivery not found")
	}
	return &w, nil
}

func (d *DB) RecordAttempt(ctx context.Context, id int64, statusCode int, errText string, delivered bool) error {
	res, err := d.exec(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, status_code = ?, error = ?, delivered = ?, updated_at = ?
		WHERE id = ?`, statusCode, errText, delivered, now(), id)
	return d.mustAffect(res, err, "record attempt", "delivery not found")
}

func (d *DB) ListDeliveries(ctx context.Context, webhookID int64, p Page) ([]WebhookDelivery, error) {
	limit, offset := p.Bounds()
	rows, err := d.query(ctx, "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE webhook_id = ? ORDER BY id DESC LIMIT ? OFFSET ?",
		webhookID, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list deliveries")
	}
	return collect(rows, d, "list deliveries", scanDelivery)
}

// Watchers are the users watching a pull request, in id order.
func (d *DB) Watchers(ctx context.Context, prID int64) ([]int64, error) {
	rows, err := d.query(ctx, "SELECT user_id FROM pull_request_watchers WHERE pr_id = ? ORDER BY user_id", prID)
	if err != nil {
		return nil, d.fail(err, "watchers")
	}
	return collect(rows, d, "watchers", func(sc interface{ Scan(...any) error }, id *int64) error {
		return sc.Scan(id)
	})
}

// Watch makes userID a watcher of the pull request (again is no error).
func (d *DB) Watch(ctx context.Context, prID, userID int64) error {
	_, err := d.exec(ctx, `INSERT INTO pull_request_watchers (pr_id, user_id) VALUES (?, ?)
		ON CONFLICT (pr_id, user_id) DO NOTHING`, prID, userID)
	if isForeignKey(err) {
		return problem.New(problem.NotFound, "pull request or user not found")
	}
	return d.fail(err, "watch")
}

// Unwatch stops userID watching the pull request (not watching is no
// error).
func (d *DB) Unwatch(ctx context.Context, prID, userID int64) error {
	_, err := d.exec(ctx, "DELETE FROM pull_request_watchers WHERE pr_id = ? AND user_id = ?", prID, userID)
	return d.fail(err, "unwatch")
}
