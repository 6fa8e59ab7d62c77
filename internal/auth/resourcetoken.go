package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Project and repository HTTP access tokens (Bitbucket's "HTTP access
// tokens" of a project or a repository) are what CI systems use: a
// credential that belongs to the resource, survives its creator leaving,
// and reaches nothing else. A caller holding one is a principal of its own
// kind, neither a user nor an SSH access key: Principal.ResourceToken is
// set and UserID is 0, so it owns nothing a user owns (SSH keys, personal
// tokens, pull requests it did not open) and is named in logs by the
// token's name.
//
// What it may do is exactly its grant: on its repository (a repository
// token) or on its project and every repository the project holds now (a
// project token), up to the granted level, and nothing anywhere else, not
// even what anonymous callers may read (like an SSH access key, it is not
// an account). Outside its resource it gets NotFound, so a leaked CI token
// cannot even tell which other projects exist.
//
// Secrets have their own prefix, "sluice_rt_", so AuthenticateHTTP knows
// which table to look in without a second query for every user token, and
// so secret scanners can tell a leaked CI credential from a person's.

const resourceTokenPrefix = "sluice_rt_"

var resourceTokenSecretLen = len(resourceTokenPrefix) + (tokenRandomBytes*8+5)/6

// ResourceTokenGrant is what a project or repository access token grants:
// ProjectScope on project ProjectID, RepoScope on repository RepoID or,
// for a project token, on every repository of ProjectID.
type ResourceTokenGrant struct {
	ID           int64
	Name         string
	ProjectID    int64
	RepoID       int64
	ProjectScope store.Scope
	RepoScope    store.Scope
}

// String names the token for logs: its name and id, never its secret.
func (g *ResourceTokenGrant) String() string {
	kind := "project"
	if g.RepoID != 0 {
		kind = "repository"
	}
	return fmt.Sprintf("%s (%s token:%d)", g.Name, kind, g.ID)
}

// NewResourceToken is a project or repository access token to create.
// The accounts service fills it and checks who may.
type NewResourceToken struct {
	ProjectID, RepoID       int64
	Name                    string
	ProjectScope, RepoScope store.Scope
	CreatedBy               int64
	ExpiresAt               *time.Time
}

func (s *Service) resourceTokens() (store.ResourceTokenStore, error) {
	rs, ok := s.st.(store.ResourceTokenStore)
	if !ok {
		return nil, problem.New(problem.Unavailable, "this store keeps no project or repository access tokens")
	}
	return rs, nil
}

// CheckTokenName applies the rule every access token name follows.
func CheckTokenName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > maxTokenNameLen || !utf8.ValidString(name) ||
		strings.ContainsFunc(name, unicode.IsControl) {
		return "", problem.New(problem.Invalid, "token name must be 1 to %d printable characters", maxTokenNameLen)
	}
	return name, nil
}

// CreateResourceToken creates a project or repository access token and
// returns its secret, which is shown once and stored only as its SHA-256.
func (s *Service) CreateResourceToken(ctx context.Context, in NewResourceToken) (string, *store.ResourceToken, error) {
	rs, err := s.resourceTokens()
	if err != nil {
		return "", nil, err
	}
	name, err := CheckTokenName(in.Name)
	if err != nil {
		return "", nil, err
	}
	if in.ExpiresAt != nil && !in.ExpiresAt.After(s.now()) {
		return "", nil, problem.New(problem.Invalid, "token expiry must be in the future")
	}
	raw := make([]byte, tokenRandomBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, fmt.Errorf("create resource token: %w", err)
	}
	secret := resourceTokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	tok := &store.ResourceToken{
		ProjectID: in.ProjectID, RepoID: in.RepoID, Name: name, Hash: sum[:],
		ProjectScope: in.ProjectScope, RepoScope: in.RepoScope,
		CreatedBy: in.CreatedBy, ExpiresAt: in.ExpiresAt,
	}
	if err := rs.CreateResourceToken(ctx, tok); err != nil {
		return "", nil, err
	}
	return secret, tok, nil
}

