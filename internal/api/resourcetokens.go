package api

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Project and repository HTTP access tokens, at Bitbucket's
// /rest/access-tokens/1.0/projects/{key}[/repos/{slug}] paths: the
// credentials CI uses, which belong to the resource rather than a user.
// Managing them takes PROJECT_ADMIN or REPO_ADMIN; creating and changing
// them takes a password session too (accounts). Unlike Bitbucket, which
// backs each token with a generated service user, Sluice has no such user:
// the token document carries no "user".

const (
	projectTokens = "/rest/access-tokens/1.0/projects/{key}"
	repoTokens    = projectTokens + "/repos/{slug}"
)

func (s *server) resourceTokenRoutes() []route {
	const body = "{name, permissions: [PROJECT_READ|PROJECT_WRITE|PROJECT_ADMIN|REPO_READ|REPO_WRITE|REPO_ADMIN], expiryDays}"
	return []route{
		{Method: "GET", Pattern: projectTokens, Summary: "List a project's access tokens (PROJECT_ADMIN)", Paged: true, handle: (*call).listResourceTokens},
		{Method: "PUT", Pattern: projectTokens, Summary: "Create a project access token; the secret is shown once (PROJECT_ADMIN, signed in with a password)",
			Body: body, handle: (*call).createResourceToken},
		{Method: "GET", Pattern: projectTokens + "/{tokenId}", Summary: "Get a project access token (PROJECT_ADMIN)", handle: (*call).getResourceToken},
		{Method: "POST", Pattern: projectTokens + "/{tokenId}", Summary: "Rename a project access token or replace its permissions (PROJECT_ADMIN, signed in with a password)",
			Body: "{name, permissions}", handle: (*call).updateResourceToken},
		{Method: "DELETE", Pattern: projectTokens + "/{tokenId}", Summary: "Delete a project access token (PROJECT_ADMIN)", Success: 204, handle: (*call).deleteResourceToken},
		{Method: "GET", Pattern: repoTokens, Summary: "List a repository's access tokens (REPO_ADMIN)", Paged: true, handle: (*call).listResourceTokens},
		{Method: "PUT", Pattern: repoTokens, Summary: "Create a repository access token; the secret is shown once (REPO_ADMIN, signed in with a password)",
			Body: "{name, permissions: [REPO_READ|REPO_WRITE|REPO_ADMIN], expiryDays}", handle: (*call).createResourceToken},
		{Method: "GET", Pattern: repoTokens + "/{tokenId}", Summary: "Get a repository access token (REPO_ADMIN)", handle: (*call).getResourceToken},
		{Method: "POST", Pattern: repoTokens + "/{tokenId}", Summary: "Rename a repository access token or replace its permissions (REPO_ADMIN, signed in with a password)",
			Body: "{name, permissions}", handle: (*call).updateResourceToken},
		{Method: "DELETE", Pattern: repoTokens + "/{tokenId}", Summary: "Delete a repository access token (REPO_ADMIN)", Success: 204, handle: (*call).deleteResourceToken},
	}
}

type resourceTokenJSON struct {
	ID                string   `json:"id"`
	CreatedDate       int64    `json:"createdDate"`
	LastAuthenticated int64    `json:"lastAuthenticated,omitempty"`
	Name              string   `json:"name"`
	Permissions       []string `json:"permissions"`
	ExpiryDate        int64    `json:"expiryDate,omitempty"`
	ExpiryDays        int      `json:"expiryDays,omitempty"`
	// Token is the secret, present only in the answer that created it.
	Token string `json:"token,omitempty"`
}

// scopeSuffix is the READ/WRITE/ADMIN of a permission name.
var scopeSuffix = map[store.Scope]string{store.ScopeRead: "READ", store.ScopeWrite: "WRITE", store.ScopeAdmin: "ADMIN"}

func scopeRank(sc store.Scope) int {
	return map[store.Scope]int{store.ScopeRead: 1, store.ScopeWrite: 2, store.ScopeAdmin: 3}[sc]
}

// resourceTokenPermissions names a token's grant as Bitbucket does: a
// project token shows its project level and the repository level it has
// on the project's repositories (at least the project level).
func resourceTokenPermissions(t *store.ResourceToken) []string {
	out := []string{}
	repo := t.RepoScope
	if t.ProjectScope != "" {
		out = append(out, "PROJECT_"+scopeSuffix[t.ProjectScope])
		if scopeRank(t.ProjectScope) > scopeRank(repo) {
			repo = t.ProjectScope
		}
	}
	if repo != "" {
		out = append(out, "REPO_"+scopeSuffix[repo])
	}
	return out
}

func newResourceTokenJSON(t *store.ResourceToken) resourceTokenJSON {
	out := resourceTokenJSON{ID: strconv.FormatInt(t.ID, 10), CreatedDate: millis(t.CreatedAt), Name: t.Name,
		Permissions: resourceTokenPermissions(t)}
	if t.LastUsedAt != nil {
		out.LastAuthenticated = millis(*t.LastUsedAt)
	}
	if t.ExpiresAt != nil {
		out.ExpiryDate = millis(*t.ExpiresAt)
		out.ExpiryDays = int((t.ExpiresAt.Sub(t.CreatedAt) + 12*time.Hour) / (24 * time.Hour))
	}
	return out
}

