package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// ResourceToken is an HTTP access token of a project (ProjectID set) or of
// a repository (RepoID set): a credential that belongs to the resource,
// not to a user, as CI systems need. Only the SHA-256 of its secret is
// stored.
//
// ProjectScope caps what the token may do on its project, RepoScope on its
// repository or, for a project token, on every repository of the project;
// "" grants nothing at that level. A repository token has no ProjectScope.
type ResourceToken struct {
	ID           int64
	ProjectID    int64
	RepoID       int64
	Name         string
	Hash         []byte // sha256(secret)
	ProjectScope Scope
	RepoScope    Scope
	// CreatedBy is the user who created the token, 0 when unknown (the
	// system, or a user since deleted). The token never acts as them.
	CreatedBy  int64
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
}

// ResourceTokenStore keeps project and repository access tokens. *DB
// implements it.
type ResourceTokenStore interface {
	// CreateResourceToken stores t and sets ID and CreatedAt.
	CreateResourceToken(ctx context.Context, t *ResourceToken) error
	// ResourceTokenByHash finds a token by the SHA-256 of its secret,
	// expired ones included (the caller says why it refuses them).
	ResourceTokenByHash(ctx context.Context, hash []byte) (*ResourceToken, error)
	// ResourceTokenByID finds a token of the project or the repository
	// (exactly one of projectID and repoID non-zero); another resource's
	// token is NotFound.
	ResourceTokenByID(ctx context.Context, projectID, repoID, id int64) (*ResourceToken, error)
	// ListResourceTokens pages through a project's or a repository's
	// tokens, oldest first.
	ListResourceTokens(ctx context.Context, projectID, repoID int64, p Page) ([]ResourceToken, error)
	// UpdateResourceToken rewrites t's name, scopes and expiry.
	UpdateResourceToken(ctx context.Context, t *ResourceToken) error
	// DeleteResourceToken deletes the resource's token id; the next request
	// with its secret fails.
	DeleteResourceToken(ctx context.Context, projectID, repoID, id int64) error
	TouchResourceToken(ctx context.Context, id int64, at time.Time) error
}

var _ ResourceTokenStore = (*DB)(nil)

const resourceTokenCols = "id, project_id, repo_id, name, hash, project_scope, repo_scope, created_by, created_at, expires_at, last_used_at"

func scanResourceToken(sc interface{ Scan(...any) error }, t *ResourceToken) error {
	var pid, rid, by sql.NullInt64
	var ps, rs string
	var exp, used sql.NullTime
	if err := sc.Scan(&t.ID, &pid, &rid, &t.Name, &t.Hash, &ps, &rs, &by, &t.CreatedAt, &exp, &used); err != nil {
		return err
	}
	t.ProjectID, t.RepoID, t.CreatedBy = pid.Int64, rid.Int64, by.Int64
	t.ProjectScope, t.RepoScope = Scope(ps), Scope(rs)
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt, t.LastUsedAt = timePtr(exp), timePtr(used)
	return nil
}

// checkResourceToken checks what both create and update write.
func checkResourceToken(t *ResourceToken) error {
	switch {
	case (t.ProjectID == 0) == (t.RepoID == 0):
		return problem.New(problem.Invalid, "an access token belongs to exactly one of a project and a repository")
	case t.ProjectScope != "" && !validScope(t.ProjectScope), t.RepoScope != "" && !validScope(t.RepoScope):
		return problem.New(problem.Invalid, "token scopes must be read, write or admin")
	case t.RepoID != 0 && t.ProjectScope != "":
		return problem.New(problem.Invalid, "a repository token has no project permission")
	case t.ProjectScope == "" && t.RepoScope == "":
		return problem.New(problem.Invalid, "an access token needs at least one permission")
	}
	return validateText("token name", t.Name, maxNameLen, true)
}

// resourceWhere is the condition selecting the tokens of one resource.
func resourceWhere(projectID, repoID int64) (string, int64, error) {
	switch {
	case projectID != 0 && repoID == 0:
		return "project_id = ?", projectID, nil
	case repoID != 0 && projectID == 0:
		return "repo_id = ?", repoID, nil
	}
	return "", 0, problem.New(problem.Invalid, "name exactly one of a project and a repository")
}

