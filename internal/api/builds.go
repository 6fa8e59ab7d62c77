package api

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
)

// Build statuses: what CI reports for a commit, scoped to repositories
// (see internal/pull/builds.go for the model).
//
// The repository routes (Bitbucket 7.4+) read and attach within the one
// repository named, for REPO_READ, and 404 when the caller cannot read it
// or, on POST, when its refs do not reach the commit.
//
// The global routes (/rest/build-status/1.0, or latest) name no
// repository. A report is attached to the repositories the reporter can
// read whose refs reach the commit, among the pull.MaxBuildCandidates it
// most recently pushed to (404 when none, never a hint about others).
// A listing shows the statuses of repositories the caller can read, one
// per key, and nothing else: a commit of a repository the caller cannot
// read reads as one without statuses, an empty page, which is also what
// clients such as Renovate expect for a commit CI has not reported on
// yet.

func buildRoutes() []route {
	const stateBody = "{state: SUCCESSFUL|FAILED|INPROGRESS|CANCELLED|UNKNOWN, key, name, url, description"
	// /rest/build-status/latest answers too, as every family (alias.go).
	const base = "/rest/build-status/1.0/commits/"
	rs := []route{
		{Method: "GET", Pattern: base + "{commitId}", Summary: "Build statuses of a commit in the repositories the caller can read", Paged: true,
			handle: (*call).listBuilds},
		{Method: "POST", Pattern: base + "{commitId}", Success: 204,
			Summary: "Report a build status to the repositories the caller can read that reach the commit",
			Body:    stateBody + ", ref, parent, buildNumber, duration, testResults: {successful, failed, skipped}}", handle: (*call).postBuild},
		{Method: "GET", Pattern: base + "stats/{commitId}", Summary: "Counts of a commit's build statuses by state, as listed", handle: (*call).buildStats},
	}
	return append(rs,
		route{Method: "GET", Pattern: repository + "/commits/{commitId}/builds", Summary: "Build statuses of a commit in this repository (REPO_READ)",
			Query: []param{q("key", "only the status with this key, as one object")}, Paged: true, handle: (*call).listRepoBuilds},
		route{Method: "POST", Pattern: repository + "/commits/{commitId}/builds", Summary: "Report a build status to this repository (REPO_READ)", Success: 204,
			Body: stateBody + ", ref, parent, buildNumber, duration, testResults}", handle: (*call).postRepoBuild},
	)
}

type testResultsJSON struct {
	Successful int64 `json:"successful"`
	Failed     int64 `json:"failed"`
	Skipped    int64 `json:"skipped"`
}

// buildJSON is both Bitbucket shapes in one: the legacy status (dateAdded)
// and the repository build status of 7.4+ (createdDate, updatedDate,
// ref, parent, duration in milliseconds, testResults).
type buildJSON struct {
	State       string           `json:"state"`
	Key         string           `json:"key"`
	Name        string           `json:"name,omitempty"`
	URL         string           `json:"url,omitempty"`
	Description string           `json:"description,omitempty"`
	Ref         string           `json:"ref,omitempty"`
	Parent      string           `json:"parent,omitempty"`
	BuildNumber string           `json:"buildNumber,omitempty"`
	Duration    int64            `json:"duration,omitempty"`
	TestResults *testResultsJSON `json:"testResults,omitempty"`
	DateAdded   int64            `json:"dateAdded"`
	CreatedDate int64            `json:"createdDate"`
	UpdatedDate int64            `json:"updatedDate"`
}

func toBuildJSON(b store.BuildStatus) buildJSON {
	out := buildJSON{State: b.State, Key: b.Key, Name: b.Name, URL: b.URL, Description: b.Description, Ref: b.Ref, Parent: b.Parent,
		BuildNumber: b.BuildNumber, Duration: b.DurationMS,
		DateAdded: millis(b.UpdatedAt), CreatedDate: millis(b.CreatedAt), UpdatedDate: millis(b.UpdatedAt)}
	if t := b.Tests; t != nil {
		out.TestResults = &testResultsJSON{Successful: t.Successful, Failed: t.Failed, Skipped: t.Skipped}
	}
	return out
}

// reportedBuild reads a report from the body. The commit id is checked
// before anything is looked up, so a malformed one is Invalid everywhere.
func (c *call) reportedBuild() (*store.BuildStatus, error) {
	sha, err := pull.CheckCommitID(c.path("commitId"))
	if err != nil {
		return nil, err
	}
	var in buildJSON
	if err := c.decode(&in, false); err != nil {
		return nil, err
	}
	b := &store.BuildStatus{CommitSHA: sha, Key: in.Key, State: in.State, Name: in.Name, URL: in.URL, Description: in.Description,
		Ref: in.Ref, Parent: in.Parent, BuildNumber: in.BuildNumber, DurationMS: in.Duration}
	if t := in.TestResults; t != nil {
		b.Tests = &store.TestResults{Successful: t.Successful, Failed: t.Failed, Skipped: t.Skipped}
	}
	return b, nil
}

// visibleBuilds lists the statuses of {commitId} the caller may see.
func (c *call) visibleBuilds() ([]store.BuildStatus, error) {
	if err := c.signedIn(); err != nil {
		return nil, err
	}
	return c.s.Pulls.BuildStatuses(c.ctx, c.path("commitId"), func(repoID int64) (bool, error) {
		r, err := c.s.Store.RepoByID(c.ctx, repoID)
		if problem.Is(err, problem.NotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return c.canSee(auth.Resource{Repo: r})
	})
}

func (c *call) listBuilds() error {
	pg, err := c.page()
	if err != nil {
		return err
	}
	bs, err := c.visibleBuilds()
	if err != nil {
		return err
	}
	return c.json(mapPage(slicePage(bs, pg), toBuildJSON))
}

func (c *call) buildStats() error {
	bs, err := c.visibleBuilds()
	if err != nil {
		return err
	}
	return c.json(pull.CountBuilds(bs))
}

func (c *call) postBuild() error {
	if err := c.signedIn(); err != nil {
		return err
	}
	b, err := c.reportedBuild()
	if err != nil {
		return err
	}
	candidates, err := c.s.Pulls.BuildCandidates(c.ctx, c.p.UserID)
	if err != nil {
		return err
	}
	var ids []int64
	for i := range candidates {
		ok, err := c.canSee(auth.Resource{Repo: &candidates[i]})
		if err != nil {
			return err
		}
		if ok {
			ids = append(ids, candidates[i].ID)
		}
	}
	attached, err := c.s.Pulls.PutBuildStatus(c.ctx, b, ids)
	if err != nil {
		return err
	}
	c.s.logger.Info("build status reported", "commit", b.CommitSHA, "key", b.Key, "state", b.State, "repo_ids", attached,
		"principal", c.p.String())
	return c.noContent()
}

func (c *call) listRepoBuilds() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	bs, err := c.s.Pulls.RepoBuildStatuses(c.ctx, r.ID, c.path("commitId"))
	if err != nil {
		return err
	}
	if key := c.query("key"); key != "" {
		for _, b := range bs {
			if b.Key == key {
				return c.json(toBuildJSON(b))
			}
		}
		return problem.New(problem.NotFound, "no build status with key %q for this commit", key)
	}
	return c.json(mapPage(slicePage(bs, pg), toBuildJSON))
}

func (c *call) postRepoBuild() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	b, err := c.reportedBuild()
	if err != nil {
		return err
	}
	if _, err := c.s.Pulls.PutBuildStatus(c.ctx, b, []int64{r.ID}); err != nil {
		return err
	}
	return c.noContent()
}
