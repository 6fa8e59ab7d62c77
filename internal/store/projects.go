package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

const projectCols = "id, key, name, description, public, created_at"

func scanProject(sc interface{ Scan(...any) error }, p *Project) error {
	if err := sc.Scan(&p.ID, &p.Key, &p.Name, &p.Description, &p.Public, &p.CreatedAt); err != nil {
		return err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return nil
}

// CreateProject inserts p with its key in upper case and sets ID and
// CreatedAt.
func (d *DB) CreateProject(ctx context.Context, p *Project) error {
	if err := ValidateProjectKey(p.Key); err != nil {
		return err
	}
	if err := validateText("project name", p.Name, maxNameLen, true); err != nil {
		return err
	}
	key := strings.ToUpper(p.Key)
	if err := d.checkPersonalKey(ctx, key); err != nil {
		return err
	}
	created := now()
	err := d.queryRow(ctx, `INSERT INTO projects (key, name, description, public, created_at)
		VALUES (?, ?, ?, ?, ?) RETURNING id`, key, p.Name, p.Description, p.Public, created).Scan(&p.ID)
	if isUnique(err) {
		return problem.New(problem.Conflict, "a project with key %q already exists", key)
	}
	if err != nil {
		return d.fail(err, "create project")
	}
	p.Key, p.CreatedAt = key, created
	return nil
}

// checkPersonalKey refuses a personal key ("~ALICE") unless a user of
// that name exists: '~' is only ever a user's own project.
func (d *DB) checkPersonalKey(ctx context.Context, key string) error {
	name, ok := IsPersonalKey(key)
	if !ok {
		return nil
	}
	if _, err := d.UserByName(ctx, name); err != nil {
		if problem.Is(err, problem.NotFound) {
			return problem.New(problem.Invalid, "project key %q: no user %q has a personal project", key, name)
		}
		return err
	}
	return nil
}

// ProjectByKey finds a project by key, case-insensitively.
func (d *DB) ProjectByKey(ctx context.Context, key string) (*Project, error) {
	var p Project
	err := scanProject(d.queryRow(ctx, "SELECT "+projectCols+" FROM projects WHERE key = ?", strings.ToUpper(key)), &p)
	if err != nil {
		return nil, d.notFound(err, "project by key", "project not found")
	}
	return &p, nil
}

func (d *DB) ProjectByID(ctx context.Context, id int64) (*Project, error) {
	var p Project
	err := scanProject(d.queryRow(ctx, "SELECT "+projectCols+" FROM projects WHERE id = ?", id), &p)
	if err != nil {
		return nil, d.notFound(err, "project by id", "project not found")
	}
	return &p, nil
}

// ListProjects lists projects whose key or name contains filter
// (case-insensitively), ordered by key.
func (d *DB) ListProjects(ctx context.Context, filter string, p Page) ([]Project, error) {
	limit, offset := p.Bounds()
	pat := likeContains(filter)
	rows, err := d.query(ctx, "SELECT "+projectCols+` FROM projects
		WHERE lower(key) LIKE ? ESCAPE '\' OR lower(name) LIKE ? ESCAPE '\'
		ORDER BY key LIMIT ? OFFSET ?`, pat, pat, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list projects")
	}
	return collect(rows, d, "list projects", scanProject)
}

// UpdateProject writes key, name, description and visibility.
func (d *DB) UpdateProject(ctx context.Context, p *Project) error {
	if err := ValidateProjectKey(p.Key); err != nil {
		return err
	}
	if err := validateText("project name", p.Name, maxNameLen, true); err != nil {
		return err
	}
	key := strings.ToUpper(p.Key)
	if err := d.checkPersonalKey(ctx, key); err != nil {
		return err
	}
	res, err := d.exec(ctx, "UPDATE projects SET key = ?, name = ?, description = ?, public = ? WHERE id = ?",
		key, p.Name, p.Description, p.Public, p.ID)
	if isUnique(err) {
		return problem.New(problem.Conflict, "a project with key %q already exists", key)
	}
	if err := d.mustAffect(res, err, "update project", "project not found"); err != nil {
		return err
	}
	p.Key = key
	return nil
}

// DeleteProject deletes an empty project with its grants. A project that
// still holds repositories is a Conflict: deleting repositories is a
// separate, deliberate act (their git data goes too).
func (d *DB) DeleteProject(ctx context.Context, id int64) error {
	err := d.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, d.q("SELECT count(*) FROM repositories WHERE project_id = ?"), id).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return problem.New(problem.Conflict, "project has repositories")
		}
		res, err := tx.ExecContext(ctx, d.q("DELETE FROM projects WHERE id = ?"), id)
		return d.mustAffect(res, err, "delete project", "project not found")
	})
	if isForeignKey(err) {
		// A repository was created between the count and the delete.
		return problem.New(problem.Conflict, "project has repositories")
	}
	return d.fail(err, "delete project")
}

const repoCols = `r.id, r.project_id, p.key, r.slug, r.name, r.description, r.public, r.default_branch,
	r.fork_of, r.created_at, r.pushed_at`

const repoFrom = " FROM repositories r JOIN projects p ON p.id = r.project_id "

func scanRepo(sc interface{ Scan(...any) error }, r *Repository) error {
	var fork sql.NullInt64
	var pushed sql.NullTime
	if err := sc.Scan(&r.ID, &r.ProjectID, &r.ProjectKey, &r.Slug, &r.Name, &r.Description, &r.Public,
		&r.DefaultBranch, &fork, &r.CreatedAt, &pushed); err != nil {
		return err
	}
	r.ForkOf = fork.Int64
	r.CreatedAt = r.CreatedAt.UTC()
	r.PushedAt = timeVal(pushed)
	return nil
}

