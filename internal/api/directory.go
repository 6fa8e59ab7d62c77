package api

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/store"
)

// The user and group directory for automation: GET /admin/users, the
// administrators' detailed user list (Bitbucket's DetailedUser), and GET
// /groups, the group names any signed-in user may pick from when granting
// permissions (Bitbucket asks LICENSED_USER there, which is every active
// account here). GET /admin/groups is in users.go.

func (s *server) directoryRoutes() []route {
	filter := q("filter", "only names containing this text")
	return []route{
		{Method: "GET", Pattern: adminBase + "/users", Summary: "List users with their details (ADMIN)", Paged: true,
			Query: []param{filter}, handle: (*call).listUsersDetailed},
		{Method: "GET", Pattern: apiBase + "/groups", Summary: "List group names (any signed-in user)", Paged: true,
			Query: []param{filter}, handle: (*call).listGroupNames},
	}
}

// detailedUserJSON is the user document with what administrators see.
// Sluice keeps every user in its own directory, so every user's details
// and groups may be changed and every user may be deleted.
type detailedUserJSON struct {
	userJSON
	DirectoryName  string `json:"directoryName"`
	Deletable      bool   `json:"deletable"`
	MutableDetails bool   `json:"mutableDetails"`
	MutableGroups  bool   `json:"mutableGroups"`
	// CreatedTimestamp is when the account was created, in milliseconds.
	CreatedTimestamp int64 `json:"createdTimestamp,omitempty"`
}

func (c *call) listUsersDetailed() error {
	if err := c.global(auth.Admin); err != nil {
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
	return c.json(mapPage(newPage(users, pg), func(u store.User) detailedUserJSON {
		out := detailedUserJSON{userJSON: c.s.userJSON(&u), DirectoryName: "Sluice Internal Directory",
			Deletable: true, MutableDetails: true, MutableGroups: true}
		if !u.CreatedAt.IsZero() {
			out.CreatedTimestamp = millis(u.CreatedAt)
		}
		return out
	}))
}

func (c *call) listGroupNames() error {
	if err := c.global(auth.Read); err != nil {
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
	return c.json(mapPage(newPage(groups, pg), func(g store.Group) string { return g.Name }))
}
