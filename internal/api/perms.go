package api

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Permission management has the same three operations (list, set, revoke)
// for users and groups on three kinds of resource (global, project,
// repository), so one set of handlers serves all six URL families; the
// accounts service owns the rules for each kind.

// globalTarget: administrators manage global permissions.
func (c *call) globalTarget() (accounts.Target, error) {
	return accounts.Target{}, c.global(auth.Admin)
}

// projectTarget: project administrators manage the project's grants.
func (c *call) projectTarget() (accounts.Target, error) {
	p, err := c.projectFor(auth.Admin)
	return accounts.Target{Project: p}, err
}

// repoTarget: repository administrators manage the repository's grants.
func (c *call) repoTarget() (accounts.Target, error) {
	p, r, err := c.repoFor(auth.Admin)
	return accounts.Target{Project: p, Repo: r}, err
}

// grants lists t's grants.
func (c *call) grants(t accounts.Target) ([]store.Grant, error) {
	switch {
	case t.Repo != nil:
		return c.s.Store.RepoGrants(c.ctx, t.Repo.ID)
	case t.Project != nil:
		return c.s.Store.ProjectGrants(c.ctx, t.Project.ID)
	}
	return c.s.Store.GlobalGrants(c.ctx)
}

type userPermJSON struct {
	User       userJSON         `json:"user"`
	Permission store.Permission `json:"permission"`
}

type groupPermJSON struct {
	Group      groupJSON        `json:"group"`
	Permission store.Permission `json:"permission"`
}

// permHandlers returns the list, set and revoke handlers for users (groups
// false) or groups of the target target returns.
func permHandlers(target func(*call) (accounts.Target, error), groups bool) (list, set, revoke func(*call) error) {
	list = func(c *call) error {
		t, err := target(c)
		if err != nil {
			return err
		}
		pg, err := c.page()
		if err != nil {
			return err
		}
		grants, err := c.grants(t)
		if err != nil {
			return err
		}
		filter := strings.ToLower(c.query("filter"))
		var kept []store.Grant
		for _, g := range grants {
			name := g.UserName
			if groups {
				name = g.GroupName
			}
			if (g.GroupID != 0) == groups && strings.Contains(strings.ToLower(name), filter) {
				kept = append(kept, g)
			}
		}
		page := slicePage(kept, pg)
		if groups {
			return c.json(mapPage(page, func(g store.Grant) groupPermJSON {
				return groupPermJSON{Group: groupJSON{Name: g.GroupName, Deletable: true}, Permission: g.Permission}
			}))
		}
		// Grants carry the name only; the user document needs the row.
		var ferr error
		out := mapPage(page, func(g store.Grant) userPermJSON {
			u, err := c.s.Store.UserByID(c.ctx, g.UserID)
			if err != nil {
				ferr = err
				return userPermJSON{}
			}
			return userPermJSON{User: c.s.userJSON(u), Permission: g.Permission}
		})
		if ferr != nil {
			return ferr
		}
		return c.json(out)
	}
	set = func(c *call) error {
		t, err := target(c)
		if err != nil {
			return err
		}
		grantees, err := c.grantees(groups)
		if err != nil {
			return err
		}
		if err := c.s.Accounts.Grant(c.ctx, c.actor(), t, grantees, store.Permission(c.query("permission"))); err != nil {
			return err
		}
		return c.noContent()
	}
	revoke = func(c *call) error {
		t, err := target(c)
		if err != nil {
			return err
		}
		grantees, err := c.grantees(groups)
		if err != nil {
			return err
		}
		if err := c.s.Accounts.Revoke(c.ctx, c.actor(), t, grantees); err != nil {
			return err
		}
		return c.noContent()
	}
	return list, set, revoke
}

// grantees resolves the repeated "name" query parameter to users or groups.
func (c *call) grantees(groups bool) ([]store.Grant, error) {
	names := c.r.URL.Query()["name"]
	if len(names) == 0 {
		return nil, problem.New(problem.Invalid, "query parameter name is required")
	}
	if groups {
		return c.s.Accounts.Grantees(c.ctx, nil, names)
	}
	return c.s.Accounts.Grantees(c.ctx, names, nil)
}
