package accounts

import (
	"context"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Project and repository HTTP access tokens (see auth/resourcetoken.go).
// Managing them takes PROJECT_ADMIN or REPO_ADMIN on the resource, and a
// full session: no token of any kind mints or changes tokens, so a leaked
// CI token cannot make itself a longer-lived or stronger twin. The grant
// can never exceed what the manager holds, since administering the
// resource is the most there is on it.
//
// A project token always reads its project (a project token that cannot
// see its project could not even list the repositories it was made for);
// its repository level defaults to the project level, which already
// reaches every repository of the project.

// ResourceTokenSpec is a project or repository token's grant and name.
// Lifetime 0 never expires; it is ignored on update.
type ResourceTokenSpec struct {
	Name         string
	ProjectScope store.Scope // project tokens only
	RepoScope    store.Scope
	Lifetime     time.Duration
}

// ResourceTarget names the resource a token belongs to: Repo, or Project
// alone for a project token.
type ResourceTarget struct {
	Project *store.Project
	Repo    *store.Repository
}

func (t ResourceTarget) ids() (projectID, repoID int64) {
	if t.Repo != nil {
		return 0, t.Repo.ID
	}
	if t.Project != nil {
		return t.Project.ID, 0
	}
	return 0, 0
}

func (t ResourceTarget) resource() auth.Resource {
	if t.Repo != nil {
		return auth.Resource{Repo: t.Repo, Project: t.Project}
	}
	return auth.Resource{Project: t.Project}
}

func (s *Service) resourceTokens() (store.ResourceTokenStore, error) {
	rs, ok := s.st.(store.ResourceTokenStore)
	if !ok {
		return nil, problem.New(problem.Unavailable, "this store keeps no project or repository access tokens")
	}
	return rs, nil
}

// manageResourceTokens checks a may manage t's tokens.
func (s *Service) manageResourceTokens(ctx context.Context, a Actor, t ResourceTarget, what string) error {
	if t.Project == nil && t.Repo == nil {
		return problem.New(problem.Invalid, "an access token belongs to a project or a repository")
	}
	if err := s.authorize(ctx, a, t.resource(), auth.Admin); err != nil {
		return err
	}
	return fullSession(a, what)
}

// normalize fills the defaults of a grant and refuses what cannot be.
func (spec *ResourceTokenSpec) normalize(t ResourceTarget) error {
	valid := func(sc store.Scope) bool {
		return sc == "" || sc == store.ScopeRead || sc == store.ScopeWrite || sc == store.ScopeAdmin
	}
	if !valid(spec.ProjectScope) || !valid(spec.RepoScope) {
		return problem.New(problem.Invalid, "token permissions must be read, write or admin")
	}
	if t.Repo != nil {
		if spec.ProjectScope != "" {
			return problem.New(problem.Invalid, "a repository token takes repository permissions (REPO_READ, REPO_WRITE, REPO_ADMIN) only")
		}
		if spec.RepoScope == "" {
			return problem.New(problem.Invalid, "a repository token needs a repository permission (REPO_READ, REPO_WRITE or REPO_ADMIN)")
		}
		return nil
	}
	if spec.ProjectScope == "" {
		if spec.RepoScope == "" {
			return problem.New(problem.Invalid, "a project token needs a permission (PROJECT_READ, PROJECT_WRITE, PROJECT_ADMIN or REPO_*)")
		}
		spec.ProjectScope = store.ScopeRead
	}
	return nil
}

// CreateResourceToken creates a token of t and returns its secret, which
// is shown once and stored only as a hash.
func (s *Service) CreateResourceToken(ctx context.Context, a Actor, t ResourceTarget, spec ResourceTokenSpec) (string, *store.ResourceToken, error) {
	if err := s.manageResourceTokens(ctx, a, t, "create access tokens"); err != nil {
		return "", nil, err
	}
	if err := spec.normalize(t); err != nil {
		return "", nil, err
	}
	if spec.Lifetime < 0 || spec.Lifetime > maxTokenLifetime {
		return "", nil, problem.New(problem.Invalid, "a token's lifetime must be at most %d days", int(maxTokenLifetime/(24*time.Hour)))
	}
	var expires *time.Time
	if spec.Lifetime > 0 {
		e := s.now().Add(spec.Lifetime).UTC()
		expires = &e
	}
	projectID, repoID := t.ids()
	secret, tok, err := s.auth.CreateResourceToken(ctx, auth.NewResourceToken{
		ProjectID: projectID, RepoID: repoID, Name: spec.Name,
		ProjectScope: spec.ProjectScope, RepoScope: spec.RepoScope,
		CreatedBy: a.userID(), ExpiresAt: expires,
	})
	if err != nil {
		return "", nil, err
	}
	s.logger.Info("access token created", "project_id", projectID, "repo_id", repoID, "resource_token_id", tok.ID,
		"project_scope", string(tok.ProjectScope), "repo_scope", string(tok.RepoScope), "actor", a.String())
	return secret, tok, nil
}

// UpdateResourceToken renames t's token id and replaces its grant; the
// expiry stays. The new grant applies from the token's next request.
func (s *Service) UpdateResourceToken(ctx context.Context, a Actor, t ResourceTarget, id int64, spec ResourceTokenSpec) (*store.ResourceToken, error) {
	if err := s.manageResourceTokens(ctx, a, t, "change access tokens"); err != nil {
		return nil, err
	}
	rs, err := s.resourceTokens()
	if err != nil {
		return nil, err
	}
	projectID, repoID := t.ids()
	tok, err := rs.ResourceTokenByID(ctx, projectID, repoID, id)
	if err != nil {
		return nil, err
	}
	if spec.Name != "" {
		if tok.Name, err = auth.CheckTokenName(spec.Name); err != nil {
			return nil, err
		}
	}
	if spec.ProjectScope != "" || spec.RepoScope != "" {
		if err := spec.normalize(t); err != nil {
			return nil, err
		}
		tok.ProjectScope, tok.RepoScope = spec.ProjectScope, spec.RepoScope
	}
	if err := rs.UpdateResourceToken(ctx, tok); err != nil {
		return nil, err
	}
	s.logger.Info("access token changed", "project_id", projectID, "repo_id", repoID, "resource_token_id", id,
		"project_scope", string(tok.ProjectScope), "repo_scope", string(tok.RepoScope), "actor", a.String())
	return tok, nil
}

// DeleteResourceToken deletes t's token id; its next request fails.
// Another resource's token is NotFound, like a missing one.
func (s *Service) DeleteResourceToken(ctx context.Context, a Actor, t ResourceTarget, id int64) error {
	if err := s.authorize(ctx, a, t.resource(), auth.Admin); err != nil {
		return err
	}
	rs, err := s.resourceTokens()
	if err != nil {
		return err
	}
	projectID, repoID := t.ids()
	if err := rs.DeleteResourceToken(ctx, projectID, repoID, id); err != nil {
		return err
	}
	s.logger.Info("access token deleted", "project_id", projectID, "repo_id", repoID, "resource_token_id", id, "actor", a.String())
	return nil
}