// looksLikeResourceToken reports whether s has the exact shape of a
// project or repository token secret.
func looksLikeResourceToken(s string) bool {
	return len(s) == resourceTokenSecretLen && strings.HasPrefix(s, resourceTokenPrefix) &&
		looksLikeToken(tokenPrefix+s[len(resourceTokenPrefix):])
}

// resourceToken authenticates a project or repository token secret. An
// unknown, malformed or expired one gives the same Unauthenticated error
// as a bad personal token.
func (s *Service) resourceToken(ctx context.Context, secret string) (*Principal, error) {
	fail := problem.New(problem.Unauthenticated, msgBadToken)
	if !looksLikeResourceToken(secret) {
		return nil, fail
	}
	rs, err := s.resourceTokens()
	if err != nil {
		return nil, fail
	}
	sum := sha256.Sum256([]byte(secret))
	tok, err := rs.ResourceTokenByHash(ctx, sum[:])
	if problem.Is(err, problem.NotFound) {
		s.logger.Info("token login failed", "reason", "unknown resource token")
		return nil, fail
	}
	if err != nil {
		return nil, fmt.Errorf("token login: read resource token: %w", err)
	}
	now := s.now()
	if tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt) {
		s.logger.Info("token login failed", "resource_token_id", tok.ID, "reason", "expired")
		return nil, fail
	}
	// Negative ids keep these apart from personal tokens' in the one
	// last-used map: ids start at 1 in both dialects.
	if s.shouldTouch(touchKey{id: -tok.ID}, now) {
		if err := rs.TouchResourceToken(ctx, tok.ID, now); err != nil {
			s.logger.Warn("record token use", "resource_token_id", tok.ID, "err", err)
		}
	}
	g := &ResourceTokenGrant{
		ID: tok.ID, Name: tok.Name, ProjectID: tok.ProjectID, RepoID: tok.RepoID,
		ProjectScope: tok.ProjectScope, RepoScope: tok.RepoScope,
	}
	// Scope is the strongest level granted anywhere: code that asks "is
	// this a token, and how strong" (accounts refusing tokens that mint
	// tokens) reads it; Authorize decides by the grant itself.
	scope := store.ScopeRead
	switch max(scopeRank(g.ProjectScope), scopeRank(g.RepoScope)) {
	case levelWrite:
		scope = store.ScopeWrite
	case levelAdmin:
		scope = store.ScopeAdmin
	}
	return &Principal{Name: tok.Name, Scope: scope, ResourceToken: g}, nil
}

// scopeRank is the level a stored scope grants; "" and anything unknown
// (a damaged row) grant nothing.
func scopeRank(sc store.Scope) level {
	switch sc {
	case store.ScopeRead:
		return levelRead
	case store.ScopeWrite:
		return levelWrite
	case store.ScopeAdmin:
		return levelAdmin
	}
	return levelNone
}

// authorizeResourceToken decides for a project or repository token: its
// grant on its own resource, NotFound on every other repository and
// project, Forbidden for anything server-wide.
func authorizeResourceToken(p *Principal, res Resource, a Action) error {
	g := p.ResourceToken
	have, notFound, noun := levelNone, msgProjectNotFound, "project"
	switch {
	case res.Repo != nil:
		notFound, noun = msgRepoNotFound, "repository"
		switch {
		case g.RepoID != 0 && res.Repo.ID == g.RepoID:
			have = scopeRank(g.RepoScope)
		case g.ProjectID != 0 && res.Repo.ProjectID == g.ProjectID:
			// PROJECT_X implies REPO_X on the project's repositories, as
			// it does for a user's grant.
			have = max(scopeRank(g.RepoScope), scopeRank(g.ProjectScope))
		}
	case res.Project != nil:
		if g.ProjectID != 0 && res.Project.ID == g.ProjectID {
			have = scopeRank(g.ProjectScope)
		}
	default:
		return problem.New(problem.Forbidden, "a project or repository access token cannot do this")
	}
	switch {
	case have >= level(a):
		return nil
	case have == levelNone:
		return problem.New(problem.NotFound, "%s", notFound)
	default:
		return problem.New(problem.Forbidden, "this access token does not have %s permission on this %s", a, noun)
	}
}
