package api

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
)

// Default reviewers, at Bitbucket's /rest/default-reviewers/1.0 paths
// (latest through the router's alias), over the conditions of
// internal/pull/reviewers.go.
//
// Reading conditions takes read access to the project or repository:
// the pull request creation page of every reader shows who will be
// asked. Changing them takes PROJECT_ADMIN or REPO_ADMIN. A repository's
// listing shows its own conditions and its project's (scope says which);
// only its own change through the repository's paths. Reviewers named in
// a condition must be able to read its scope, so a condition cannot be
// used to probe who may read what beyond what its author may grant.
//
// …/reviewers answers the users a pull request between two refs would
// get, as a plain array (Renovate calls it before it opens a pull
// request), leaving out users who cannot read the repository.

const (
	reviewersProject = "/rest/default-reviewers/1.0/projects/{key}"
	reviewersRepo    = reviewersProject + "/repos/{slug}"
)

func (s *server) reviewerRoutes() []route {
	const body = "{sourceMatcher: {id, type: {id: BRANCH|PATTERN|ANY_REF|MODEL_BRANCH|MODEL_CATEGORY}}, targetMatcher, reviewers: [{id}|{name}], requiredApprovals}"
	return []route{
		{Method: "GET", Pattern: reviewersProject + "/conditions", Summary: "A project's default reviewer conditions (PROJECT_READ)",
			handle: (*call).listConditions},
		{Method: "POST", Pattern: reviewersProject + "/condition", Summary: "Add a default reviewer condition to every repository of a project (PROJECT_ADMIN)",
			Body: body, handle: (*call).createCondition},
		{Method: "PUT", Pattern: reviewersProject + "/condition/{id}", Summary: "Change a project's default reviewer condition (PROJECT_ADMIN)",
			Body: body, handle: (*call).updateCondition},
		{Method: "DELETE", Pattern: reviewersProject + "/condition/{id}", Summary: "Remove a project's default reviewer condition (PROJECT_ADMIN)",
			Success: 204, handle: (*call).deleteCondition},
		{Method: "GET", Pattern: reviewersRepo + "/conditions", Summary: "A repository's default reviewer conditions, its project's included (REPO_READ)",
			handle: (*call).listConditions},
		{Method: "POST", Pattern: reviewersRepo + "/condition", Summary: "Add a default reviewer condition (REPO_ADMIN)",
			Body: body, handle: (*call).createCondition},
		{Method: "PUT", Pattern: reviewersRepo + "/condition/{id}", Summary: "Change a repository's default reviewer condition (REPO_ADMIN)",
			Body: body, handle: (*call).updateCondition},
		{Method: "DELETE", Pattern: reviewersRepo + "/condition/{id}", Summary: "Remove a repository's default reviewer condition (REPO_ADMIN)",
			Success: 204, handle: (*call).deleteCondition},
		{Method: "GET", Pattern: reviewersRepo + "/reviewers", Summary: "The default reviewers of a pull request between two refs (REPO_READ)",
			Query: []param{qreq("sourceRefId", "source branch"), qreq("targetRefId", "target branch"),
				q("sourceRepoId", "source repository id (this one or a fork of it)"), q("targetRepoId", "this repository's id")},
			handle: (*call).defaultReviewers},
	}
}

// conditionScope is the scope a condition route names: the repository
// when {slug} is present, else the project, with action a checked.
type conditionScope struct {
	proj *store.Project
	repo *store.Repository
}

func (sc conditionScope) ids() (repoID, projectID int64) {
	if sc.repo != nil {
		return sc.repo.ID, 0
	}
	return 0, sc.proj.ID
}

func (sc conditionScope) resource() auth.Resource {
	return auth.Resource{Repo: sc.repo, Project: sc.proj}
}

func (c *call) conditionScope(a auth.Action) (conditionScope, error) {
	if c.path("slug") != "" {
		proj, r, err := c.repoFor(a)
		return conditionScope{proj: proj, repo: r}, err
	}
	proj, err := c.projectFor(a)
	return conditionScope{proj: proj}, err
}

