package api

import (
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
)

// What integrations ask before anything else: the product and version
// (application-properties), what the server can do (capabilities), and the
// repository's default branch under Bitbucket's own path. A client that
// gets a 404 from any of these concludes it is not talking to Bitbucket,
// or that the repository does not exist, and stops.

// The Bitbucket release Sluice reports. Clients gate features on it
// (Renovate, for one, only uses newer pull request and build status
// endpoints above given versions), so it names the release whose REST
// API Sluice's matches: 8.19 is the Data Center long-term-support line.
// buildNumber is Bitbucket's scheme for it (major·10⁶ + minor·10³ +
// patch); buildDate is when Sluice adopted it, in milliseconds as
// Bitbucket writes it.
const (
	bitbucketVersion     = "8.19.0"
	bitbucketBuildNumber = "8019000"
	bitbucketBuildDate   = "1767225600000" // 2026-01-01T00:00:00Z
)

// capabilitiesBase is where /rest/capabilities points for the details of
// each capability; the path is Sluice's own, clients follow the URL.
const capabilitiesBase = "/rest/capabilities"

func (s *server) discoveryRoutes() []route {
	rs := []route{
		{Method: "GET", Pattern: apiBase + "/application-properties",
			Summary: "Product name and the Bitbucket version whose REST API this server speaks", handle: (*call).applicationProperties},
		{Method: "GET", Pattern: capabilitiesBase, Summary: "What this server can do, each capability with the URL describing it",
			handle: (*call).capabilities},
		{Method: "GET", Pattern: repository + "/branches/default", Summary: "The default branch (404 while it does not exist)",
			handle: (*call).getBranchesDefault},
		{Method: "PUT", Pattern: repository + "/branches/default", Summary: "Set the default branch (REPO_ADMIN)", Success: 204,
			Body: "{id}", handle: (*call).setDefaultBranch},
	}
	if s.Pulls != nil {
		rs = append(rs,
			route{Method: "GET", Pattern: capabilitiesBase + "/webhooks", Summary: "The webhook events this server sends",
				handle: (*call).webhookCapabilities},
			route{Method: "GET", Pattern: capabilitiesBase + "/build", Summary: "The build status features this server accepts",
				handle: (*call).buildCapabilities},
		)
	}
	return rs
}

type applicationPropertiesJSON struct {
	Version     string `json:"version"`
	BuildNumber string `json:"buildNumber"`
	BuildDate   string `json:"buildDate"`
	DisplayName string `json:"displayName"`
}

// applicationProperties is public, as in Bitbucket: clients read it
// before they authenticate to pick the API they will use.
func (c *call) applicationProperties() error {
	return c.json(applicationPropertiesJSON{Version: bitbucketVersion, BuildNumber: bitbucketBuildNumber,
		BuildDate: bitbucketBuildDate, DisplayName: "Bitbucket"})
}

type capabilitiesJSON struct {
	// Application is "stash", Bitbucket Server's old name, which is
	// what Atlassian's own clients check to recognise Bitbucket.
	Application  string            `json:"application"`
	Capabilities map[string]string `json:"capabilities"`
}

// capabilities lists only what this node serves: webhooks and build
// statuses come with pull requests; there are no deployments.
func (c *call) capabilities() error {
	caps := map[string]string{}
	if c.s.Pulls != nil {
		caps["webhooks"] = c.s.BaseURL + capabilitiesBase + "/webhooks"
		caps["build"] = c.s.BaseURL + capabilitiesBase + "/build"
	}
	return c.json(capabilitiesJSON{Application: "stash", Capabilities: caps})
}

// webhookCapabilities lists the event keys a webhook may subscribe to,
// read from internal/pull so the answer grows with what is sent.
func (c *call) webhookCapabilities() error {
	events := slices.Clone(pull.WebhookEvents)
	slices.Sort(events)
	return c.json(map[string][]string{"application-webhooks": events})
}

// buildCapabilities: builds.go takes the repository-scoped build status
// with ref, parent, duration and test results ("richBuildStatus"), and
// the CANCELLED and UNKNOWN states.
func (c *call) buildCapabilities() error {
	return c.json(map[string][]string{"buildStatus": {"richBuildStatus", "cancelledStatus", "unknownStatus"}})
}

// getBranchesDefault is Bitbucket's GET …/branches/default: the branch
// HEAD names, as a ref, and 404 while that branch does not exist (an empty
// repository), where …/default-branch answers the name regardless.
func (c *call) getBranchesDefault() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	ref := "refs/heads/" + r.DefaultBranch
	sha, err := c.refCommit(r, ref)
	if err != nil {
		return err
	}
	if sha == "" || r.DefaultBranch == "" {
		return problem.New(problem.NotFound, "repository %s/%s does not have a default branch yet", r.ProjectKey, r.Slug)
	}
	return c.json(refOf(repo.Ref{Name: ref, DisplayID: r.DefaultBranch, LatestCommit: sha, IsDefault: true}, "BRANCH"))
}

// pathType answers browse's ?type=true: whether path is a file or a
// directory, without reading either (Jenkins probes for a Jenkinsfile this
// way on every branch scan).
func (c *call) pathType(rID int64, sha, p string) error {
	if p == "" {
		return c.json(map[string]string{"type": "DIRECTORY"})
	}
	typ, err := c.s.Repos.PathType(c.ctx, rID, sha, p)
	if err != nil {
		return err
	}
	return c.json(map[string]string{"type": typ})
}

// boolQuery parses a boolean query parameter as Bitbucket does (true or
// false, any case); absent is def, anything else a 400 naming it.
func (c *call) boolQuery(name string, def bool) (bool, error) {
	switch v := c.query(name); strings.ToLower(v) {
	case "":
		return def, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, problem.New(problem.Invalid, "query parameter %s must be true or false, not %s", name, quoteShort(v))
	}
}