// prepareRepo validates r and fills the slug (from the name when empty)
// and the default branch.
func prepareRepo(r *Repository) error {
	if err := ValidateRepoName(r.Name); err != nil {
		return err
	}
	if r.Slug == "" {
		r.Slug = Slugify(r.Name)
	}
	if err := ValidateSlug(r.Slug); err != nil {
		return err
	}
	if r.DefaultBranch == "" {
		r.DefaultBranch = "main"
	}
	return ValidateBranchName(r.DefaultBranch)
}

// CreateRepo inserts r and sets ID, Slug (from Name when empty),
// ProjectKey and CreatedAt.
func (d *DB) CreateRepo(ctx context.Context, r *Repository) error {
	if err := prepareRepo(r); err != nil {
		return err
	}
	p, err := d.ProjectByID(ctx, r.ProjectID)
	if err != nil {
		return err
	}
	created := now()
	err = d.queryRow(ctx, `INSERT INTO repositories
		(project_id, slug, name, description, public, default_branch, fork_of, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		r.ProjectID, r.Slug, r.Name, r.Description, r.Public, r.DefaultBranch, nullID(r.ForkOf), created).Scan(&r.ID)
	switch {
	case isUnique(err):
		return problem.New(problem.Conflict, "a repository named %q already exists in project %q", r.Slug, p.Key)
	case isForeignKey(err):
		if _, perr := d.ProjectByID(ctx, r.ProjectID); perr != nil {
			return perr
		}
		return problem.New(problem.NotFound, "fork origin repository not found")
	case err != nil:
		return d.fail(err, "create repository")
	}
	r.ProjectKey, r.CreatedAt, r.PushedAt = p.Key, created, time.Time{}
	return nil
}

func (d *DB) RepoByID(ctx context.Context, id int64) (*Repository, error) {
	var r Repository
	err := scanRepo(d.queryRow(ctx, "SELECT "+repoCols+repoFrom+"WHERE r.id = ?", id), &r)
	if err != nil {
		return nil, d.notFound(err, "repository by id", "repository not found")
	}
	return &r, nil
}

// RepoBySlug finds a repository by project key and slug, both matched
// case-insensitively.
func (d *DB) RepoBySlug(ctx context.Context, projectKey, slug string) (*Repository, error) {
	var r Repository
	err := scanRepo(d.queryRow(ctx, "SELECT "+repoCols+repoFrom+"WHERE p.key = ? AND r.slug = ?",
		strings.ToUpper(projectKey), strings.ToLower(slug)), &r)
	if err != nil {
		return nil, d.notFound(err, "repository by slug", "repository not found")
	}
	return &r, nil
}

// ListRepos lists a project's repositories ordered by slug.
func (d *DB) ListRepos(ctx context.Context, projectID int64, p Page) ([]Repository, error) {
	limit, offset := p.Bounds()
	rows, err := d.query(ctx, "SELECT "+repoCols+repoFrom+"WHERE r.project_id = ? ORDER BY r.slug LIMIT ? OFFSET ?",
		projectID, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list repositories")
	}
	return collect(rows, d, "list repositories", scanRepo)
}

// ListAllRepos lists repositories of every project whose name or slug
// contains filter, ordered by project key then slug.
func (d *DB) ListAllRepos(ctx context.Context, filter string, p Page) ([]Repository, error) {
	limit, offset := p.Bounds()
	pat := likeContains(filter)
	rows, err := d.query(ctx, "SELECT "+repoCols+repoFrom+`
		WHERE lower(r.name) LIKE ? ESCAPE '\' OR r.slug LIKE ? ESCAPE '\'
		ORDER BY p.key, r.slug LIMIT ? OFFSET ?`, pat, pat, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list all repositories")
	}
	return collect(rows, d, "list all repositories", scanRepo)
}

// UpdateRepo writes project (a move), slug (a rename; from Name when
// empty), name, description, visibility and default branch. The refs
// generation, fork origin and times are not touched.
func (d *DB) UpdateRepo(ctx context.Context, r *Repository) error {
	if err := prepareRepo(r); err != nil {
		return err
	}
	p, err := d.ProjectByID(ctx, r.ProjectID)
	if err != nil {
		return err
	}
	res, err := d.exec(ctx, `UPDATE repositories SET project_id = ?, slug = ?, name = ?, description = ?, public = ?,
		default_branch = ? WHERE id = ?`, r.ProjectID, r.Slug, r.Name, r.Description, r.Public, r.DefaultBranch, r.ID)
	switch {
	case isUnique(err):
		return problem.New(problem.Conflict, "a repository named %q already exists in project %q", r.Slug, p.Key)
	case isForeignKey(err):
		return problem.New(problem.NotFound, "project not found")
	}
	if err := d.mustAffect(res, err, "update repository", "repository not found"); err != nil {
		return err
	}
	r.ProjectKey = p.Key
	return nil
}

// DeleteRepo deletes the repository's row with its grants, access keys and
// pending ref transactions; forks of it stop pointing at it.
func (d *DB) CountForks(ctx context.Context, id int64) (int, error) {
	var n int
	if err := d.queryRow(ctx, "SELECT count(*) FROM repositories WHERE fork_of = ?", id).Scan(&n); err != nil {
		return 0, d.fail(err, "count forks")
	}
	return n, nil
}

func (d *DB) DeleteRepo(ctx context.Context, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM repositories WHERE id = ?", id)
	return d.mustAffect(res, err, "delete repository", "repository not found")
}
