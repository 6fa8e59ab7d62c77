package api

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// projectByKey reads the project a key names. A personal key ("~alice")
// is that user's personal project, created on first use; one naming no
// user is NotFound like any missing project.
func (c *call) projectByKey(key string) (*store.Project, error) {
	if name, ok := store.IsPersonalKey(key); ok {
		p, err := c.s.Accounts.PersonalProject(c.ctx, name)
		if problem.Is(err, problem.NotFound) {
			return nil, problem.New(problem.NotFound, "project not found")
		}
		return p, err
	}
	return c.s.Store.ProjectByKey(c.ctx, key)
}

// listUserRepos is GET /users/{userSlug}/repos: the user's personal
// repositories the caller may see, an empty page when there are none.
func (c *call) listUserRepos() error {
	pg, err := c.page()
	if err != nil {
		return err
	}
	proj, err := c.projectByKey("~" + c.path("userSlug"))
	if problem.Is(err, problem.NotFound) {
		return c.hidden("user not found")
	}
	if err != nil {
		return err
	}
	projErr := c.authorize(auth.Resource{Project: proj}, auth.Read)
	page, err := filteredPage(pg,
		func(p store.Page) ([]store.Repository, error) { return c.s.Store.ListRepos(c.ctx, proj.ID, p) },
		func(r *store.Repository) (bool, error) {
			if projErr == nil {
				return true, nil
			}
			return c.canSee(auth.Resource{Repo: r, Project: proj})
		})
	if err != nil {
		return err
	}
	return c.json(mapPage(page, func(r store.Repository) repoJSON { return c.s.repoJSON(&r, proj) }))
}

// getUserRepo is GET /users/{userSlug}/repos/{slug}, the same repository
// as /projects/~{userSlug}/repos/{slug}.
func (c *call) getUserRepo() error {
	c.r.SetPathValue("key", "~"+c.path("userSlug"))
	return c.getRepo()
}
