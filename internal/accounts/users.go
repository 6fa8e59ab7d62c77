package accounts

import (
	"context"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// NewUser is a user to create. Password "" leaves the account without a
// password login (SSH keys and tokens still work once added).
type NewUser struct {
	Name, DisplayName, Email, Password string
	// SysAdmin grants the global SYS_ADMIN permission with the account.
	SysAdmin bool
}

// CreateUser creates an active user; administrators only, and SysAdmin
// only for a system administrator.
func (s *Service) CreateUser(ctx context.Context, a Actor, in NewUser) (*store.User, error) {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return nil, err
	}
	if in.SysAdmin {
		sys, err := s.isSysAdmin(ctx, a)
		if err != nil {
			return nil, err
		}
		if !sys {
			return nil, problem.New(problem.Forbidden, "only a system administrator can grant SYS_ADMIN")
		}
	}
	if err := store.ValidateUserName(in.Name); err != nil {
		return nil, err
	}
	u := &store.User{Name: in.Name, DisplayName: in.DisplayName, Email: in.Email, Active: true}
	if strings.TrimSpace(u.DisplayName) == "" {
		u.DisplayName = u.Name
	}
	if err := checkText("display name", u.DisplayName, maxNameText); err != nil {
		return nil, err
	}
	if err := checkEmail(u.Email); err != nil {
		return nil, err
	}
	if in.Password != "" {
		hash, err := auth.HashPassword(in.Password)
		if err != nil {
			return nil, err
		}
		u.PasswordHash = hash
	}
	if err := s.st.CreateUser(ctx, u); err != nil {
		return nil, err
	}
	if in.SysAdmin {
		if err := s.st.SetGlobalPermission(ctx, store.Grant{UserID: u.ID, Permission: store.PermSysAdmin}); err != nil {
			return nil, err
		}
	}
	s.logger.Info("user created", "user", u.Name, "sys_admin", in.SysAdmin, "actor", a.String())
	return u, nil
}

// UserChange is a change to a user; nil fields stay as they are.
type UserChange struct {
	DisplayName *string
	Email       *string
	Active      *bool
}

// UpdateUser changes u's display name, e-mail address or activation;
// administrators only, and nobody deactivates themselves (an administrator
// doing so by mistake may leave nobody to undo it).
func (s *Service) UpdateUser(ctx context.Context, a Actor, u *store.User, ch UserChange) (*store.User, error) {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return nil, err
	}
	next := *u
	if ch.DisplayName != nil {
		if strings.TrimSpace(*ch.DisplayName) == "" {
			return nil, problem.New(problem.Invalid, "display name must not be empty")
		}
		if err := checkText("display name", *ch.DisplayName, maxNameText); err != nil {
			return nil, err
		}
		next.DisplayName = *ch.DisplayName
	}
	if ch.Email != nil {
		if err := checkEmail(*ch.Email); err != nil {
			return nil, err
		}
		next.Email = *ch.Email
	}
	if ch.Active != nil {
		if !*ch.Active && u.ID == a.userID() {
			return nil, problem.New(problem.Invalid, "you cannot deactivate yourself")
		}
		next.Active = *ch.Active
	}
	if err := s.st.UpdateUser(ctx, &next); err != nil {
		return nil, err
	}
	s.logger.Info("user updated", "user", next.Name, "active", next.Active, "actor", a.String())
	return &next, nil
}

// SetPassword sets u's password; administrators only. confirm must repeat
// password, so a typo does not lock the user out.
func (s *Service) SetPassword(ctx context.Context, a Actor, u *store.User, password, confirm string) error {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return err
	}
	return s.setPassword(ctx, a, u, password, confirm)
}

// ChangePassword is a signed-in user changing their own password, which
// needs the current one: a session left open on a shared machine must not
// be enough to take the account over.
func (s *Service) ChangePassword(ctx context.Context, a Actor, current, password, confirm string) error {
	if err := s.signedIn(ctx, a); err != nil {
		return err
	}
	if a.IsSystem() {
		return problem.New(problem.Invalid, "the system has no password; set a user's with SetPassword")
	}
	if a.viaToken() {
		return problem.New(problem.Forbidden, "access tokens cannot change passwords; sign in with your password")
	}
	u, err := s.st.UserByID(ctx, a.userID())
	if err != nil {
		return err
	}
	if _, err := s.auth.Password(ctx, u.Name, current); err != nil {
		if problem.Is(err, problem.Unauthenticated) {
			return problem.New(problem.Invalid, "the current password is not right")
		}
		return err
	}
	return s.setPassword(ctx, a, u, password, confirm)
}

func (s *Service) setPassword(ctx context.Context, a Actor, u *store.User, password, confirm string) error {
	if password != confirm {
		return problem.New(problem.Invalid, "the password and its confirmation differ")
	}
	hash, err := auth.HashPassword(password)
	if err != nil {
		return err
	}
	next := *u
	next.PasswordHash = hash
	if err := s.st.UpdateUser(ctx, &next); err != nil {
		return err
	}
	u.PasswordHash = hash
	s.logger.Info("password set", "user", u.Name, "actor", a.String())
	return nil
}

// DeleteUser deletes u; administrators only, never themselves (Bitbucket
// refuses it too: it may leave nobody able to administer the server).
func (s *Service) DeleteUser(ctx context.Context, a Actor, u *store.User) error {
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Admin); err != nil {
		return err
	}
	if u.ID == a.userID() {
		return problem.New(problem.Invalid, "you cannot delete yourself")
	}
	if err := s.st.DeleteUser(ctx, u.ID); err != nil {
		return err
	}
	s.logger.Info("user deleted", "user", u.Name, "actor", a.String())
	return nil
}

// BootstrapAdmin creates the first administrator, "admin" with SYS_ADMIN,
// when the server has no user at all, and reports whether it did. A node
// that loses the race to another starting at the same moment creates
// nothing and reports false.
func (s *Service) BootstrapAdmin(ctx context.Context, password string) (bool, error) {
	n, err := s.st.CountUsers(ctx)
	if err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	_, err = s.CreateUser(ctx, System("bootstrap"), NewUser{Name: "admin", DisplayName: "Administrator", Password: password, SysAdmin: true})
	if problem.Is(err, problem.Conflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}
