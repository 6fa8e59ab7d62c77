package accounts

import (
	"context"
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Target is what a grant is on: a repository, a project, or (both nil)
// the whole server.
type Target struct {
	Project *store.Project
	Repo    *store.Repository
}

// Bitbucket's permission names per kind of target, weakest first.
var (
	GlobalPermissions  = []store.Permission{store.PermProjectCreate, store.PermAdmin, store.PermSysAdmin}
	ProjectPermissions = []store.Permission{store.PermProjectRead, store.PermProjectWrite, store.PermProjectAdmin}
	RepoPermissions    = []store.Permission{store.PermRepoRead, store.PermRepoWrite, store.PermRepoAdmin}
)

// Kind is "global", "project" or "repository", for messages.
func (t Target) Kind() string {
	switch {
	case t.Repo != nil:
		return "repository"
	case t.Project != nil:
		return "project"
	}
	return "global"
}

// Permissions lists the permissions t takes, weakest first.
func (t Target) Permissions() []store.Permission {
	switch {
	case t.Repo != nil:
		return RepoPermissions
	case t.Project != nil:
		return ProjectPermissions
	}
	return GlobalPermissions
}

// resource is the auth resource whose administrators manage t's grants.
func (t Target) resource() auth.Resource {
	return auth.Resource{Repo: t.Repo, Project: t.Project}
}

// maxGrantees bounds the grantees of one permission change.
const maxGrantees = 100

// Grantees resolves user or group names to grants (without a permission),
// with one message for a name that does not exist.
func (s *Service) Grantees(ctx context.Context, users, groups []string) ([]store.Grant, error) {
	if len(users)+len(groups) == 0 {
		return nil, problem.New(problem.Invalid, "name at least one user or group")
	}
	if len(users)+len(groups) > maxGrantees {
		return nil, problem.New(problem.Invalid, "at most %d names per request", maxGrantees)
	}
	out := make([]store.Grant, 0, len(users)+len(groups))
	for _, name := range users {
		u, err := s.userNamed(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Grant{UserID: u.ID, UserName: u.Name})
	}
	for _, name := range groups {
		g, err := s.groupNamed(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Grant{GroupID: g.ID, GroupName: g.Name})
	}
	return out, nil
}

// Grant gives each grantee perm on t, replacing what they held there.
// Global grants are for administrators, a project's for its PROJECT_ADMINs,
// a repository's for its REPO_ADMINs; see guardGlobal for the two extra
// rules on global ones.
func (s *Service) Grant(ctx context.Context, a Actor, t Target, grantees []store.Grant, perm store.Permission) error {
	if err := s.authorize(ctx, a, t.resource(), auth.Admin); err != nil {
		return err
	}
	if !slices.Contains(t.Permissions(), perm) {
		return problem.New(problem.Invalid, "permission %s is not a %s permission (one of %s)",
			quoteShort(string(perm)), t.Kind(), joinPerms(t.Permissions()))
	}
	if err := s.checkGrantees(grantees); err != nil {
		return err
	}
	if err := s.guardGlobal(ctx, a, t, grantees, perm); err != nil {
		return err
	}
	for _, g := range grantees {
		g.Permission = perm
		var err error
		switch {
		case t.Repo != nil:
			err = s.st.SetRepoPermission(ctx, t.Repo.ID, g)
		case t.Project != nil:
			err = s.st.SetProjectPermission(ctx, t.Project.ID, g)
		default:
			err = s.st.SetGlobalPermission(ctx, g)
		}
		if err != nil {
			return err
		}
	}
	s.logger.Info("permission granted", "resource", t.Kind(), "resource_id", t.id(), "permission", string(perm),
		"grantees", len(grantees), "actor", a.String())
	return nil
}

// Revoke removes each grantee's grant on t; who may is as for Grant.
func (s *Service) Revoke(ctx context.Context, a Actor, t Target, grantees []store.Grant) error {
	if err := s.authorize(ctx, a, t.resource(), auth.Admin); err != nil {
		return err
	}
	if err := s.checkGrantees(grantees); err != nil {
		return err
	}
	if err := s.guardGlobal(ctx, a, t, grantees, ""); err != nil {
		return err
	}
	for _, g := range grantees {
		var err error
		switch {
		case t.Repo != nil:
			err = s.st.RevokeRepoPermission(ctx, t.Repo.ID, g.UserID, g.GroupID)
		case t.Project != nil:
			err = s.st.RevokeProjectPermission(ctx, t.Project.ID, g.UserID, g.GroupID)
		default:
			err = s.st.RevokeGlobalPermission(ctx, g.UserID, g.GroupID)
		}
		if err != nil {
			return err
		}
	}
	s.logger.Info("permission revoked", "resource", t.Kind(), "resource_id", t.id(), "grantees", len(grantees), "actor", a.String())
	return nil
}

func (t Target) id() int64 {
	switch {
	case t.Repo != nil:
		return t.Repo.ID
	case t.Project != nil:
		return t.Project.ID
	}
	return 0
}

func (s *Service) checkGrantees(grantees []store.Grant) error {
	if len(grantees) == 0 {
		return problem.New(problem.Invalid, "name at least one user or group")
	}
	if len(grantees) > maxGrantees {
		return problem.New(problem.Invalid, "at most %d names per request", maxGrantees)
	}
	for _, g := range grantees {
		if (g.UserID == 0) == (g.GroupID == 0) {
			return problem.New(problem.Invalid, "a grant names exactly one user or one group")
		}
	}
	return nil
}

// guardGlobal applies Bitbucket's two rules on global permissions: only a
// SYS_ADMIN grants SYS_ADMIN or changes the permission of a group or user
// that holds it, and nobody changes their own (an administrator removing
// their own ADMIN by mistake may leave nobody to undo it).
func (s *Service) guardGlobal(ctx context.Context, a Actor, t Target, grantees []store.Grant, perm store.Permission) error {
	if t.Kind() != "global" {
		return nil
	}
	sys, err := s.isSysAdmin(ctx, a)
	if err != nil {
		return err
	}
	var current []store.Grant
	if !sys {
		if current, err = s.st.GlobalGrants(ctx); err != nil {
			return err
		}
	}
	for _, g := range grantees {
		if g.UserID != 0 && g.UserID == a.userID() {
			return problem.New(problem.Invalid, "you cannot change your own global permission")
		}
		if sys {
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
