package api

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Build statuses, branch permissions, pull request settings and webhooks.

const (
	restrictRepo    = "/rest/branch-permissions/2.0/projects/{key}/repos/{slug}/restrictions"
	restrictProject = "/rest/branch-permissions/2.0/projects/{key}/restrictions"
)

func (s *server) pullAdminRoutes() []route {
	rs := append(append(buildRoutes(), s.reviewerRoutes()...), s.insightRoutes()...) // reviewers.go, insights.go
	// watch.go
	rs = append(rs, s.watchRoutes()...)
	if s.BranchPerms != nil {
		rs = append(rs, restrictionRoutes()...)
	}
	return append(rs, []route{
		{Method: "GET", Pattern: repository + "/settings/pull-requests", Summary: "Merge strategy, merge checks and default reviewers (REPO_ADMIN)",
			handle: (*call).getPullSettings},
		{Method: "POST", Pattern: repository + "/settings/pull-requests", Summary: "Change pull request settings (REPO_ADMIN)",
			Body:   "{defaultStrategy, strategies, checks: {minApprovals, noNeedsWork, noOpenTasks, minSuccessfulBuilds}, defaultReviewers}",
			handle: (*call).putPullSettings},
	}...)
}

// restrictionRoutes are the branch permissions (branchperm).
func restrictionRoutes() []route {
	return []route{
		{Method: "GET", Pattern: restrictRepo, Summary: "List a repository's branch permissions (REPO_ADMIN)", Paged: true, handle: (*call).listRestrictions},
		{Method: "POST", Pattern: restrictRepo, Summary: "Add a branch permission (REPO_ADMIN)",
			Body: "{type, matcher: {id, type: {id: BRANCH|PATTERN}}, users: [name], groups: [name]}", handle: (*call).createRestriction},
		{Method: "GET", Pattern: restrictRepo + "/{id}", Summary: "Get a branch permission (REPO_ADMIN)", handle: (*call).getRestriction},
		{Method: "DELETE", Pattern: restrictRepo + "/{id}", Summary: "Remove a branch permission (REPO_ADMIN)", Success: 204, handle: (*call).deleteRestriction},
		{Method: "GET", Pattern: restrictProject, Summary: "List a project's branch permissions (PROJECT_ADMIN)", Paged: true, handle: (*call).listRestrictions},
		{Method: "POST", Pattern: restrictProject, Summary: "Add a branch permission to every repository of a project (PROJECT_ADMIN)",
			Body: "{type, matcher, users, groups}", handle: (*call).createRestriction},
		{Method: "GET", Pattern: restrictProject + "/{id}", Summary: "Get a project branch permission (PROJECT_ADMIN)", handle: (*call).getRestriction},
		{Method: "DELETE", Pattern: restrictProject + "/{id}", Summary: "Remove a project branch permission (PROJECT_ADMIN)", Success: 204,
			handle: (*call).deleteRestriction},
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// restrictionScope loads the repository ({slug} present) or the project
// and checks admin rights on it.
func (c *call) restrictionScope() (repoID, projectID int64, err error) {
	if c.path("slug") != "" {
		_, r, err := c.repoFor(auth.Admin)
		if err != nil {
			return 0, 0, err
		}
		return r.ID, 0, nil
	}
	p, err := c.projectFor(auth.Admin)
	if err != nil {
		return 0, 0, err
	}
	return 0, p.ID, nil
}

type restrictionJSON struct {
	ID    int64 `json:"id"`
	Scope struct {
		Type       string `json:"type"`
		ResourceID int64  `json:"resourceId"`
	} `json:"scope"`
	Type    string `json:"type"`
	Matcher struct {
		ID        string `json:"id"`
		DisplayID string `json:"displayId"`
		Type      struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"type"`
		Active bool `json:"active"`
	} `json:"matcher"`
	Users      []userJSON `json:"users"`
	Groups     []string   `json:"groups"`
	AccessKeys []any      `json:"accessKeys"`
}

func (c *call) restrictionJSON(r *store.BranchRestriction) restrictionJSON {
	var out restrictionJSON
	out.ID, out.Type = r.ID, r.Type
	if r.RepoID != 0 {
		out.Scope.Type, out.Scope.ResourceID = "REPOSITORY", r.RepoID
	} else {
		out.Scope.Type, out.Scope.ResourceID = "PROJECT", r.ProjectID
	}
	out.Matcher.ID, out.Matcher.DisplayID, out.Matcher.Active = r.MatcherID, strings.TrimPrefix(r.MatcherID, "refs/heads/"), true
	out.Matcher.Type.ID = r.MatcherType
	out.Matcher.Type.Name = map[string]string{branchperm.MatchBranch: "Branch", branchperm.MatchPattern: "Pattern"}[r.MatcherType]
	out.Users, out.Groups, out.AccessKeys = []userJSON{}, []string{}, []any{}
	users := map[int64]*store.User{}
	for _, id := range r.UserIDs {
		out.Users = append(out.Users, c.s.userJSON(c.userByID(id, users)))
	}
	for _, id := range r.GroupIDs {
		// Groups have no by-id lookup; list them by scanning names.
		out.Groups = append(out.Groups, c.groupName(id))
	}
	return out
}

func (c *call) groupName(id int64) string {
	gs, err := c.s.Store.ListGroups(c.ctx, "", store.Page{Limit: store.MaxPageLimit})
	if err == nil {
		for _, g := range gs {
			if g.ID == id {
				return g.Name
			}
		}
	}
	return "group-" + strconv.FormatInt(id, 10)
}

func (c *call) listRestrictions() error {
	repoID, projectID, err := c.restrictionScope()
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	rs, err := c.s.BranchPerms.Restrictions(c.ctx, repoID, projectID)
	if err != nil {
		return err
	}
	return c.json(mapPage(slicePage(rs, pg), func(r store.BranchRestriction) restrictionJSON { return c.restrictionJSON(&r) }))
}

func (c *call) createRestriction() error {
	repoID, projectID, err := c.restrictionScope()
	if err != nil {
		return err
	}
	var in struct {
		Type    string `json:"type"`
		Matcher struct {
			ID   string `json:"id"`
			Type struct {
				ID string `json:"id"`
			} `json:"type"`
		} `json:"matcher"`
		Users  []string `json:"users"`
		Groups []string `json:"groups"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	r := &store.BranchRestriction{RepoID: repoID, ProjectID: projectID, Type: in.Type, MatcherID: in.Matcher.ID, MatcherType: in.Matcher.Type.ID}
	if r.MatcherType == "" {
		r.MatcherType = branchperm.MatchBranch
	}
	for _, name := range in.Users {
		u, err := c.s.Store.UserByName(c.ctx, name)
		if err != nil {
			return problem.New(problem.Invalid, "user %q does not exist", name)
		}
		r.UserIDs = append(r.UserIDs, u.ID)
	}
	for _, name := range in.Groups {
		g, err := c.s.Store.GroupByName(c.ctx, name)
		if err != nil {
			return problem.New(problem.Invalid, "group %q does not exist", name)
		}
		r.GroupIDs = append(r.GroupIDs, g.ID)
	}
	if err := c.s.BranchPerms.CreateRestriction(c.ctx, r); err != nil {
		return err
	}
	return c.json(c.restrictionJSON(r))
}

func (c *call) restrictionID() (int64, error) {
	id, err := strconv.ParseInt(c.path("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "restriction not found")
	}
	return id, nil
}

func (c *call) getRestriction() error {
	repoID, projectID, err := c.restrictionScope()
	if err != nil {
		return err
	}
	id, err := c.restrictionID()
	if err != nil {
		return err
	}
	r, err := c.s.BranchPerms.Restriction(c.ctx, repoID, projectID, id)
	if err != nil {
		return err
	}
	return c.json(c.restrictionJSON(r))
}

func (c *call) deleteRestriction() error {
	repoID, projectID, err := c.restrictionScope()
	if err != nil {
		return err
	}
	id, err := c.restrictionID()
	if err != nil {
		return err
	}
	if err := c.s.BranchPerms.DeleteRestriction(c.ctx, repoID, projectID, id); err != nil {
		return err
	}
	return c.noContent()
}

func (c *call) getPullSettings() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	st, err := c.s.Pulls.GetSettings(c.ctx, r.ID)
	if err != nil {
		return err
	}
	return c.json(st)
}

func (c *call) putPullSettings() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	st, err := c.s.Pulls.GetSettings(c.ctx, r.ID)
	if err != nil {
		return err
	}
	// Fields left out keep their values.
	if err := c.decode(st, false); err != nil {
		return err
	}
	if err := c.s.Pulls.PutSettings(c.ctx, r.ID, st); err != nil {
		return err
	}
	return c.json(st)
}
