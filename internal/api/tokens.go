package api

import (
	"strconv"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Personal access tokens, at Bitbucket's /rest/access-tokens/1.0 paths.
// Bitbucket tokens carry a list of permissions (PROJECT_READ, REPO_WRITE,
// …); Sluice tokens carry one scope that caps every action. A permission
// list maps to the strongest level it names, and is shown back as the
// REPO_* permission of that level.

type tokenJSON struct {
	ID                string   `json:"id"`
	CreatedDate       int64    `json:"createdDate"`
	LastAuthenticated int64    `json:"lastAuthenticated,omitempty"`
	Name              string   `json:"name"`
	Permissions       []string `json:"permissions"`
	Scope             string   `json:"scope"`
	ExpiryDate        int64    `json:"expiryDate,omitempty"`
	User              userJSON `json:"user"`
	// Token is the secret, present only in the answer that created it.
	Token string `json:"token,omitempty"`
}

type tokenBody struct {
	Name        string   `json:"name"`
	Permissions []string `json:"permissions"`
	Scope       string   `json:"scope"`
	ExpiryDays  *int     `json:"expiryDays"`
}

// maxExpiryDays keeps a huge expiryDays from overflowing a Duration on
// its way to the accounts service, which refuses anything over ten years.
const maxExpiryDays = 3650

func scopePermissions(s store.Scope) []string {
	switch s {
	case store.ScopeRead:
		return []string{"PROJECT_READ", "REPO_READ"}
	case store.ScopeWrite:
		return []string{"PROJECT_READ", "REPO_WRITE"}
	case store.ScopeAdmin:
		return []string{"PROJECT_ADMIN", "REPO_ADMIN"}
	}
	return []string{}
}

// scopeOf turns a request's scope or permission list into a Scope.
func scopeOf(b tokenBody) (store.Scope, error) {
	if b.Scope != "" {
		switch s := store.Scope(b.Scope); s {
		case store.ScopeRead, store.ScopeWrite, store.ScopeAdmin:
			return s, nil
		}
		return "", problem.New(problem.Invalid, "scope must be read, write or admin")
	}
	if len(b.Permissions) == 0 {
		return "", problem.New(problem.Invalid, "permissions (or scope) is required")
	}
	rank := map[string]int{
		"PROJECT_READ": 1, "REPO_READ": 1,
		"PROJECT_WRITE": 2, "REPO_WRITE": 2,
		"PROJECT_ADMIN": 3, "REPO_ADMIN": 3,
	}
	best := 0
	for _, p := range b.Permissions {
		r, ok := rank[p]
		if !ok {
			return "", problem.New(problem.Invalid, "permission %s is not a token permission (PROJECT_READ, PROJECT_WRITE, PROJECT_ADMIN, REPO_READ, REPO_WRITE, REPO_ADMIN)", quoteShort(p))
		}
		best = max(best, r)
	}
	return [...]store.Scope{1: store.ScopeRead, 2: store.ScopeWrite, 3: store.ScopeAdmin}[best], nil
}

func (s *server) tokenJSON(t *store.Token, u *store.User) tokenJSON {
	out := tokenJSON{
		ID: strconv.FormatInt(t.ID, 10), CreatedDate: millis(t.CreatedAt), Name: t.Name,
		Permissions: scopePermissions(t.Scope), Scope: string(t.Scope), User: s.userJSON(u),
	}
	if t.LastUsedAt != nil {
		out.LastAuthenticated = millis(*t.LastUsedAt)
	}
	if t.ExpiresAt != nil {
		out.ExpiryDate = millis(*t.ExpiresAt)
	}
	return out
}

// tokenOwner resolves {userSlug} and checks the caller may manage that
// user's tokens: themselves, or an administrator when admins is true.
func (c *call) tokenOwner(admins bool) (*store.User, error) {
	if err := c.signedIn(); err != nil {
		return nil, err
	}
	u, err := c.s.Store.UserByName(c.ctx, c.path("userSlug"))
	if err != nil {
		return nil, err
	}
	if u.ID == c.p.UserID {
		return u, nil
	}
	if admins {
		if err := c.global(auth.Admin); err != nil {
			return nil, err
		}
		return u, nil
	}
	return nil, problem.New(problem.Forbidden, "you can only manage your own access tokens")
}

func (c *call) listTokens() error {
	u, err := c.tokenOwner(true)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	all, err := c.s.Store.ListTokens(c.ctx, u.ID)
	if err != nil {
		return err
	}
	// Revoked tokens are gone for the user, as in Bitbucket, where revoking
	// deletes; the store keeps them for the audit trail.
	live := all[:0]
	for _, t := range all {
		if t.RevokedAt == nil {
			live = append(live, t)
		}
	}
	return c.json(mapPage(slicePage(live, pg), func(t store.Token) tokenJSON { return c.s.tokenJSON(&t, u) }))
}

func (c *call) createToken() error {
	u, err := c.tokenOwner(false)
	if err != nil {
		return err
	}
	var b tokenBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	scope, err := scopeOf(b)
	if err != nil {
		return err
	}
	var lifetime time.Duration
	if b.ExpiryDays != nil {
		// 0 would mean "never" to the service; here never is leaving the
		// field out, as in Bitbucket.
		if *b.ExpiryDays < 1 {
			return problem.New(problem.Invalid, "expiryDays must be at least 1")
		}
		lifetime = time.Duration(min(*b.ExpiryDays, maxExpiryDays+1)) * 24 * time.Hour
	}
	secret, tok, err := c.s.Accounts.CreateToken(c.ctx, c.actor(), u, accounts.NewToken{Name: b.Name, Scope: scope, Lifetime: lifetime})
	if err != nil {
		return err
	}
	out := c.s.tokenJSON(tok, u)
	out.Token = secret
	return c.json(out)
}

func (c *call) deleteToken() error {
	u, err := c.tokenOwner(true)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(c.path("tokenId"), 10, 64)
	if err != nil || id <= 0 {
		return problem.New(problem.NotFound, "token not found")
	}
	if err := c.s.Accounts.RevokeToken(c.ctx, c.actor(), u, id); err != nil {
		return err
	}
	return c.noContent()
}