func (d *DB) CreateResourceToken(ctx context.Context, t *ResourceToken) error {
	if len(t.Hash) == 0 {
		return problem.New(problem.Invalid, "token hash must not be empty")
	}
	if err := checkResourceToken(t); err != nil {
		return err
	}
	created := now()
	err := d.queryRow(ctx, `INSERT INTO resource_tokens
		(project_id, repo_id, name, hash, project_scope, repo_scope, created_by, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		nullID(t.ProjectID), nullID(t.RepoID), t.Name, t.Hash, string(t.ProjectScope), string(t.RepoScope),
		nullID(t.CreatedBy), created, nullTimePtr(t.ExpiresAt)).Scan(&t.ID)
	switch {
	case isUnique(err):
		return problem.New(problem.Conflict, "token already exists")
	case isForeignKey(err) && t.ProjectID != 0:
		return problem.New(problem.NotFound, "project not found")
	case isForeignKey(err):
		return problem.New(problem.NotFound, "repository not found")
	case err != nil:
		return d.fail(err, "create resource token")
	}
	t.CreatedAt = created
	if t.ExpiresAt != nil {
		e := dbTime(*t.ExpiresAt)
		t.ExpiresAt = &e
	}
	return nil
}

func (d *DB) ResourceTokenByHash(ctx context.Context, hash []byte) (*ResourceToken, error) {
	var t ResourceToken
	if err := scanResourceToken(d.queryRow(ctx, "SELECT "+resourceTokenCols+" FROM resource_tokens WHERE hash = ?", hash), &t); err != nil {
		return nil, d.notFound(err, "resource token by hash", "token not found")
	}
	return &t, nil
}

func (d *DB) ResourceTokenByID(ctx context.Context, projectID, repoID, id int64) (*ResourceToken, error) {
	where, rid, err := resourceWhere(projectID, repoID)
	if err != nil {
		return nil, err
	}
	var t ResourceToken
	row := d.queryRow(ctx, "SELECT "+resourceTokenCols+" FROM resource_tokens WHERE id = ? AND "+where, id, rid)
	if err := scanResourceToken(row, &t); err != nil {
		return nil, d.notFound(err, "resource token by id", "token not found")
	}
	return &t, nil
}

func (d *DB) ListResourceTokens(ctx context.Context, projectID, repoID int64, p Page) ([]ResourceToken, error) {
	where, rid, err := resourceWhere(projectID, repoID)
	if err != nil {
		return nil, err
	}
	limit, offset := p.Bounds()
	rows, err := d.query(ctx, "SELECT "+resourceTokenCols+" FROM resource_tokens WHERE "+where+" ORDER BY id LIMIT ? OFFSET ?",
		rid, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list resource tokens")
	}
	return collect(rows, d, "list resource tokens", scanResourceToken)
}

func (d *DB) UpdateResourceToken(ctx context.Context, t *ResourceToken) error {
	if err := checkResourceToken(t); err != nil {
		return err
	}
	where, rid, err := resourceWhere(t.ProjectID, t.RepoID)
	if err != nil {
		return err
	}
	res, err := d.exec(ctx, "UPDATE resource_tokens SET name = ?, project_scope = ?, repo_scope = ?, expires_at = ? WHERE id = ? AND "+where,
		t.Name, string(t.ProjectScope), string(t.RepoScope), nullTimePtr(t.ExpiresAt), t.ID, rid)
	return d.mustAffect(res, err, "update resource token", "token not found")
}

func (d *DB) DeleteResourceToken(ctx context.Context, projectID, repoID, id int64) error {
	where, rid, err := resourceWhere(projectID, repoID)
	if err != nil {
		return err
	}
	res, err := d.exec(ctx, "DELETE FROM resource_tokens WHERE id = ? AND "+where, id, rid)
	return d.mustAffect(res, err, "delete resource token", "token not found")
}

func (d *DB) TouchResourceToken(ctx context.Context, id int64, at time.Time) error {
	res, err := d.exec(ctx, "UPDATE resource_tokens SET last_used_at = ? WHERE id = ?", dbTime(at), id)
	return d.mustAffect(res, err, "touch resource token", "token not found")
}
