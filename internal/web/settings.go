package web

import (
	"strconv"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Repository settings, for repository administrators: name, description,
// visibility, default branch, permissions, deletion. The same steps as the
// REST API's handlers, through the same store and repo calls.

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
	d := repoSettingsData{repoView: c.repoView(proj, r, "settings"), Grants: grants, Branches: branches, Perms: accounts.RepoPermissions}
	if d.Pull, err = c.pullSettings(r); err != nil {
		return err
	}
	return c.ok("settings", r.Name+": settings", d)
}

func (c *call) updateRepo() error {
	_, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	ch := accounts.RepositoryChange{Description: ptr(c.form("description")), Public: ptr(c.form("public") == "on")}
	if name := c.form("name"); name != "" {
		ch.Name = &name
	}
	if r, err = c.s.Accounts.UpdateRepository(c.ctx, c.actor(), r, ch); err != nil {
		return err
	}
	return c.flash(repoURL(r)+"/settings", "saved")
}

func ptr[T any](v T) *T { return &v }

func (c *call) setDefaultBranch() error {
	_, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	if err := c.s.Accounts.SetDefaultBranch(c.ctx, c.actor(), r, c.form("branch")); err != nil {
		return err
	}
	return c.flash(repoURL(r)+"/settings", "saved")
}

// grantee resolves the "user" or "group" form field to a grantee.
func (c *call) grantee() (store.Grant, error) {
	var users, groups []string
	switch kind, name := c.form("kind"), c.form("name"); kind {
	case "user":
		users = []string{name}
	case "group":
		groups = []string{name}
	default:
		return store.Grant{}, problem.New(problem.Invalid, "choose a user or a group")
	}
	gs, err := c.s.Accounts.Grantees(c.ctx, users, groups)
	if err != nil {
		return store.Grant{}, err
	}
	return gs[0], nil
}

func (c *call) setRepoPermission() error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	g, err := c.grantee()
	if err != nil {
		return err
	}
	t := accounts.Target{Project: proj, Repo: r}
	if err := c.s.Accounts.Grant(c.ctx, c.actor(), t, []store.Grant{g}, store.Permission(c.form("permission"))); err != nil {
		return err
	}
	return c.flash(repoURL(r)+"/settings", "saved")
}

func formIDs(c *call) (userID, groupID int64) {
	userID, _ = strconv.ParseInt(c.form("user_id"), 10, 64)
	groupID, _ = strconv.ParseInt(c.form("group_id"), 10, 64)
	return userID, groupID
}

func (c *call) revokeRepoPermission() error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	uid, gid := formIDs(c)
	t := accounts.Target{Project: proj, Repo: r}
	if err := c.s.Accounts.Revoke(c.ctx, c.actor(), t, []store.Grant{{UserID: uid, GroupID: gid}}); err != nil {
		return err
	}
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
	if err := c.s.Accounts.DeleteRepository(c.ctx, c.actor(), r); err != nil {
		return err
	}
	return c.flash(projectURL(proj.Key), "deleted")
}
