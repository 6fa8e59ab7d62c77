package api

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

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
	_, err := c.s.Accounts.CreateUser(c.ctx, c.actor(), accounts.NewUser{
		Name:        c.query("name"),
		DisplayName: c.query("displayName"),
		Email:       c.query("emailAddress"),
		Password:    c.query("password"),
	})
	if err != nil {
		return err
	}
	return c.noContent()
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
	email := b.Email
	if email == nil {
		email = b.EmailAddress
	}
	u, err = c.s.Accounts.UpdateUser(c.ctx, c.actor(), u, accounts.UserChange{DisplayName: b.DisplayName, Email: email, Active: b.Active})
	if err != nil {
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
	u, err := c.s.Store.UserByName(c.ctx, b.Name)
	if err != nil {
		return err
	}
	if err := c.s.Accounts.SetPassword(c.ctx, c.actor(), u, b.Password, b.PasswordConfirm); err != nil {
		return err
	}
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
	if err := c.s.Accounts.DeleteUser(c.ctx, c.actor(), u); err != nil {
		return err
	}
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
	g, err := c.s.Accounts.CreateGroup(c.ctx, c.actor(), c.query("name"))
	if err != nil {
		return err
	}
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
	if err := c.s.Accounts.DeleteGroup(c.ctx, c.actor(), g); err != nil {
		return err
	}
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
	g, err := c.s.Store.GroupByName(c.ctx, groupName)
	if err != nil {
		return err
	}
	if add {
		err = c.s.Accounts.AddMembers(c.ctx, c.actor(), g, users)
	} else {
		err = c.s.Accounts.RemoveMembers(c.ctx, c.actor(), g, users)
	}
	if err != nil {
		return err
	}
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
