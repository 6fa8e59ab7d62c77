package web

import (
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Repository settings, for repository administrators: name, description,
// visibility, default branch, permissions, deletion. The same steps as the
// REST API's handlers, through the same store and repo calls.

var repoPerms = []store.Permission{store.PermRepoRead, store.PermRepoWrite, store.PermRepoAdmin}

type repoSettingsData struct {
	repoView
	Grants   []store.Grant
	Branches []repo.Ref
	Perms    []store.Permission
	Pull     *pullSettingsView
}

func (c *call) repoSettings() error {
	proj, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	grants, err := c.s.Store.RepoGrants(c.ctx, r.ID)
	if err != nil {
		return err
	}
	branches, _, err := c.s.Repos.Refs(c.ctx, r.ID, "heads", "", 0, 200)
	if err != nil {
		return err
	}
	d := repoSettingsData{repoView: c.repoView(proj, r, "settings"), Grants: grants, Branches: branches, Perms: repoPerms}
	if d.Pull, err = c.pullSettings(r); err != nil {
		return err
	}
	return c.ok("settings", r.Name+": settings", d)
}

func (c *call) updateRepo() error {
	_, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	name, desc := c.form("name"), c.form("description")
	if name != "" && name != r.Name {
		if err := store.ValidateRepoName(name); err != nil {
			return err
		}
		slug := store.Slugify(name)
		if err := store.ValidateSlug(slug); err != nil {
			return err
		}
		r.Name, r.Slug = name, slug
	}
	if len(desc) > 4000 {
		return problem.New(problem.Invalid, "the description must be at most 4000 bytes")
	}
	r.Description = desc
	r.Public = c.form("public") == "on"
	if err := c.s.Store.UpdateRepo(c.ctx, r); err != nil {
		return err
	}
	c.s.logger.Info("repository updated", "repo_id", r.ID, "repo", r.Slug, "user", c.user.Name)
	return c.flash(repoURL(r)+"/settings", "saved")
}

func (c *call) setDefaultBranch() error {
	_, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	b := strings.TrimPrefix(c.form("branch"), "refs/heads/")
	if err := repo.ValidateBranchName(b); err != nil {
		return err
	}
	if err := c.s.Repos.SetDefaultBranch(c.ctx, r.ID, b); err != nil {
		return err
	}
	r.DefaultBranch = b
	if err := c.s.Store.UpdateRepo(c.ctx, r); err != nil {
		return err
	}
	// HEAD moved without a ref transaction (symbolic-ref runs no hook), so
	// caches keyed on the refs generation must be told.
	if err := c.s.Store.BumpGeneration(c.ctx, r.ID); err != nil {
		return err
	}
	c.s.logger.Info("default branch set", "repo_id", r.ID, "branch", b, "user", c.user.Name)
	return c.flash(repoURL(r)+"/settings", "saved")
}

// grantee resolves the "user" or "group" form field to a grant.
func (c *call) grantee(perm store.Permission) (store.Grant, error) {
	g := store.Grant{Permission: perm}
	switch kind, name := c.form("kind"), c.form("name"); kind {
	case "user":
		u, err := c.s.Store.UserByName(c.ctx, name)
		if err != nil {
			return g, err
		}
		g.UserID, g.UserName = u.ID, u.Name
	case "group":
		gr, err := c.s.Store.GroupByName(c.ctx, name)
		if err != nil {
			return g, err
		}
		g.GroupID, g.GroupName = gr.ID, gr.Name
	default:
		return g, problem.New(problem.Invalid, "choose a user or a group")
	}
	return g, nil
}

func (c *call) formPermission(allowed []store.Permission) (store.Permission, error) {
	p := store.Permission(c.form("permission"))
	for _, a := range allowed {
		if a == p {
			return p, nil
		}
	}
	return "", problem.New(problem.Invalid, "unknown permission %q", string(p))
}

func (c *call) setRepoPermission() error {
	_, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	perm, err := c.formPermission(repoPerms)
	if err != nil {
		return err
	}
	g, err := c.grantee(perm)
	if err != nil {
		return err
	}
	if err := c.s.Store.SetRepoPermission(c.ctx, r.ID, g); err != nil {
		return err
	}
	c.s.logger.Info("repository permission set", "repo_id", r.ID, "permission", string(perm), "user_id", g.UserID, "group_id", g.GroupID, "by", c.user.Name)
	return c.flash(repoURL(r)+"/settings", "saved")
}

func formIDs(c *call) (userID, groupID int64) {
	userID, _ = strconv.ParseInt(c.form("user_id"), 10, 64)
	groupID, _ = strconv.ParseInt(c.form("group_id"), 10, 64)
	return userID, groupID
}

func (c *call) revokeRepoPermission() error {
	_, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	uid, gid := formIDs(c)
	if err := c.s.Store.RevokeRepoPermission(c.ctx, r.ID, uid, gid); err != nil {
		return err
	}
	c.s.logger.Info("repository permission revoked", "repo_id", r.ID, "user_id", uid, "group_id", gid, "by", c.user.Name)
	return c.flash(repoURL(r)+"/settings", "saved")
}

func (c *call) deleteRepo() error {
	proj, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	if c.form("confirm") != r.Slug {
		return problem.New(problem.Invalid, "type the repository's slug %q to confirm", r.Slug)
	}
	if err := repo.Remove(c.ctx, c.s.Store, c.s.Repos, r); err != nil {
		return err
	}
	c.s.logger.Info("repository deleted", "repo_id", r.ID, "repo", r.Slug, "user", c.user.Name)
	return c.flash(projectURL(proj.Key), "deleted")
}
