package accounts

import (
	"context"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// maxMembers bounds one membership change; the UI adds a handful at a
// time, scripts can loop.
const maxMembers = 1000

// CreateGroup creates a group; administrators only.
func (s *Service) CreateGroup(ctx context.Context, a Actor, name string) (*store.Group, error) {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return nil, err
	}
	g := &store.Group{Name: name}
	if err := store.ValidateGroupName(name); err != nil {
		return nil, err
	}
	if err := s.st.CreateGroup(ctx, g); err != nil {
		return nil, err
	}
	s.logger.Info("group created", "group", g.Name, "actor", a.String())
	return g, nil
}

// DeleteGroup deletes g with its memberships and grants; administrators
// only.
func (s *Service) DeleteGroup(ctx context.Context, a Actor, g *store.Group) error {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return err
	}
	if err := s.st.DeleteGroup(ctx, g.ID); err != nil {
		return err
	}
	s.logger.Info("group deleted", "group", g.Name, "actor", a.String())
	return nil
}

// AddMembers adds the named users to g; RemoveMembers takes them out.
// Every name is resolved first, so a typo in the list changes nothing;
// adding a member twice is not an error, removing a non-member is
// NotFound ("group member not found").
func (s *Service) AddMembers(ctx context.Context, a Actor, g *store.Group, users []string) error {
	return s.changeMembers(ctx, a, g, users, true)
}

// RemoveMembers takes the named users out of g; see AddMembers.
func (s *Service) RemoveMembers(ctx context.Context, a Actor, g *store.Group, users []string) error {
	return s.changeMembers(ctx, a, g, users, false)
}

func (s *Service) changeMembers(ctx context.Context, a Actor, g *store.Group, users []string, add bool) error {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return err
	}
	if len(users) == 0 {
		return problem.New(problem.Invalid, "name at least one user")
	}
	if len(users) > maxMembers {
		return problem.New(problem.Invalid, "at most %d users per request", maxMembers)
	}
	ids := make([]int64, 0, len(users))
	for _, name := range users {
		u, err := s.userNamed(ctx, name)
		if err != nil {
			return err
		}
		ids = append(ids, u.ID)
	}
	for _, id := range ids {
		var err error
		if add {
			err = s.st.AddGroupMember(ctx, g.ID, id)
		} else {
			err = s.st.RemoveGroupMember(ctx, g.ID, id)
		}
		if err != nil && !problem.Is(err, problem.Conflict) {
			return err
		}
	}
	s.logger.Info("group membership changed", "group", g.Name, "added", add, "users", len(ids), "actor", a.String())
	return nil
}

// userNamed reads a user by name with a message naming it.
func (s *Service) userNamed(ctx context.Context, name string) (*store.User, error) {
	u, err := s.st.UserByName(ctx, name)
	if problem.Is(err, problem.NotFound) {
		return nil, problem.New(problem.NotFound, "user %s not found", quoteShort(name))
	}
	return u, err
}

// groupNamed reads a group by name with a message naming it.
func (s *Service) groupNamed(ctx context.Context, name string) (*store.Group, error) {
	g, err := s.st.GroupByName(ctx, name)
	if problem.Is(err, problem.NotFound) {
		return nil, problem.New(problem.NotFound, "group %s not found", quoteShort(name))
	}
	return g, err
}
