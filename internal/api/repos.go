package api

import (
	"net/http"
	"strings"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

type projectRef struct {
	Key string `json:"key"`
}

type repoBody struct {
	Name          *string     `json:"name"`
	ScmID         *string     `json:"scmId"`
	Description   *string     `json:"description"`
	Public        *bool       `json:"public"`
	DefaultBranch *string     `json:"defaultBranch"`
	Project       *projectRef `json:"project"`
}

// repoWithOrigin renders r, and its fork origin when the caller may see it.
func (c *call) repoWithOrigin(r *store.Repository, proj *store.Project) (repoJSON, error) {
	out := c.s.repoJSON(r, proj)
	if r.ForkOf == 0 {
		return out, nil
	}
	origin, err := c.s.Store.RepoByID(c.ctx, r.ForkOf)
	if problem.Is(err, problem.NotFound) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	ok, err := c.canSee(auth.Resource{Repo: origin})
	if err != nil || !ok {
		return out, err
	}
	oj := c.s.repoJSON(origin, c.projectByID(origin.ProjectID))
	out.Origin = &oj
	return out, nil
}

// projectByID reads a project for rendering; a failure falls back to what
// the repository row knows (the key), which is not worth failing a listing.
func (c *call) projectByID(id int64) *store.Project {
	p, err := c.s.Store.ProjectByID(c.ctx, id)
	if err != nil {
		return nil
	}
	return p
}

// projectCache avoids reading the same project once per repository of a
// listing.
type projectCache struct {
	c    *call
	byID map[int64]*store.Project
}

func (pc *projectCache) get(id int64) *store.Project {
	if p, ok := pc.byID[id]; ok {
		return p
	}
	p := pc.c.projectByID(id)
	pc.byID[id] = p
	return p
}

func (c *call) listProjectRepos() error {
	pg, err := c.page()
	if err != nil {
		return err
	}
	proj, err := c.projectByKey(c.path("key"))
	if problem.Is(err, problem.NotFound) {
		return c.hidden(msgProjectNotFound)
	}
	if err != nil {
		return err
	}
	// Project read implies read on every repository in it; without it the
	// caller may still hold grants on single repositories (or some are
	// public), and sees exactly those.
	projErr := c.authorize(auth.Resource{Project: proj}, auth.Read)
	if projErr != nil && !problem.Is(projErr, problem.NotFound) && !problem.Is(projErr, problem.Unauthenticated) {
		return projErr
	}
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
	if projErr != nil && len(page.Values) == 0 {
		// Nothing visible in a project the caller may not read: it does
		// not exist for them, whatever page they ask for.
		empty := pg.Start == 0
		if !empty {
			first, err := filteredPage(store.Page{Limit: 1},
				func(p store.Page) ([]store.Repository, error) { return c.s.Store.ListRepos(c.ctx, proj.ID, p) },
				func(r *store.Repository) (bool, error) { return c.canSee(auth.Resource{Repo: r, Project: proj}) })
			if err != nil {
				return err
			}
			empty = len(first.Values) == 0
		}
		if empty {
			return projErr
		}
	}
	return c.json(mapPage(page, func(r store.Repository) repoJSON { return c.s.repoJSON(&r, proj) }))
}

func (c *call) listAllRepos() error {
	pg, err := c.page()
	if err != nil {
		return err
	}
	action, byPermission, err := c.permissionFilter("REPO_")
	if err != nil {
		return err
	}
	admin := c.isAdmin()
	filter := c.query("name")
	projectKey := c.query("projectkey")
	page, err := filteredPage(pg,
		func(p store.Page) ([]store.Repository, error) { return c.s.Store.ListAllRepos(c.ctx, filter, p) },
		func(r *store.Repository) (bool, error) {
			if projectKey != "" && !strings.EqualFold(projectKey, r.ProjectKey) {
				return false, nil
			}
			if admin {
				return true, nil
			}
			if byPermission {
				return c.canDo(auth.Resource{Repo: r}, action)
			}
			return c.canSee(auth.Resource{Repo: r})
		})
	if err != nil {
		return err
	}
	pc := &projectCache{c: c, byID: map[int64]*store.Project{}}
	return c.json(mapPage(page, func(r store.Repository) repoJSON { return c.s.repoJSON(&r, pc.get(r.ProjectID)) }))
}

func (c *call) createRepo() error {
	proj, err := c.projectFor(auth.Read)
	if err != nil {
		return err
	}
	var b repoBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	if b.ScmID != nil && *b.ScmID != "" && *b.ScmID != "git" {
		return problem.New(problem.Invalid, "scmId must be \"git\"")
	}
	r, err := c.s.Accounts.CreateRepository(c.ctx, c.actor(), proj, accounts.NewRepository{
		Name: deref(b.Name), Description: deref(b.Description), DefaultBranch: deref(b.DefaultBranch),
		Public: b.Public != nil && *b.Public,
	})
	if err != nil {
		return err
	}
	return c.jsonStatus(http.StatusCreated, c.s.repoJSON(r, proj))
}

func (c *call) getRepo() error {
	proj, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	out, err := c.repoWithOrigin(r, proj)
	if err != nil {
		return err
	}
	return c.json(out)
}

// updateRepo renames (a new name gives a new slug, as in Bitbucket),
// changes the description or visibility, or moves the repository to
// another project the caller may write to.
func (c *call) updateRepo() error {
	proj, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	var b repoBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	ch := accounts.RepositoryChange{Name: b.Name, Description: b.Description, Public: b.Public, DefaultBranch: b.DefaultBranch}
	target := proj
	if b.Project != nil && b.Project.Key != "" && !strings.EqualFold(b.Project.Key, proj.Key) {
		dst, err := c.projectByKey(b.Project.Key)
		if problem.Is(err, problem.NotFound) {
			return c.hidden(msgProjectNotFound)
		}
		if err != nil {
			return err
		}
		ch.Project, target = dst, dst
	}
	r, err = c.s.Accounts.UpdateRepository(c.ctx, c.actor(), r, ch)
	if err != nil {
		return err
	}
	out, err := c.repoWithOrigin(r, target)
	if err != nil {
		return err
	}
	return c.json(out)
}

func (c *call) deleteRepo() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	if err := c.s.Accounts.DeleteRepository(c.ctx, c.actor(), r); err != nil {
		return err
	}
	// Bitbucket answers 202: deletion is accepted.
	c.w.WriteHeader(http.StatusAccepted)
	return nil
}

