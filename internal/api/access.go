package api

import (
	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// The helpers here are the only way handlers reach a project or a
// repository: each looks the resource up and asks auth.Authorize in one
// step, so no handler can forget the check.

const (
	msgRepoNotFound    = "repository not found"
	msgProjectNotFound = "project not found"
	msgAuthRequired    = "authentication required"
)

// hidden is what a caller gets for a resource that does not exist: the
// same answer Authorize gives for one they may not read (401 to anonymous
// callers, 404 to everyone else), so existence does not leak.
func (c *call) hidden(msg string) error {
	if c.p.IsAnonymous() {
		return problem.New(problem.Unauthenticated, msgAuthRequired)
	}
	return problem.New(problem.NotFound, "%s", msg)
}

// authorize is auth.Authorize for this call's principal.
func (c *call) authorize(res auth.Resource, a auth.Action) error {
	return c.s.Auth.Authorize(c.ctx, c.p, res, a)
}

// global checks a server-wide action: Read is any signed-in user, Write
// is PROJECT_CREATE, Admin is ADMIN or SYS_ADMIN.
func (c *call) global(a auth.Action) error {
	return c.authorize(auth.Resource{}, a)
}

// projectFor loads the {key} project and checks a on it.
func (c *call) projectFor(a auth.Action) (*store.Project, error) {
	proj, err := c.projectByKey(c.path("key"))
	if problem.Is(err, problem.NotFound) {
		return nil, c.hidden(msgProjectNotFound)
	}
	if err != nil {
		return nil, err
	}
	if err := c.authorize(auth.Resource{Project: proj}, a); err != nil {
		return nil, err
	}
	return proj, nil
}

// repoFor loads the {key}/{slug} repository and checks a on it. A missing
// project and a missing repository answer alike.
func (c *call) repoFor(a auth.Action) (*store.Project, *store.Repository, error) {
	proj, err := c.projectByKey(c.path("key"))
	if problem.Is(err, problem.NotFound) {
		return nil, nil, c.hidden(msgRepoNotFound)
	}
	if err != nil {
		return nil, nil, err
	}
	r, err := c.s.Store.RepoBySlug(c.ctx, proj.Key, c.path("slug"))
	if problem.Is(err, problem.NotFound) {
		return nil, nil, c.hidden(msgRepoNotFound)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := c.authorize(auth.Resource{Repo: r, Project: proj}, a); err != nil {
		return nil, nil, err
	}
	return proj, r, nil
}

// actor is the caller as the accounts service knows it.
func (c *call) actor() accounts.Actor { return accounts.As(c.p) }

// canSee reports whether the caller may read r, for filtering listings.
// Denials are answers; anything else (the database failing) is an error.
func (c *call) canSee(res auth.Resource) (bool, error) {
	err := c.authorize(res, auth.Read)
	switch problem.KindOf(err) {
	case problem.NotFound, problem.Unauthenticated, problem.Forbidden:
		return false, nil
	}
	return err == nil, err
}

// isAdmin reports whether the caller is a global administrator, which
// lets listings skip the per-row check.
func (c *call) isAdmin() bool {
	return !c.p.IsAnonymous() && c.s.Auth.IsAdmin(c.ctx, c.p)
}

// signedIn requires an authenticated user (not an access key).
func (c *call) signedIn() error {
	if err := c.global(auth.Read); err != nil {
		return err
	}
	if c.p.UserID == 0 {
		return problem.New(problem.Forbidden, "an access key cannot do this")
	}
	return nil
}