// resourcePermissions splits a permission list into the strongest
// project and repository levels it names.
func resourcePermissions(perms []string) (project, repo store.Scope, err error) {
	levels := map[string]store.Scope{"READ": store.ScopeRead, "WRITE": store.ScopeWrite, "ADMIN": store.ScopeAdmin}
	for _, p := range perms {
		kind, lvl, _ := strings.Cut(p, "_")
		sc, ok := levels[lvl]
		dst := map[string]*store.Scope{"PROJECT": &project, "REPO": &repo}[kind]
		if !ok || dst == nil {
			return "", "", problem.New(problem.Invalid, "permission %s is not a token permission (PROJECT_READ, PROJECT_WRITE, PROJECT_ADMIN, REPO_READ, REPO_WRITE, REPO_ADMIN)", quoteShort(p))
		}
		if scopeRank(sc) > scopeRank(*dst) {
			*dst = sc
		}
	}
	return project, repo, nil
}

// tokenTarget loads {key} (and {slug} on repository paths) and checks
// the caller administers it; reading a token list is managing tokens.
func (c *call) tokenTarget() (accounts.ResourceTarget, error) {
	if c.path("slug") != "" {
		proj, r, err := c.repoFor(auth.Admin)
		return accounts.ResourceTarget{Project: proj, Repo: r}, err
	}
	proj, err := c.projectFor(auth.Admin)
	return accounts.ResourceTarget{Project: proj}, err
}

func targetIDs(t accounts.ResourceTarget) (projectID, repoID int64) {
	if t.Repo != nil {
		return 0, t.Repo.ID
	}
	return t.Project.ID, 0
}

func (c *call) resourceTokenStore() (store.ResourceTokenStore, error) {
	rs, ok := c.s.Store.(store.ResourceTokenStore)
	if !ok {
		return nil, problem.New(problem.Unavailable, "this store keeps no project or repository access tokens")
	}
	return rs, nil
}

func (c *call) tokenID() (int64, error) {
	id, err := strconv.ParseInt(c.path("tokenId"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "token not found")
	}
	return id, nil
}

func (c *call) listResourceTokens() error {
	t, err := c.tokenTarget()
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	rs, err := c.resourceTokenStore()
	if err != nil {
		return err
	}
	projectID, repoID := targetIDs(t)
	rows, err := rs.ListResourceTokens(c.ctx, projectID, repoID, probe(pg))
	if err != nil {
		return err
	}
	return c.json(mapPage(newPage(rows, pg), func(t store.ResourceToken) resourceTokenJSON { return newResourceTokenJSON(&t) }))
}

func (c *call) getResourceToken() error {
	t, err := c.tokenTarget()
	if err != nil {
		return err
	}
	id, err := c.tokenID()
	if err != nil {
		return err
	}
	rs, err := c.resourceTokenStore()
	if err != nil {
		return err
	}
	projectID, repoID := targetIDs(t)
	tok, err := rs.ResourceTokenByID(c.ctx, projectID, repoID, id)
	if err != nil {
		return err
	}
	return c.json(newResourceTokenJSON(tok))
}

func (c *call) createResourceToken() error {
	t, err := c.tokenTarget()
	if err != nil {
		return err
	}
	var b tokenBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	if len(b.Permissions) == 0 {
		return problem.New(problem.Invalid, "permissions is required")
	}
	ps, rps, err := resourcePermissions(b.Permissions)
	if err != nil {
		return err
	}
	spec := accounts.ResourceTokenSpec{Name: b.Name, ProjectScope: ps, RepoScope: rps}
	if b.ExpiryDays != nil {
		if *b.ExpiryDays < 1 {
			return problem.New(problem.Invalid, "expiryDays must be at least 1")
		}
		spec.Lifetime = time.Duration(min(*b.ExpiryDays, maxExpiryDays+1)) * 24 * time.Hour
	}
	secret, tok, err := c.s.Accounts.CreateResourceToken(c.ctx, c.actor(), t, spec)
	if err != nil {
		return err
	}
	out := newResourceTokenJSON(tok)
	out.Token = secret
	return c.json(out)
}

func (c *call) updateResourceToken() error {
	t, err := c.tokenTarget()
	if err != nil {
		return err
	}
	id, err := c.tokenID()
	if err != nil {
		return err
	}
	var b tokenBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	ps, rps, err := resourcePermissions(b.Permissions)
	if err != nil {
		return err
	}
	tok, err := c.s.Accounts.UpdateResourceToken(c.ctx, c.actor(), t, id, accounts.ResourceTokenSpec{Name: b.Name, ProjectScope: ps, RepoScope: rps})
	if err != nil {
		return err
	}
	return c.json(newResourceTokenJSON(tok))
}

func (c *call) deleteResourceToken() error {
	t, err := c.tokenTarget()
	if err != nil {
		return err
	}
	id, err := c.tokenID()
	if err != nil {
		return err
	}
	if err := c.s.Accounts.DeleteResourceToken(c.ctx, c.actor(), t, id); err != nil {
		return err
	}
	return c.noContent()
}
