package api

import (
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Permission management has the same three operations (list, set, revoke)
// for users and groups on three kinds of resource (global, project,
// repository). permTarget captures the resource so one set of handlers
// serves all six URL families.
type permTarget struct {
	kind    string // "global", "project", "repository": for messages
	allowed []store.Permission
	list    func() ([]store.Grant, error)
	set     func(store.Grant) error
	revoke  func(userID, groupID int64) error
}

// Bitbucket's permission names per resource kind, weakest first.
var (
	globalPerms  = []store.Permission{store.PermProjectCreate, store.PermAdmin, store.PermSysAdmin}
	projectPerms = []store.Permission{store.PermProjectRead, store.PermProjectWrite, store.PermProjectAdmin}
	repoPerms    = []store.Permission{store.PermRepoRead, store.PermRepoWrite, store.PermRepoAdmin}
)

// globalTarget: administrators manage global permissions.
func (c *call) globalTarget() (*permTarget, error) {
	if err := c.global(auth.Admin); err != nil {
		return nil, err
	}
	st := c.s.Store
	return &permTarget{
		kind: "global", allowed: globalPerms,
		list:   func() ([]store.Grant, error) { return st.GlobalGrants(c.ctx) },
		set:    func(g store.Grant) error { return st.SetGlobalPermission(c.ctx, g) },
		revoke: func(u, g int64) error { return st.RevokeGlobalPermission(c.ctx, u, g) },
	}, nil
}

// projectTarget: project administrators manage the project's grants.
func (c *call) projectTarget() (*permTarget, error) {
	p, err := c.projectFor(auth.Admin)
	if err != nil {
		return nil, err
	}
	st := c.s.Store
	return &permTarget{
		kind: "project", allowed: projectPerms,
		list:   func() ([]store.Grant, error) { return st.ProjectGrants(c.ctx, p.ID) },
		set:    func(g store.Grant) error { return st.SetProjectPermission(c.ctx, p.ID, g) },
		revoke: func(u, g int64) error { return st.RevokeProjectPermission(c.ctx, p.ID, u, g) },
	}, nil
}

// repoTarget: repository administrators manage the repository's grants.
func (c *call) repoTarget() (*permTarget, error) {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return nil, err
	}
	st := c.s.Store
	return &permTarget{
		kind: "repository", allowed: repoPerms,
		list:   func() ([]store.Grant, error) { return st.RepoGrants(c.ctx, r.ID) },
		set:    func(g store.Grant) error { return st.SetRepoPermission(c.ctx, r.ID, g) },
		revoke: func(u, g int64) error { return st.RevokeRepoPermission(c.ctx, r.ID, u, g) },
	}, nil
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
func permHandlers(target func(*call) (*permTarget, error), groups bool) (list, set, revoke func(*call) error) {
	list = func(c *call) error {
		t, err := target(c)
		if err != nil {
			return err
		}
		pg, err := c.page()
		if err != nil {
			return err
		}
		grants, err := t.list()
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
		perm := store.Permission(c.query("permission"))
		if !slices.Contains(t.allowed, perm) {
			return problem.New(problem.Invalid, "permission %s is not a %s permission (one of %s)",
				quoteShort(string(perm)), t.kind, joinPerms(t.allowed))
		}
		grantees, err := c.grantees(groups)
		if err != nil {
			return err
		}
		if err := c.guardGlobal(t, grantees, perm); err != nil {
			return err
		}
		for _, g := range grantees {
			g.Permission = perm
			if err := t.set(g); err != nil {
				return err
			}
		}
		c.s.logger.Info("permission granted", "resource", t.kind, "permission", string(perm),
			"grantees", len(grantees), "groups", groups, "principal", c.p.String())
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
		if err := c.guardGlobal(t, grantees, ""); err != nil {
			return err
		}
		for _, g := range grantees {
			if err := t.revoke(g.UserID, g.GroupID); err != nil {
				return err
			}
		}
		c.s.logger.Info("permission revoked", "resource", t.kind, "grantees", len(grantees), "groups", groups, "principal", c.p.String())
		return c.noContent()
	}
	return list, set, revoke
}

// maxGrantees bounds the name parameters of one permission request.
const maxGrantees = 100

// grantees resolves the repeated "name" query parameter to users or groups.
func (c *call) grantees(groups bool) ([]store.Grant, error) {
	names := c.r.URL.Query()["name"]
	if len(names) == 0 {
		return nil, problem.New(problem.Invalid, "query parameter name is required")
	}
	if len(names) > maxGrantees {
		return nil, problem.New(problem.Invalid, "at most %d names per request", maxGrantees)
	}
	out := make([]store.Grant, 0, len(names))
	for _, name := range names {
		if groups {
			g, err := c.s.Store.GroupByName(c.ctx, name)
			if problem.Is(err, problem.NotFound) {
				return nil, problem.New(problem.NotFound, "group %s not found", quoteShort(name))
			}
			if err != nil {
				return nil, err
			}
			out = append(out, store.Grant{GroupID: g.ID, GroupName: g.Name})
			continue
		}
		u, err := c.s.Store.UserByName(c.ctx, name)
		if problem.Is(err, problem.NotFound) {
			return nil, problem.New(problem.NotFound, "user %s not found", quoteShort(name))
		}
		if err != nil {
			return nil, err
		}
		out = append(out, store.Grant{UserID: u.ID, UserName: u.Name})
	}
	return out, nil
}

// guardGlobal applies Bitbucket's two rules on global permissions: only a
// SYS_ADMIN grants SYS_ADMIN or changes the permission of a group or user
// that holds it, and nobody changes their own (an administrator removing
// their own ADMIN by mistake may leave nobody to undo it).
func (c *call) guardGlobal(t *permTarget, grantees []store.Grant, perm store.Permission) error {
	if t.kind != "global" {
		return nil
	}
	current, err := t.list()
	if err != nil {
		return err
	}
	callerSys := false
	if c.p.UserID != 0 {
		global, _, _, err := c.s.Store.EffectiveGrants(c.ctx, c.p.UserID, 0, 0)
		if err != nil {
			return err
		}
		callerSys = slices.Contains(global, store.PermSysAdmin)
	}
	for _, g := range grantees {
		if g.UserID != 0 && g.UserID == c.p.UserID {
			return problem.New(problem.Invalid, "you cannot change your own global permission")
		}
		if callerSys {
			continue
		}
		if perm == store.PermSysAdmin {
			return problem.New(problem.Forbidden, "only a system administrator can grant SYS_ADMIN")
		}
		for _, cur := range current {
			if cur.Permission == store.PermSysAdmin && cur.UserID == g.UserID && cur.GroupID == g.GroupID {
				return problem.New(problem.Forbidden, "only a system administrator can change the permission of a system administrator")
			}
		}
	}
	return nil
}

func joinPerms(ps []store.Permission) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}