type refMatcherJSON struct {
	ID        string `json:"id"`
	DisplayID string `json:"displayId"`
	Type      struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"type"`
	Active bool `json:"active"`
}

var matcherNames = map[string]string{pull.MatchBranch: "Branch", pull.MatchPattern: "Pattern", pull.MatchAnyRef: "Any branch",
	pull.MatchModelBranch: "Branching model branch", pull.MatchModelCategory: "Branching model category"}

func toRefMatcherJSON(m store.RefMatcher) refMatcherJSON {
	out := refMatcherJSON{ID: m.ID, DisplayID: strings.TrimPrefix(m.ID, "refs/heads/"), Active: true}
	out.Type.ID, out.Type.Name = m.Type, matcherNames[m.Type]
	return out
}

type conditionJSON struct {
	ID    int64 `json:"id"`
	Scope struct {
		Type       string `json:"type"`
		ResourceID int64  `json:"resourceId"`
	} `json:"scope"`
	SourceRefMatcher  refMatcherJSON `json:"sourceRefMatcher"`
	TargetRefMatcher  refMatcherJSON `json:"targetRefMatcher"`
	Reviewers         []userJSON     `json:"reviewers"`
	RequiredApprovals int            `json:"requiredApprovals"`
}

func (c *call) conditionJSON(cd *store.ReviewerCondition, users map[int64]*store.User) conditionJSON {
	out := conditionJSON{ID: cd.ID, SourceRefMatcher: toRefMatcherJSON(cd.Source), TargetRefMatcher: toRefMatcherJSON(cd.Target),
		Reviewers: []userJSON{}, RequiredApprovals: cd.RequiredApprovals}
	if cd.RepoID != 0 {
		out.Scope.Type, out.Scope.ResourceID = "REPOSITORY", cd.RepoID
	} else {
		out.Scope.Type, out.Scope.ResourceID = "PROJECT", cd.ProjectID
	}
	for _, id := range cd.Reviewers {
		out.Reviewers = append(out.Reviewers, c.s.userJSON(c.userByID(id, users)))
	}
	return out
}

// matcherInput is a matcher as clients send it: {id, type: {id}}.
type matcherInput struct {
	ID   string `json:"id"`
	Type struct {
		ID string `json:"id"`
	} `json:"type"`
}

type conditionInput struct {
	// Bitbucket's create body says sourceMatcher, its answers
	// sourceRefMatcher; clients send either, so both are read.
	SourceMatcher    *matcherInput `json:"sourceMatcher"`
	TargetMatcher    *matcherInput `json:"targetMatcher"`
	SourceRefMatcher *matcherInput `json:"sourceRefMatcher"`
	TargetRefMatcher *matcherInput `json:"targetRefMatcher"`
	Reviewers        []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"reviewers"`
	RequiredApprovals json.Number `json:"requiredApprovals"`
}

func pickMatcher(a, b *matcherInput, side string) (store.RefMatcher, error) {
	m := a
	if m == nil {
		m = b
	}
	if m == nil {
		return store.RefMatcher{}, problem.New(problem.Invalid, "%sMatcher is required", side)
	}
	return store.RefMatcher{Type: strings.ToUpper(m.Type.ID), ID: m.ID}, nil
}

// readCondition reads a condition from the body and resolves its
// reviewers to users who can read the scope.
func (c *call) readCondition(sc conditionScope) (*store.ReviewerCondition, error) {
	var in conditionInput
	if err := c.decode(&in, false); err != nil {
		return nil, err
	}
	var cd store.ReviewerCondition
	cd.RepoID, cd.ProjectID = sc.ids()
	var err error
	if cd.Source, err = pickMatcher(in.SourceMatcher, in.SourceRefMatcher, "source"); err != nil {
		return nil, err
	}
	if cd.Target, err = pickMatcher(in.TargetMatcher, in.TargetRefMatcher, "target"); err != nil {
		return nil, err
	}
	if in.RequiredApprovals != "" {
		n, err := strconv.Atoi(string(in.RequiredApprovals))
		if err != nil {
			return nil, problem.New(problem.Invalid, "requiredApprovals must be a whole number")
		}
		cd.RequiredApprovals = n
	}
	what := "repository"
	if sc.repo == nil {
		what = "project"
	}
	for _, rv := range in.Reviewers {
		var u *store.User
		var err error
		switch {
		case rv.ID != 0:
			u, err = c.s.Store.UserByID(c.ctx, rv.ID)
		case rv.Name != "":
			u, err = c.s.Store.UserByName(c.ctx, rv.Name)
		default:
			return nil, problem.New(problem.Invalid, "a reviewer needs an id or a name")
		}
		if problem.Is(err, problem.NotFound) {
			return nil, problem.New(problem.Invalid, "reviewer %s does not exist", reviewerLabel(rv.ID, rv.Name))
		}
		if err != nil {
			return nil, err
		}
		if !u.Active || c.s.Auth.Authorize(c.ctx, &auth.Principal{UserID: u.ID, Name: u.Name}, sc.resource(), auth.Read) != nil {
			return nil, problem.New(problem.Invalid, "reviewer %q cannot read this %s", u.Name, what)
		}
		cd.Reviewers = append(cd.Reviewers, u.ID)
	}
	return &cd, nil
}

