package web

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/packcache"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// Administration: users and groups, global permissions, and the state of
// the node's services. A service the node runs without (no cluster, no
// cache, …) shows as "not enabled".

type systemData struct {
	Nodes      []nodeRow
	NodesErr   string
	Cluster    bool
	Cache      *packcache.Stats
	HitRate    string
	Evictions  []kv
	Throttle   *throttle.State
	Jobs       []jobs.KindStats
	JobsOn     bool
	JobsErr    string
	Window     time.Duration
	Repos      []store.Repository
	RepoFilter string
}

// nodeRow is a cluster node as the admin page lists it. Load is known for
// the node serving the page only (the registry stores no load): git
// operations holding a ticket out of the limit, and the CPU the adaptive
// controller last sampled.
type nodeRow struct {
	store.Node
	Self    bool
	HasLoad bool
	InUse   int
	Limit   int
	Queued  int
	CPU     string // "" when the strategy samples none
}

type kv struct {
	Key   string
	Value int64
}

func (c *call) adminSystem() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	var d systemData
	if c.s.Cluster != nil {
		d.Cluster = true
		nodes, err := c.s.Cluster.Nodes(c.ctx)
		if err != nil {
			d.NodesErr = problem.Message(err)
		}
		self := c.s.Cluster.Self()
		for _, n := range nodes {
			row := nodeRow{Node: n, Self: n.ID == self && self != ""}
			if row.Self && c.s.Throttle != nil {
				st := c.s.Throttle.State()
				row.HasLoad, row.InUse, row.Limit, row.Queued = true, st.InUse, st.Limit, st.Queued
				if st.Controller != nil && st.Controller.Error == "" {
					// CPU is the utilisation of the node's cores, 0 to 1.
					row.CPU = strconv.FormatFloat(100*st.Controller.CPU, 'f', 0, 64) + " % of " + strconv.FormatFloat(st.Controller.Cores, 'f', 1, 64) + " cores"
				}
			}
			d.Nodes = append(d.Nodes, row)
		}
	}
	if c.s.Cache != nil {
		st := c.s.Cache.Stats()
		d.Cache = &st
		for k, v := range st.Evictions {
			d.Evictions = append(d.Evictions, kv{k, v})
		}
		sort.Slice(d.Evictions, func(i, j int) bool { return d.Evictions[i].Key < d.Evictions[j].Key })
		// Bounded: a name filter and one page, for the "clear" buttons.
		d.RepoFilter = strings.TrimSpace(c.query("repo"))
		if d.RepoFilter != "" {
			repos, err := c.s.Store.ListAllRepos(c.ctx, d.RepoFilter, store.Page{Limit: pageSize})
			if err != nil {
				return err
			}
			d.Repos = repos
		}
	}
	if c.s.Throttle != nil {
		st := c.s.Throttle.State()
		d.Throttle = &st
	}
	if c.s.Jobs != nil {
		d.JobsOn, d.Window = true, jobs.StatsWindow
		list, err := c.s.Jobs.Stats(c.ctx)
		if err != nil {
			c.s.logger.Warn("job statistics", "err", err)
			d.JobsErr = "The job statistics could not be read; see the server log."
		}
		d.Jobs = list
	}
	return c.ok("admin", "Administration", d)
}

func (c *call) adminClearCache() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	if c.s.Cache == nil {
		return problem.New(problem.Invalid, "the SCM cache is not enabled")
	}
	id, err := strconv.ParseInt(c.form("repo_id"), 10, 64)
	if err != nil || id <= 0 {
		return problem.New(problem.Invalid, "choose a repository")
	}
	r, err := c.s.Store.RepoByID(c.ctx, id)
	if err != nil {
		return err
	}
	n, size := c.s.Cache.ClearRepo(r.ID)
	c.s.logger.Info("scm cache cleared", "repo_id", r.ID, "entries", n, "bytes", size, "user", c.user.Name)
	return c.flash("/admin", "cleared")
}

type usersData struct {
	Query string
	Users []store.User
	Pager pager
}

func (c *call) adminUsers() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	q := strings.TrimSpace(c.query("q"))
	start := c.start()
	users, err := c.s.Store.ListUsers(c.ctx, q, store.Page{Start: start, Limit: pageSize + 1})
	if err != nil {
		return err
	}
	more := len(users) > pageSize
	if more {
		users = users[:pageSize]
	}
	base := "/admin/users"
	if q != "" {
		base += "?q=" + url.QueryEscape(q)
	}
	return c.ok("admin_users", "Users", usersData{Query: q, Users: users, Pager: newPager(base, start, pageSize, more)})
}

