package store

// Bulk loading, for the performance lab's data sets (`sluice datagen`):
// hundreds of thousands of rows in minutes rather than hours. PostgreSQL
// gets COPY (pgx CopyFrom), which skips per-row parsing and planning;
// SQLite gets multi-row INSERTs in one transaction, which skips the
// per-statement fsync that synchronous=FULL would otherwise pay per row.
//
// The bulk methods do not validate names or assign numbers: the caller
// (datagen) generates valid data and is responsible for its uniqueness.
// COPY cannot skip duplicates, so re-running is made idempotent by the
// caller reading what exists first (NameIDs) and loading only the rest.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqliteBatchRows bounds one multi-row INSERT on SQLite: its default limit
// of 32766 bound variables divided by the widest bulk row (18 columns).
const sqliteBatchRows = 1800

// bulkInsert loads rows into table.
func (d *DB) bulkInsert(ctx context.Context, table string, cols []string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	if d.pool != nil {
		n, err := d.pool.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows))
		if err != nil {
			return d.fail(err, "copy into "+table)
		}
		if int(n) != len(rows) {
			return fmt.Errorf("copy into %s: %d of %d rows", table, n, len(rows))
		}
		return nil
	}
	rowPH := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	head := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES "
	err := d.tx(ctx, func(tx *sql.Tx) error {
		for start := 0; start < len(rows); start += sqliteBatchRows {
			batch := rows[start:min(start+sqliteBatchRows, len(rows))]
			var b strings.Builder
			b.WriteString(head)
			args := make([]any, 0, len(batch)*len(cols))
			for i, r := range batch {
				if len(r) != len(cols) {
					return fmt.Errorf("row has %d values for %d columns", len(r), len(cols))
				}
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(rowPH)
				args = append(args, r...)
			}
			if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return d.fail(err, "bulk insert into "+table)
	}
	return nil
}

// createdAt is t as stored, or now when zero.
func createdAt(t time.Time) time.Time {
	if t.IsZero() {
		return now()
	}
	return dbTime(t)
}

// BulkCreateUsers inserts users (ID ignored; read ids back with NameIDs).
func (d *DB) BulkCreateUsers(ctx context.Context, users []User) error {
	rows := make([][]any, len(users))
	for i, u := range users {
		rows[i] = []any{u.Name, foldName(u.Name), u.DisplayName, u.Email, u.PasswordHash, u.Active, createdAt(u.CreatedAt)}
	}
	return d.bulkInsert(ctx, "users", []string{"name", "name_key", "display_name", "email", "password_hash", "active", "created_at"}, rows)
}

// BulkCreateGroups inserts groups.
func (d *DB) BulkCreateGroups(ctx context.Context, groups []Group) error {
	rows := make([][]any, len(groups))
	for i, g := range groups {
		rows[i] = []any{g.Name, foldName(g.Name)}
	}
	return d.bulkInsert(ctx, "groups", []string{"name", "name_key"}, rows)
}

// GroupMember is one membership row.
type GroupMember struct{ GroupID, UserID int64 }

// BulkAddGroupMembers inserts memberships.
func (d *DB) BulkAddGroupMembers(ctx context.Context, members []GroupMember) error {
	rows := make([][]any, len(members))
	for i, m := range members {
		rows[i] = []any{m.GroupID, m.UserID}
	}
	return d.bulkInsert(ctx, "group_members", []string{"group_id", "user_id"}, rows)
}

// BulkCreateProjects inserts projects (keys are upper-cased).
func (d *DB) BulkCreateProjects(ctx context.Context, projects []Project) error {
	rows := make([][]any, len(projects))
	for i, p := range projects {
		rows[i] = []any{strings.ToUpper(p.Key), p.Name, p.Description, p.Public, createdAt(p.CreatedAt)}
	}
	return d.bulkInsert(ctx, "projects", []string{"key", "name", "description", "public", "created_at"}, rows)
}

// BulkCreateRepos inserts repository rows; the caller creates them on disk
// once NameIDs has told it their ids.
func (d *DB) BulkCreateRepos(ctx context.Context, repos []Repository) error {
	rows := make([][]any, len(repos))
	for i, r := range repos {
		branch := r.DefaultBranch
		if branch == "" {
			branch = "main"
		}
		rows[i] = []any{r.ProjectID, strings.ToLower(r.Slug), r.Name, r.Description, r.Public, branch, nullID(r.ForkOf), createdAt(r.CreatedAt)}
	}
	return d.bulkInsert(ctx, "repositories", []string{"project_id", "slug", "name", "description", "public", "default_branch", "fork_of", "created_at"}, rows)
}

// ProjectGrant is one project permission row.
type ProjectGrant struct {
	ProjectID int64
	Grant
}

// BulkProjectGrants inserts project permissions.
func (d *DB) BulkProjectGrants(ctx context.Context, grants []ProjectGrant) error {
	rows := make([][]any, len(grants))
	for i, g := range grants {
		rows[i] = []any{g.ProjectID, nullID(g.UserID), nullID(g.GroupID), string(g.Permission)}
	}
	return d.bulkInsert(ctx, "project_permissions", []string{"project_id", "user_id", "group_id", "permission"}, rows)
}

// BulkCreatePullRequests inserts pull requests with the numbers they carry
// (unique per target repository; the caller numbers them).
func (d *DB) BulkCreatePullRequests(ctx context.Context, prs []PullRequest) error {
	rows := make([][]any, len(prs))
	for i, pr := range prs {
		state, ms := pr.State, pr.MergeStatus
		if state == "" {
			state = PullOpen
		}
		if ms == "" {
			ms = "UNKNOWN"
		}
		c := createdAt(pr.CreatedAt)
		rows[i] = []any{pr.RepoID, pr.Number, pr.FromRepoID, pr.FromRef, pr.FromSHA, pr.ToRef, pr.ToSHA, pr.BaseSHA,
			pr.Title, pr.Description, state, nullID(pr.AuthorID), int64(0), ms, "", "", c, c}
	}
	return d.bulkInsert(ctx, "pull_requests", []string{"repo_id", "number", "from_repo_id", "from_ref", "from_sha", "to_ref", "to_sha",
		"base_sha", "title", "description", "state", "author_id", "version", "merge_status", "conflicts", "merge_sha", "created_at", "updated_at"}, rows)
}

// PullParticipant is one participant row.
type PullParticipant struct {
	PRID int64
	Participant
}

// BulkAddParticipants inserts pull request participants.
func (d *DB) BulkAddParticipants(ctx context.Context, ps []PullParticipant) error {
	rows := make([][]any, len(ps))
	for i, p := range ps {
		status := p.Status
		if status == "" {
			status = StatusUnapproved
		}
		rows[i] = []any{p.PRID, p.UserID, p.Role, status}
	}
	return d.bulkInsert(ctx, "pull_request_participants", []string{"pr_id", "user_id", "role", "status"}, rows)
}

// BulkCreateComments inserts top-level pull request comments (ParentID is
// ignored: replies need their parent's id, which COPY does not return).
func (d *DB) BulkCreateComments(ctx context.Context, cs []PullComment) error {
	rows := make([][]any, len(cs))
	for i, c := range cs {
		sev, state := c.Severity, c.State
		if sev == "" {
			sev = "NORMAL"
		}
		if state == "" {
			state = "OPEN"
		}
		t := createdAt(c.Created)
		rows[i] = []any{c.PRID, nullID(c.AuthorID), c.Text, sev, state, int64(0), c.Path, int64(c.Line), c.LineType, c.FileType,
			c.FromSHA, c.ToSHA, c.Outdated, t, t}
	}
	return d.bulkInsert(ctx, "pull_request_comments", []string{"pr_id", "author_id", "text", "severity", "state", "version",
		"anchor_path", "anchor_line", "anchor_line_type", "anchor_file_type", "anchor_from_sha", "anchor_to_sha", "outdated", "created_at", "updated_at"}, rows)
}

// Bulk kinds NameIDs knows.
const (
	BulkUsers        = "users"         // by folded name
	BulkGroups       = "groups"        // by folded name
	BulkProjects     = "projects"      // by key
	BulkRepos        = "repositories"  // by "KEY/slug"
	BulkPullRequests = "pull_requests" // by "repoID/number"
)

// NameIDs maps every row of a kind to its id, by the natural key the
// constant names, for a loader that must skip what a previous run loaded
// and wire foreign keys to what it just loaded.
func (d *DB) NameIDs(ctx context.Context, kind string) (map[string]int64, error) {
	var q string
	switch kind {
	case BulkUsers, BulkGroups:
		q = "SELECT name_key, id FROM " + kind
	case BulkProjects:
		q = "SELECT key, id FROM projects"
	case BulkRepos:
		q = "SELECT p.key || '/' || r.slug, r.id FROM repositories r JOIN projects p ON p.id = r.project_id"
	case BulkPullRequests:
		q = "SELECT CAST(repo_id AS TEXT) || '/' || CAST(number AS TEXT), id FROM pull_requests"
	default:
		return nil, fmt.Errorf("unknown bulk kind %q", kind)
	}
	rows, err := d.query(ctx, q)
	if err != nil {
		return nil, d.fail(err, "list "+kind)
	}
	defer rows.Close()
	m := map[string]int64{}
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			return nil, d.fail(err, "list "+kind)
		}
		m[k] = id
	}
	return m, d.fail(rows.Err(), "list "+kind)
}

// CountRows counts the rows of a bulk kind, or of the pull request
// comments and participants tables ("pull_request_comments",
// "pull_request_participants", "group_members", "project_permissions").
func (d *DB) CountRows(ctx context.Context, table string) (int64, error) {
	switch table {
	case BulkUsers, BulkGroups, BulkProjects, BulkRepos, BulkPullRequests,
		"pull_request_comments", "pull_request_participants", "group_members", "project_permissions":
	default:
		return 0, fmt.Errorf("unknown table %q", table)
	}
	var n int64
	err := d.queryRow(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n)
	return n, d.fail(err, "count "+table)
}