func reviewerLabel(id int64, name string) string {
	if name != "" {
		return strconv.Quote(name)
	}
	return "#" + strconv.FormatInt(id, 10)
}

func (c *call) conditionID() (int64, error) {
	id, err := strconv.ParseInt(c.path("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "condition not found")
	}
	return id, nil
}

func (c *call) listConditions() error {
	sc, err := c.conditionScope(auth.Read)
	if err != nil {
		return err
	}
	var cs []store.ReviewerCondition
	if sc.repo != nil {
		// A repository's readers see what applies to it: its own
		// conditions and its project's.
		cs, err = c.s.Pulls.ReviewerConditionsFor(c.ctx, sc.repo)
	} else {
		cs, err = c.s.Pulls.ReviewerConditions(c.ctx, 0, sc.proj.ID)
	}
	if err != nil {
		return err
	}
	users := map[int64]*store.User{}
	out := make([]conditionJSON, len(cs))
	for i := range cs {
		out[i] = c.conditionJSON(&cs[i], users)
	}
	return c.json(out)
}

func (c *call) createCondition() error {
	sc, err := c.conditionScope(auth.Admin)
	if err != nil {
		return err
	}
	cd, err := c.readCondition(sc)
	if err != nil {
		return err
	}
	if err := c.s.Pulls.CreateReviewerCondition(c.ctx, cd); err != nil {
		return err
	}
	return c.json(c.conditionJSON(cd, map[int64]*store.User{}))
}

func (c *call) updateCondition() error {
	sc, err := c.conditionScope(auth.Admin)
	if err != nil {
		return err
	}
	id, err := c.conditionID()
	if err != nil {
		return err
	}
	cd, err := c.readCondition(sc)
	if err != nil {
		return err
	}
	cd.ID = id
	if err := c.s.Pulls.UpdateReviewerCondition(c.ctx, cd); err != nil {
		return err
	}
	return c.json(c.conditionJSON(cd, map[int64]*store.User{}))
}

func (c *call) deleteCondition() error {
	sc, err := c.conditionScope(auth.Admin)
	if err != nil {
		return err
	}
	id, err := c.conditionID()
	if err != nil {
		return err
	}
	repoID, projectID := sc.ids()
	if err := c.s.Pulls.DeleteReviewerCondition(c.ctx, repoID, projectID, id); err != nil {
		return err
	}
	return c.noContent()
}

func (c *call) defaultReviewers() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	// The repository ids are checked, not used: conditions belong to the
	// target, and a source that is neither it nor one of its forks could
	// never be a pull request into it.
	if id := c.query("targetRepoId"); id != "" && id != strconv.FormatInt(r.ID, 10) {
		return problem.New(problem.Invalid, "targetRepoId must be this repository's id (%d)", r.ID)
	}
	if id := c.query("sourceRepoId"); id != "" && id != strconv.FormatInt(r.ID, 10) {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return problem.New(problem.Invalid, "invalid sourceRepoId %q", id)
		}
		src, err := c.s.Store.RepoByID(c.ctx, n)
		if err != nil || src.ForkOf != r.ID {
			return problem.New(problem.Invalid, "sourceRepoId must be this repository or a fork of it")
		}
	}
	from, to := c.query("sourceRefId"), c.query("targetRefId")
	if from == "" || to == "" {
		return problem.New(problem.Invalid, "sourceRefId and targetRefId are required")
	}
	ids, err := c.s.Pulls.DefaultReviewers(c.ctx, r, from, to)
	if err != nil {
		return err
	}
	users := map[int64]*store.User{}
	out := []userJSON{}
	for _, id := range ids {
		out = append(out, c.s.userJSON(c.userByID(id, users)))
	}
	return c.json(out)
}
