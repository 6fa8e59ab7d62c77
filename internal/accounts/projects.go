package accounts

import (
	"context"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// NewProject is a project to create. Name "" takes the key.
type NewProject struct {
	Key, Name, Description string
	Public                 bool
}

// CreateProject creates a project; callers need PROJECT_CREATE. As in
// Bitbucket, whoever creates a project administers it: without that grant
// a PROJECT_CREATE user could create a project and then not even add a
// repository to it. Administrators and the System need no grant.
func (s *Service) CreateProject(ctx context.Context, a Actor, in NewProject) (*store.Project, error) {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Write); err != nil {
		return nil, err
	}
	if err := store.ValidateProjectKey(in.Key); err != nil {
		return nil, err
	}
	if _, personal := store.IsPersonalKey(in.Key); personal {
		return nil, errPersonalByHand
	}
	p := &store.Project{Key: strings.ToUpper(in.Key), Name: in.Name, Description: in.Description, Public: in.Public}
	if strings.TrimSpace(p.Name) == "" {
		p.Name = p.Key
	}
	if err := checkProjectText(p.Name, p.Description); err != nil {
		return nil, err
	}
	if err := s.st.CreateProject(ctx, p); err != nil {
		return nil, err
	}
	if uid := a.userID(); uid != 0 && !s.isAdmin(ctx, a) {
		if err := s.st.SetProjectPermission(ctx, p.ID, store.Grant{UserID: uid, Permission: store.PermProjectAdmin}); err != nil {
			return nil, err
		}
	}
	s.logger.Info("project created", "project", p.Key, "actor", a.String())
	return p, nil
}

var errPersonalByHand = problem.New(problem.Invalid, "a project key beginning with '~' is a user's personal project; it is not created or renamed by hand")

// PersonalProject returns the personal project of the user called name
// (case-insensitively), key "~" and the login in upper case, creating it
// on first use: named after the user's display name, private, with the
// user as its administrator. A name that is no user, or whose login
// cannot make a key (it holds '@' or '+'), is NotFound. Reading or
// creating it needs no permission: it exists, as in Bitbucket, for every
// user; what it holds is guarded by the usual checks.
func (s *Service) PersonalProject(ctx context.Context, name string) (*store.Project, error) {
	if store.ValidateProjectKey("~"+name) != nil {
		return nil, problem.New(problem.NotFound, "project not found")
	}
	u, err := s.st.UserByName(ctx, name)
	if err != nil {
		return nil, err
	}
	key := "~" + strings.ToUpper(u.Name)
	if store.ValidateProjectKey(key) != nil {
		return nil, problem.New(problem.NotFound, "project not found")
	}
	if p, err := s.st.ProjectByKey(ctx, key); !problem.Is(err, problem.NotFound) {
		return p, err
	}
	display := u.DisplayName
	if strings.TrimSpace(display) == "" || checkProjectText(display, "") != nil {
		display = u.Name
	}
	p := &store.Project{Key: key, Name: display}
	if err := s.st.CreateProject(ctx, p); problem.Is(err, problem.Conflict) {
		// Created meanwhile by a concurrent first use.
		return s.st.ProjectByKey(ctx, key)
	} else if err != nil {
		return nil, err
	}
	if err := s.st.SetProjectPermission(ctx, p.ID, store.Grant{UserID: u.ID, Permission: store.PermProjectAdmin}); err != nil {
		return nil, err
	}
	s.logger.Info("personal project created", "project", p.Key, "user", u.Name)
	return p, nil
}

func checkProjectText(name, description string) error {
	if strings.TrimSpace(name) == "" {
		return problem.New(problem.Invalid, "project name must not be empty")
	}
	if err := checkText("project name", name, maxNameText); err != nil {
		return err
	}
	return checkText("project description", description, maxDescriptionText)
}

// ProjectChange is a change to a project; nil fields stay as they are.
type ProjectChange struct {
	Key, Name, Description *string
	Public                 *bool
}

// UpdateProject changes p; PROJECT_ADMIN on it.
func (s *Service) UpdateProject(ctx context.Context, a Actor, p *store.Project, ch ProjectChange) (*store.Project, error) {
	if err := s.authorize(ctx, a, auth.Resource{Project: p}, auth.Admin); err != nil {
		return nil, err
	}
	next := *p
	if ch.Key != nil && !strings.EqualFold(*ch.Key, p.Key) {
		if err := store.ValidateProjectKey(*ch.Key); err != nil {
			return nil, err
		}
		_, to := store.IsPersonalKey(*ch.Key)
		_, from := store.IsPersonalKey(p.Key)
		if to || from {
			return nil, errPersonalByHand
		}
		next.Key = strings.ToUpper(*ch.Key)
	}
	if ch.Name != nil {
		next.Name = *ch.Name
	}
	if ch.Description != nil {
		next.Description = *ch.Description
	}
	if ch.Public != nil {
		next.Public = *ch.Public
	}
	if err := checkProjectText(next.Name, next.Description); err != nil {
		return nil, err
	}
	if err := s.st.UpdateProject(ctx, &next); err != nil {
		return nil, err
	}
	s.logger.Info("project updated", "project", next.Key, "actor", a.String())
	return &next, nil
}

// DeleteProject deletes an empty project; PROJECT_ADMIN on it. As in
// Bitbucket a project still holding repositories is refused: deleting them
// is a separate, deliberate act per repository.
func (s *Service) DeleteProject(ctx context.Context, a Actor, p *store.Project) error {
	if err := s.authorize(ctx, a, auth.Resource{Project: p}, auth.Admin); err != nil {
		return err
	}
	repos, err := s.st.ListRepos(ctx, p.ID, store.Page{Limit: 1})
	if err != nil {
		return err
	}
	if len(repos) > 0 {
		return problem.New(problem.Conflict, "project %q still has repositories; delete them first", p.Key)
	}
	if err := s.st.DeleteProject(ctx, p.ID); err != nil {
		return err
	}
	s.logger.Info("project deleted", "project", p.Key, "actor", a.String())
	return nil
}
