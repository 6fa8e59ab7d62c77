package auth

import (
	"context"
	"fmt"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// level is a permission strength on one resource; it compares directly
// with Action (levelRead == Read, …).
type level int

const (
	levelNone level = iota
	levelRead
	levelWrite
	levelAdmin
)

const (
	msgAuthRequired    = "authentication required"
	msgRepoNotFound    = "repository not found"
	msgProjectNotFound = "project not found"
)

// Authorize reports whether p may perform a on res: nil when allowed,
// otherwise a problem error of kind Unauthenticated (anonymous caller),
// NotFound (the caller may not even read res) or Forbidden (the caller may
// read res but not do a, or their token's scope is too small). Store
// failures are returned as they are.
//
// A repository p may read is remembered for the outage grace (grace.go).
func (s *Service) Authorize(ctx context.Context, p *Principal, res Resource, a Action) error {
	err := s.authorize(ctx, p, res, a)
	if err == nil && res.Repo != nil && s.grace.ttl > 0 {
		s.grace.rememberRead(p, res.Repo, s.now())
	}
	return err
}

func (s *Service) authorize(ctx context.Context, p *Principal, res Resource, a Action) error {
	if a < Read || a > Admin {
		return fmt.Errorf("authorize: unknown action %d", int(a))
	}
	if res.Repo == nil && res.Project != nil && res.Project.ID == 0 ||
		res.Repo != nil && res.Repo.ID == 0 {
		// A zero id would match no grant but could match an access key
		// with a zero repository; refuse the programming error outright.
		return fmt.Errorf("authorize: resource without id")
	}
	if p != nil && p.ResourceToken != nil && !p.Anonymous {
		return authorizeResourceToken(p, res, a)
	}
	if p.isAccessKey() {
		return authorizeAccessKey(p, res, a)
	}
	// Reading something public needs no identity: answer before touching
	// the database, which keeps listings of public repositories cheap.
	if a == Read && scopeLevel(p) >= levelRead {
		projectPublic := res.Project != nil && res.Project.Public &&
			(res.Repo == nil || res.Repo.ProjectID == res.Project.ID)
		if res.Repo != nil && res.Repo.Public || projectPublic {
			return nil
		}
	}
	user, err := s.activeUser(ctx, p)
	if err != nil {
		return err
	}
	switch {
	case res.Repo != nil:
		return s.authorizeRepo(ctx, p, user, res, a)
	case res.Project != nil:
		return s.authorizeProject(ctx, p, user, res.Project, a)
	default:
		return s.authorizeGlobal(ctx, p, user, a)
	}
}

// activeUser returns the principal's user when it is an active account,
// and nil for anonymous callers and for users disabled or deleted since
// they authenticated.
func (s *Service) activeUser(ctx context.Context, p *Principal) (*store.User, error) {
	if p.IsAnonymous() {
		return nil, nil
	}
	u, err := s.st.UserByID(ctx, p.UserID)
	if problem.Is(err, problem.NotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("authorize: read user: %w", err)
	}
	if !u.Active {
		return nil, nil
	}
	return u, nil
}

func (s *Service) authorizeRepo(ctx context.Context, p *Principal, user *store.User, res Resource, a Action) error {
	repo := res.Repo
	have := levelNone
	if user != nil {
		global, project, repoPerms, err := s.st.EffectiveGrants(ctx, user.ID, repo.ProjectID, repo.ID)
		if err != nil {
			return fmt.Errorf("authorize: read grants: %w", err)
		}
		if isGlobalAdmin(global) {
			have = levelAdmin
		} else {
			have = max(projectLevel(project), repoLevel(repoPerms))
		}
	}
	if have < levelRead {
		public, err := s.repoProjectPublic(ctx, res)
		if err != nil {
			return err
		}
		if repo.Public || public {
			have = levelRead
		}
	}
	return decide(p, user, have, a, msgRepoNotFound, "repository")
}

// repoProjectPublic reports whether the project of res.Repo is public,
// using res.Project when the caller passed the right one.
func (s *Service) repoProjectPublic(ctx context.Context, res Resource) (bool, error) {
	if res.Project != nil && res.Project.ID == res.Repo.ProjectID {
		return res.Project.Public, nil
	}
	proj, err := s.st.ProjectByID(ctx, res.Repo.ProjectID)
	if problem.Is(err, problem.NotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("authorize: read project: %w", err)
	}
	return proj.Public, nil
}

func (s *Service) authorizeProject(ctx context.Context, p *Principal, user *store.User, proj *store.Project, a Action) error {
	have := levelNone
	if user != nil {
		global, project, _, err := s.st.EffectiveGrants(ctx, user.ID, proj.ID, 0)
		if err != nil {
			return fmt.Errorf("authorize: read grants: %w", err)
		}
		if isGlobalAdmin(global) {
			have = levelAdmin
		} else {
			have = projectLevel(project)
		}
	}
	if have < levelRead && proj.Public {
		have = levelRead
	}
	return decide(p, user, have, a, msgProjectNotFound, "project")
}

func (s *Service) authorizeGlobal(ctx context.Context, p *Principal, user *store.User, a Action) error {
	if user == nil {
		return problem.New(problem.Unauthenticated, msgAuthRequired)
	}
	have := levelRead // any signed-in user
	if a > Read {
		global, _, _, err := s.st.EffectiveGrants(ctx, user.ID, 0, 0)
		if err != nil {
			return fmt.Errorf("authorize: read grants: %w", err)
		}
		switch {
		case isGlobalAdmin(global):
			have = levelAdmin
		case has(global, store.PermProjectCreate):
			have = levelWrite
		}
	}
	if have < level(a) {
		if a == Write {
			return problem.New(problem.Forbidden, "you do not have permission to create projects")
		}
		return problem.New(problem.Forbidden, "you do not have %s permission", a)
	}
	return checkScope(p, a)
}

// decide turns the level a caller holds on a repository or project into
// the outcome for action a.
func decide(p *Principal, user *store.User, have level, a Action, notFound, noun string) error {
	if have >= level(a) {
		return checkScope(p, a)
	}
	if user == nil {
		// Signing in might help, so ask for it (git then prompts).
		return problem.New(problem.Unauthenticated, msgAuthRequired)
	}
	if have < levelRead {
		return problem.New(problem.NotFound, "%s", notFound)
	}
	return problem.New(problem.Forbidden, "you do not have %s permission on this %s", a, noun)
}

// checkScope applies the token scope cap, after the user's own permission
// has been established: a read token of a user who may not write gets the
// message about the permission, which is the one that tells the truth.
func checkScope(p *Principal, a Action) error {
	if scopeLevel(p) >= level(a) {
		return nil
	}
	what := "access token"
	if p.isAccessKey() {
		what = "access key"
	}
	if scopeLevel(p) == levelNone {
		return problem.New(problem.Forbidden, "this %s has no valid scope", what)
	}
	return problem.New(problem.Forbidden, "this %s only has %s scope", what, p.Scope)
}

// authorizeAccessKey decides for an SSH access key: it reaches exactly one
// repository, within its scope, and is not anyone on any other resource
// (not even for public ones: a deploy key is not an account).
func authorizeAccessKey(p *Principal, res Resource, a Action) error {
	switch {
	case res.Repo != nil && res.Repo.ID == p.AccessKeyRepoID:
		return checkScope(p, a)
	case res.Repo != nil:
		return problem.New(problem.NotFound, msgRepoNotFound)
	case res.Project != nil:
		return problem.New(problem.NotFound, msgProjectNotFound)
	default:
		return problem.New(problem.Forbidden, "an access key cannot do this")
	}
}

// scopeLevel is the most a principal's scope allows. Anonymous callers and
// full sessions are capped by their permissions alone; an unknown scope
// (a damaged row) allows nothing.
func scopeLevel(p *Principal) level {
	if p.IsAnonymous() {
		return levelAdmin
	}
	if p.Scope == "" {
		if p.isAccessKey() {
			// Access keys always have a scope; a missing one reads only.
			return levelRead
		}
		return levelAdmin
	}
	switch p.Scope {
	case store.ScopeRead:
		return levelRead
	case store.ScopeWrite:
		return levelWrite
	case store.ScopeAdmin:
		return levelAdmin
	default:
		return levelNone
	}
}

func isGlobalAdmin(global []store.Permission) bool {
	return has(global, store.PermAdmin) || has(global, store.PermSysAdmin)
}

func projectLevel(perms []store.Permission) level {
	l := levelNone
	for _, perm := range perms {
		switch perm {
		case store.PermProjectRead:
			l = max(l, levelRead)
		case store.PermProjectWrite:
			l = max(l, levelWrite)
		case store.PermProjectAdmin:
			l = max(l, levelAdmin)
		}
	}
	return l
}

func repoLevel(perms []store.Permission) level {
	l := levelNone
	for _, perm := range perms {
		switch perm {
		case store.PermRepoRead:
			l = max(l, levelRead)
		case store.PermRepoWrite:
			l = max(l, levelWrite)
		case store.PermRepoAdmin:
			l = max(l, levelAdmin)
		}
	}
	return l
}

func has(perms []store.Permission, want store.Permission) bool {
	for _, perm := range perms {
		if perm == want {
			return true
		}
	}
	return false
}

// IsAdmin reports whether p may administer the server right now (global
// ADMIN or SYS_ADMIN, an active account, and a token scope of admin if any).
func (s *Service) IsAdmin(ctx context.Context, p *Principal) bool {
	return s.allowed(ctx, p, Resource{}, Admin)
}

// CanCreateProject reports whether p may create projects.
func (s *Service) CanCreateProject(ctx context.Context, p *Principal) bool {
	return s.allowed(ctx, p, Resource{}, Write)
}

// Visible reports whether p may see repo, for filtering listings.
func (s *Service) Visible(ctx context.Context, p *Principal, repo *store.Repository) bool {
	return s.allowed(ctx, p, Resource{Repo: repo}, Read)
}

// allowed is Authorize for yes/no questions: a store failure answers no,
// and is logged since the caller has no error to pass on.
func (s *Service) allowed(ctx context.Context, p *Principal, res Resource, a Action) bool {
	err := s.Authorize(ctx, p, res, a)
	if err != nil && !isDenial(err) {
		s.logger.Warn("authorize failed", "principal", p.String(), "action", a.String(), "err", err)
	}
	return err == nil
}

// isDenial reports whether err is an answer ("no") rather than a failure.
func isDenial(err error) bool {
	switch problem.KindOf(err) {
	case problem.Unauthenticated, problem.Forbidden, problem.NotFound, problem.Invalid:
		return true
	}
	return false
}
