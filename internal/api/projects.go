package api

import (
	"net/http"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
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
	// Anonymous callers may list public projects; no global check first.
	admin := c.isAdmin()
	filter := c.query("name")
	page, err := filteredPage(pg,
		func(p store.Page) ([]store.Project, error) { return c.s.Store.ListProjects(c.ctx, filter, p) },
		func(p *store.Project) (bool, error) {
			if admin {
				return true, nil
			}
			return c.canSee(auth.Resource{Project: p})
		})
	if err != nil {
		return err
	}
	return c.json(mapPage(page, func(p store.Project) projectJSON { return c.s.projectJSON(&p) }))
}

func (c *call) createProject() error {
	if err := c.global(auth.Write); err != nil {
		return err
	}
	var b projectBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	p := store.Project{}
	if b.Key != nil {
		p.Key = *b.Key
	}
	if err := store.ValidateProjectKey(p.Key); err != nil {
		return err
	}
	if b.Name != nil {
		p.Name = *b.Name
	}
	if b.Description != nil {
		p.Description = *b.Description
	}
	if b.Public != nil {
		p.Public = *b.Public
	}
	if err := validateProjectText(p.Name, p.Description); err != nil {
		return err
	}
	if err := c.s.Store.CreateProject(c.ctx, &p); err != nil {
		return err
	}
	// As in Bitbucket, whoever creates a project administers it; without
	// this a PROJECT_CREATE user could create a project and then not even
	// add a repository to it.
	if c.p.UserID != 0 && !c.isAdmin() {
		if err := c.s.Store.SetProjectPermission(c.ctx, p.ID, store.Grant{UserID: c.p.UserID, Permission: store.PermProjectAdmin}); err != nil {
			return err
		}
	}
	c.s.logger.Info("project created", "project", p.Key, "principal", c.p.String())
	return c.jsonStatus(http.StatusCreated, c.s.projectJSON(&p))
}

// validateProjectText checks what the store's CreateProject also checks,
// so that updates get the same messages.
func validateProjectText(name, description string) error {
	if strings.TrimSpace(name) == "" {
		return problem.New(problem.Invalid, "project name must not be empty")
	}
	if err := checkText("project name", name, 255); err != nil {
		return err
	}
	return checkText("project description", description, 4000)
}

func (c *call) getProject() error {
	p, err := c.projectFor(auth.Read)
	if err != nil {
		return err
	}
	return c.json(c.s.projectJSON(p))
}

func (c *call) updateProject() error {
	p, err := c.projectFor(auth.Admin)
	if err != nil {
		return err
	}
	var b projectBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	if b.Key != nil && !strings.EqualFold(*b.Key, p.Key) {
		if err := store.ValidateProjectKey(*b.Key); err != nil {
			return err
		}
		p.Key = strings.ToUpper(*b.Key)
	}
	if b.Name != nil {
		p.Name = *b.Name
	}
	if b.Description != nil {
		p.Description = *b.Description
	}
	if b.Public != nil {
		p.Public = *b.Public
	}
	if err := validateProjectText(p.Name, p.Description); err != nil {
		return err
	}
	if err := c.s.Store.UpdateProject(c.ctx, p); err != nil {
		return err
	}
	return c.json(c.s.projectJSON(p))
}

func (c *call) deleteProject() error {
	p, err := c.projectFor(auth.Admin)
	if err != nil {
		return err
	}
	// Bitbucket refuses to delete a project that still holds repositories:
	// deleting them is a separate, deliberate act per repository.
	repos, err := c.s.Store.ListRepos(c.ctx, p.ID, store.Page{Limit: 1})
	if err != nil {
		return err
	}
	if len(repos) > 0 {
		return problem.New(problem.Conflict, "project %q still has repositories; delete them first", p.Key)
	}
	if err := c.s.Store.DeleteProject(c.ctx, p.ID); err != nil {
		return err
	}
	c.s.logger.Info("project deleted", "project", p.Key, "principal", c.p.String())
	return c.noContent()
}
