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

// Token secrets are "sluice_" followed by 32 random bytes in unpadded
// base64url: 256 bits, so guessing is hopeless and the store can keep a
// plain SHA-256 (no salt or slow hash is needed for a random secret). The
// prefix lets secret scanners and AuthenticateHTTP recognise a token.
const (
	tokenPrefix      = "sluice_"
	tokenRandomBytes = 32
	tokenSecretLen   = len(tokenPrefix) + (tokenRandomBytes*8+5)/6
	maxTokenNameLen  = 100
	msgBadToken      = "invalid or expired token"
)

// CreateToken creates an access token for userID and returns its secret,
// which is shown once and never stored, and the stored token.
func (s *Service) CreateToken(ctx context.Context, userID int64, name string, scope store.Scope, expiresAt *time.Time) (string, *store.Token, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > maxTokenNameLen || !utf8.ValidString(name) ||
		strings.ContainsFunc(name, unicode.IsControl) {
		return "", nil, problem.New(problem.Invalid, "token name must be 1 to %d printable characters", maxTokenNameLen)
	}
	switch scope {
	case store.ScopeRead, store.ScopeWrite, store.ScopeAdmin:
	default:
		return "", nil, problem.New(problem.Invalid, "token scope must be read, write or admin, not %q", scope)
	}
	now := s.now()
	if expiresAt != nil && !expiresAt.After(now) {
		return "", nil, problem.New(problem.Invalid, "token expiry must be in the future")
	}
	raw := make([]byte, tokenRandomBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, fmt.Errorf("create token: %w", err)
	}
	secret := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	tok := &store.Token{
		UserID:    userID,
		Name:      name,
		Hash:      sum[:],
		Scope:     scope,
		CreatedAt: now,
		ExpiresAt: expiresAt,
	}
	if err := s.st.CreateToken(ctx, tok); err != nil {
		return "", nil, fmt.Errorf("create token: %w", err)
	}
	s.logger.Info("token created", "user_id", userID, "token_id", tok.ID, "scope", string(scope))
	return secret, tok, nil
}

// looksLikeToken reports whether s has the exact shape of a token secret.
func looksLikeToken(s string) bool {
	if len(s) != tokenSecretLen || !strings.HasPrefix(s, tokenPrefix) {
		return false
	}
	for _, c := range s[len(tokenPrefix):] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Token authenticates an access token secret. An unknown, malformed,
// expired or revoked token, or one whose user is disabled or deleted, gives
// the same Unauthenticated error.
func (s *Service) Token(ctx context.Context, secret string) (*Principal, error) {
	if strings.HasPrefix(secret, resourceTokenPrefix) {
		p, err := s.resourceToken(ctx, secret)
		p, err = s.withGrace(methodToken, s.grace.credential(methodToken, []byte(secret)), p, err)
		s.count(methodToken, err)
		return p, err
	}
	p, err := s.token(ctx, secret)
	p, err = s.withGrace(methodToken, s.grace.credential(methodToken, []byte(secret)), p, err)
	s.count(methodToken, err)
	return p, err
}

func (s *Service) token(ctx context.Context, secret string) (*Principal, error) {
	fail := problem.New(problem.Unauthenticated, msgBadToken)
	if !looksLikeToken(secret) {
		return nil, fail
	}
	sum := sha256.Sum256([]byte(secret))
	tok, err := s.st.TokenByHash(ctx, sum[:])
	if problem.Is(err, problem.NotFound) {
		s.logger.Info("token login failed", "reason", "unknown token")
		return nil, fail
	}
	if err != nil {
		return nil, fmt.Errorf("token login: read token: %w", err)
	}
	now := s.now()
	switch {
	case tok.RevokedAt != nil:
		s.logger.Info("token login failed", "token_id", tok.ID, "reason", "revoked")
		return nil, fail
	case tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt):
		s.logger.Info("token login failed", "token_id", tok.ID, "reason", "expired")
		return nil, fail
	}
	u, err := s.st.UserByID(ctx, tok.UserID)
	if problem.Is(err, problem.NotFound) {
		s.logger.Info("token login failed", "token_id", tok.ID, "reason", "user deleted")
		return nil, fail
	}
	if err != nil {
		return nil, fmt.Errorf("token login: read user: %w", err)
	}
	if !u.Active {
		s.logger.Info("token login failed", "token_id", tok.ID, "user", u.Name, "reason", "user disabled")
		return nil, fail
	}
	if s.shouldTouch(touchKey{id: tok.ID}, now) {
		// Last-used is informational: failing to record it must not
		// refuse an otherwise valid token.
		if err := s.st.TouchToken(ctx, tok.ID, now); err != nil {
			s.logger.Warn("record token use", "token_id", tok.ID, "err", err)
		}
	}
	scope := tok.Scope
	if scope == "" {
		// An empty scope would read as a full session; a token never is.
		scope = store.ScopeRead
	}
	return &Principal{UserID: u.ID, Name: u.Name, TokenID: tok.ID, Scope: scope}, nil
}