type forkBody struct {
	Name        *string     `json:"name"`
	Description *string     `json:"description"`
	Public      *bool       `json:"public"`
	Project     *projectRef `json:"project"`
}

// forkRepo is Bitbucket's fork endpoint (POST on the repository). A fork
// lands in the project the body names (a personal one, "~alice", too), or
// in the origin's own project under another name.
func (c *call) forkRepo() error {
	proj, origin, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	var b forkBody
	if err := c.decode(&b, true); err != nil {
		return err
	}
	target := proj
	if b.Project != nil && b.Project.Key != "" && !strings.EqualFold(b.Project.Key, proj.Key) {
		target, err = c.projectByKey(b.Project.Key)
		if problem.Is(err, problem.NotFound) {
			return c.hidden(msgProjectNotFound)
		}
		if err != nil {
			return err
		}
	}
	in := accounts.NewRepository{Name: deref(b.Name), Description: deref(b.Description), Public: b.Public != nil && *b.Public}
	fork, err := c.s.Accounts.ForkRepository(c.ctx, c.actor(), origin, target, in)
	if err != nil {
		return err
	}
	out := c.s.repoJSON(fork, target)
	oj := c.s.repoJSON(origin, proj)
	out.Origin = &oj
	return c.jsonStatus(http.StatusCreated, out)
}
