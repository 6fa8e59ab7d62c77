package api

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Bitbucket caps display names and e-mail addresses at 255 characters.
const maxUserText = 255

func (c *call) listUsers() error {
	if err := c.global(auth.Read); err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	users, err := c.s.Store.ListUsers(c.ctx, c.query("filter"), probe(pg))
	if err != nil {
		return err
	}
	return c.json(mapPage(newPage(users, pg), func(u store.User) userJSON { return c.s.userJSON(&u) }))
}

func (c *call) getUser() error {
	if err := c.global(auth.Read); err != nil {
		return err
	}
	u, err := c.s.Store.UserByName(c.ctx, c.path("userSlug"))
	if err != nil {
		return err
	}
	return c.json(c.s.userJSON(u))
}

// userByQuery reads the user the "name" query parameter names.
func (c *call) userByQuery(param string) (*store.User, error) {
	name := c.query(param)
	if name == "" {
		return nil, problem.New(problem.Invalid, "query parameter %s is required", param)
	}
	return c.s.Store.UserByName(c.ctx, name)
}

// createUser is Bitbucket's POST /admin/users, which takes its input as
// query parameters.
func (c *call) createUser() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	u := store.User{
		Name:        c.query("name"),
		DisplayName: c.query("displayName"),
		Email:       c.query("emailAddress"),
		Active:      true,
	}
	if err := store.ValidateUserName(u.Name); err != nil {
		return err
	}
	if u.DisplayName == "" {
		u.DisplayName = u.Name
	}
	if err := checkText("displayName", u.DisplayName, maxUserText); err != nil {
		return err
	}
	if err := checkEmail(u.Email); err != nil {
		return err
	}
	if pw := c.query("password"); pw != "" {
		hash, err := auth.HashPassword(pw)
		if err != nil {
			return err
		}
		u.PasswordHash = hash
	}
	if err := c.s.Store.CreateUser(c.ctx, &u); err != nil {
		return err
	}
	c.s.logger.Info("user created", "user", u.Name, "principal", c.p.String())
	return c.noContent()
}

func checkEmail(e string) error {
	if e == "" {
		return nil
	}
	if err := checkText("emailAddress", e, maxUserText); err != nil {
		return err
	}
	local, domain, ok := strings.Cut(e, "@")
	if !ok || local == "" || domain == "" || strings.ContainsAny(e, " <>") {
		return problem.New(problem.Invalid, "emailAddress %s is not an e-mail address", quoteShort(e))
	}
	return nil
}

type userUpdateBody struct {
	Name        string  `json:"name"`
	DisplayName *string `json:"displayName"`
	Email       *string `json:"email"`
	// EmailAddress is accepted too: the user document calls it that.
	EmailAddress *string `json:"emailAddress"`
	Active       *bool   `json:"active"`
}

// updateUser is Bitbucket's PUT /admin/users: display name and e-mail of
// the user named in the body.
func (c *call) updateUser() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	var b userUpdateBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	if b.Name == "" {
		return problem.New(problem.Invalid, "name is required")
	}
	u, err := c.s.Store.UserByName(c.ctx, b.Name)
	if err != nil {
		return err
	}
	if b.DisplayName != nil {
		if strings.TrimSpace(*b.DisplayName) == "" {
			return problem.New(problem.Invalid, "displayName must not be empty")
		}
		if err := checkText("displayName", *b.DisplayName, maxUserText); err != nil {
			return err
		}
		u.DisplayName = *b.DisplayName
	}
	email := b.Email
	if email == nil {
		email = b.EmailAddress
	}
	if email != nil {
		if err := checkEmail(*email); err != nil {
			return err
		}
		u.Email = *email
	}
	if b.Active != nil {
		if !*b.Active && u.ID == c.p.UserID {
			return problem.New(problem.Invalid, "you cannot deactivate yourself")
		}
		u.Active = *b.Active
	}
	if err := c.s.Store.UpdateUser(c.ctx, u); err != nil {
		return err
	}
	return c.json(c.s.userJSON(u))
}

type credentialsBody struct {
	Name            string `json:"name"`
	Password        string `json:"password"`
	PasswordConfirm string `json:"passwordConfirm"`
}

// setPassword is Bitbucket's PUT /admin/users/credentials.
func (c *call) setPassword() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	var b credentialsBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	if b.Name == "" {
		return problem.New(problem.Invalid, "name is required")
	}
	if b.Password != b.PasswordConfirm {
		return problem.New(problem.Invalid, "password and passwordConfirm differ")
	}
	u, err := c.s.Store.UserByName(c.ctx, b.Name)
	if err != nil {
		return err
	}
	hash, err := auth.HashPassword(b.Password)
	if err != nil {
		return err
	}
	u.PasswordHash = hash
	if err := c.s.Store.UpdateUser(c.ctx, u); err != nil {
		return err
	}
	c.s.logger.Info("password set", "user", u.Name, "principal", c.p.String())
	return c.noContent()
}

