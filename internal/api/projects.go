package api

import (
	"net/http"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/store"
)

type projectBody struct {
	Key         *string `json:"key"`
	Name        *string `json:"name"`
	Description *string `json:"description"`
	Public      *bool   `json:"public"`
}

func (c *call) listProjects() error {
	pg, err := c.page()
	if err != nil {
		return err
	}
	action, byPermission, err := c.permissionFilter("PROJECT_")
	if err != nil {
		return err
	}
	// Anonymous callers may list public projects; no global check first.
	admin := c.isAdmin()
	filter := c.query("name")
	page, err := filteredPage(pg,
		func(p store.Page) ([]store.Project, error) { return c.s.Store.ListProjects(c.ctx, filter, p) },
		func(p *store.Project) (bool, error) {
			if admin {
				return true, nil
			}
			if byPermission {
				return c.canDo(auth.Resource{Project: p}, action)
			}
			return c.canSee(auth.Resource{Project: p})
		})
	if err != nil {
		return err
	}
	return c.json(mapPage(page, func(p store.Project) projectJSON { return c.s.projectJSON(&p) }))
}

func (c *call) createProject() error {
	var b projectBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	p, err := c.s.Accounts.CreateProject(c.ctx, c.actor(), accounts.NewProject{
		Key: deref(b.Key), Name: deref(b.Name), Description: deref(b.Description), Public: b.Public != nil && *b.Public,
	})
	if err != nil {
		return err
	}
	return c.jsonStatus(http.StatusCreated, c.s.projectJSON(p))
}

// deref is *p, or "" for nil: an absent field of a create body.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (c *call) getProject() error {
	p, err := c.projectFor(auth.Read)
	if err != nil {
		return err
	}
	return c.json(c.s.projectJSON(p))
}

func (c *call) updateProject() error {
	p, err := c.projectFor(auth.Read)
	if err != nil {
		return err
	}
	var b projectBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	p, err = c.s.Accounts.UpdateProject(c.ctx, c.actor(), p, accounts.ProjectChange{
		Key: b.Key, Name: b.Name, Description: b.Description, Public: b.Public,
	})
	if err != nil {
		return err
	}
	return c.json(c.s.projectJSON(p))
}

func (c *call) deleteProject() error {
	p, err := c.projectFor(auth.Read)
	if err != nil {
		return err
	}
	if err := c.s.Accounts.DeleteProject(c.ctx, c.actor(), p); err != nil {
		return err
	}
	return c.noContent()
}