func (c *call) adminCreateUser() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	_, err := c.s.Accounts.CreateUser(c.ctx, c.actor(), accounts.NewUser{
		Name: c.form("name"), DisplayName: c.form("display"), Email: c.form("email"), Password: c.r.PostFormValue("password"),
	})
	if err != nil {
		return err
	}
	return c.flash("/admin/users", "saved")
}

func (c *call) adminSetActive() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	id, err := c.pathID()
	if err != nil {
		return err
	}
	u, err := c.s.Store.UserByID(c.ctx, id)
	if err != nil {
		return err
	}
	active := c.form("active") == "true"
	if u, err = c.s.Accounts.UpdateUser(c.ctx, c.actor(), u, accounts.UserChange{Active: &active}); err != nil {
		return err
	}
	if !u.Active {
		if err := c.s.Sessions.DeleteUserSessions(c.ctx, u.ID, nil); err != nil {
			return err
		}
	}
	return c.flash("/admin/users", "saved")
}

type groupsData struct {
	Groups []store.Group
	Pager  pager
}

func (c *call) adminGroups() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	start := c.start()
	groups, err := c.s.Store.ListGroups(c.ctx, "", store.Page{Start: start, Limit: pageSize + 1})
	if err != nil {
		return err
	}
	more := len(groups) > pageSize
	if more {
		groups = groups[:pageSize]
	}
	return c.ok("admin_groups", "Groups", groupsData{Groups: groups, Pager: newPager("/admin/groups", start, pageSize, more)})
}

func (c *call) adminCreateGroup() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	g, err := c.s.Accounts.CreateGroup(c.ctx, c.actor(), c.form("name"))
	if err != nil {
		return err
	}
	return c.redirect("/admin/groups/" + url.PathEscape(g.Name))
}

type groupData struct {
	Group   *store.Group
	Members []store.User
}

func (c *call) groupFromPath() (*store.Group, error) {
	g, err := c.s.Store.GroupByName(c.ctx, c.r.PathValue("name"))
	if err != nil {
		return nil, hide(err)
	}
	return g, nil
}

func (c *call) adminGroup() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	g, err := c.groupFromPath()
	if err != nil {
		return err
	}
	members, err := c.s.Store.GroupMembers(c.ctx, g.ID)
	if err != nil {
		return err
	}
	return c.ok("admin_group", "Group "+g.Name, groupData{Group: g, Members: members})
}

func (c *call) adminAddMember() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	g, err := c.groupFromPath()
	if err != nil {
		return err
	}
	if err := c.s.Accounts.AddMembers(c.ctx, c.actor(), g, []string{c.form("user")}); err != nil {
		return err
	}
	return c.flash("/admin/groups/"+url.PathEscape(g.Name), "saved")
}

func (c *call) adminRemoveMember() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	g, err := c.groupFromPath()
	if err != nil {
		return err
	}
	uid, _ := strconv.ParseInt(c.form("user_id"), 10, 64)
	u, err := c.s.Store.UserByID(c.ctx, uid)
	if err != nil {
		return err
	}
	if err := c.s.Accounts.RemoveMembers(c.ctx, c.actor(), g, []string{u.Name}); err != nil {
		return err
	}
	return c.flash("/admin/groups/"+url.PathEscape(g.Name), "saved")
}

func (c *call) adminDeleteGroup() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	g, err := c.groupFromPath()
	if err != nil {
		return err
	}
	if err := c.s.Accounts.DeleteGroup(c.ctx, c.actor(), g); err != nil {
		return err
	}
	return c.flash("/admin/groups", "deleted")
}

type permsData struct {
	Grants []store.Grant
	Perms  []store.Permission
}

func (c *call) adminPermissions() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	grants, err := c.s.Store.GlobalGrants(c.ctx)
	if err != nil {
		return err
	}
	return c.ok("admin_perms", "Global permissions", permsData{Grants: grants, Perms: accounts.GlobalPermissions})
}

func (c *call) adminSetPermission() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	g, err := c.grantee()
	if err != nil {
		return err
	}
	if err := c.s.Accounts.Grant(c.ctx, c.actor(), accounts.Target{}, []store.Grant{g}, store.Permission(c.form("permission"))); err != nil {
		return err
	}
	return c.flash("/admin/permissions", "saved")
}

func (c *call) adminRevokePermission() error {
	if err := c.requireAdmin(); err != nil {
		return err
	}
	uid, gid := formIDs(c)
	if err := c.s.Accounts.Revoke(c.ctx, c.actor(), accounts.Target{}, []store.Grant{{UserID: uid, GroupID: gid}}); err != nil {
		return err
	}
	return c.flash("/admin/permissions", "saved")
}

func itoa(n int) string { return strconv.Itoa(n) }