func (c *call) deleteUser() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	u, err := c.userByQuery("name")
	if err != nil {
		return err
	}
	if u.ID == c.p.UserID {
		// An administrator deleting themselves may leave nobody able to
		// administer the server; Bitbucket refuses it too.
		return problem.New(problem.Invalid, "you cannot delete yourself")
	}
	if err := c.s.Store.DeleteUser(c.ctx, u.ID); err != nil {
		return err
	}
	c.s.logger.Info("user deleted", "user", u.Name, "principal", c.p.String())
	return c.json(c.s.userJSON(u))
}

func (c *call) listGroups() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	groups, err := c.s.Store.ListGroups(c.ctx, c.query("filter"), probe(pg))
	if err != nil {
		return err
	}
	return c.json(mapPage(newPage(groups, pg), func(g store.Group) groupJSON {
		return groupJSON{Name: g.Name, Deletable: true}
	}))
}

// createGroup is Bitbucket's POST /admin/groups?name=G.
func (c *call) createGroup() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	g := store.Group{Name: c.query("name")}
	if err := store.ValidateGroupName(g.Name); err != nil {
		return err
	}
	if err := c.s.Store.CreateGroup(c.ctx, &g); err != nil {
		return err
	}
	c.s.logger.Info("group created", "group", g.Name, "principal", c.p.String())
	return c.json(groupJSON{Name: g.Name, Deletable: true})
}

func (c *call) deleteGroup() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	name := c.query("name")
	if name == "" {
		return problem.New(problem.Invalid, "query parameter name is required")
	}
	g, err := c.s.Store.GroupByName(c.ctx, name)
	if err != nil {
		return err
	}
	if err := c.s.Store.DeleteGroup(c.ctx, g.ID); err != nil {
		return err
	}
	c.s.logger.Info("group deleted", "group", g.Name, "principal", c.p.String())
	return c.json(groupJSON{Name: g.Name, Deletable: true})
}

// membershipBody accepts both of Bitbucket's shapes: {group, users} (the
// add-users style) and {context, itemName} (the older add-user style).
type membershipBody struct {
	Group    string   `json:"group"`
	Users    []string `json:"users"`
	Context  string   `json:"context"`
	ItemName string   `json:"itemName"`
}

// maxMembershipUsers bounds one membership request; Bitbucket's UI adds a
// handful at a time, scripts can loop.
const maxMembershipUsers = 1000

func (c *call) changeMembers(add bool) error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	var b membershipBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	groupName, users := b.Group, b.Users
	if groupName == "" {
		groupName = b.Context
	}
	if b.ItemName != "" {
		users = append(users, b.ItemName)
	}
	if groupName == "" {
		return problem.New(problem.Invalid, "group is required")
	}
	if len(users) == 0 {
		return problem.New(problem.Invalid, "users is required")
	}
	if len(users) > maxMembershipUsers {
		return problem.New(problem.Invalid, "at most %d users per request", maxMembershipUsers)
	}
	g, err := c.s.Store.GroupByName(c.ctx, groupName)
	if err != nil {
		return err
	}
	// Resolve every name first, so a typo in the list changes nothing.
	ids := make([]int64, 0, len(users))
	for _, name := range users {
		u, err := c.s.Store.UserByName(c.ctx, name)
		if err != nil {
			if problem.Is(err, problem.NotFound) {
				return problem.New(problem.NotFound, "user %s not found", quoteShort(name))
			}
			return err
		}
		ids = append(ids, u.ID)
	}
	for _, id := range ids {
		if add {
			err = c.s.Store.AddGroupMember(c.ctx, g.ID, id)
		} else {
			err = c.s.Store.RemoveGroupMember(c.ctx, g.ID, id)
		}
		if err != nil && !problem.Is(err, problem.Conflict) {
			return err
		}
	}
	c.s.logger.Info("group membership changed", "group", g.Name, "added", add, "users", len(ids), "principal", c.p.String())
	return c.noContent()
}

func (c *call) addMembers() error    { return c.changeMembers(true) }
func (c *call) removeMembers() error { return c.changeMembers(false) }

// groupMembers is Bitbucket's GET /admin/groups/more-members?context=G.
func (c *call) groupMembers() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	name := c.query("context")
	if name == "" {
		return problem.New(problem.Invalid, "query parameter context is required")
	}
	g, err := c.s.Store.GroupByName(c.ctx, name)
	if err != nil {
		return err
	}
	members, err := c.s.Store.GroupMembers(c.ctx, g.ID)
	if err != nil {
		return err
	}
	if f := strings.ToLower(c.query("filter")); f != "" {
		kept := members[:0]
		for _, u := range members {
			if strings.Contains(strings.ToLower(u.Name), f) || strings.Contains(strings.ToLower(u.DisplayName), f) {
				kept = append(kept, u)
			}
		}
		members = kept
	}
	return c.json(mapPage(slicePage(members, pg), func(u store.User) userJSON { return c.s.userJSON(&u) }))
}
