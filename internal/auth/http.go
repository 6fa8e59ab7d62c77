package auth

import (
	"net/http"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
)

// TokenUserName is the user name that says "the password is a token"
// without naming the token's owner, as Bitbucket's x-token-auth does; it
// suits CI systems that only know a token.
const TokenUserName = "x-token-auth"

// AuthenticateHTTP authenticates the credentials of an HTTP request:
//
//   - no Authorization header: the anonymous principal;
//   - Basic with a user name and password;
//   - Basic with a user name and an access token as the password (the token
//     must belong to that user), or x-token-auth and a token;
//   - Bearer with an access token.
//
// A project or repository access token is accepted wherever a personal
// token is, and over Basic with any user name: it belongs to no user.
//
// A token gives the same principal, with the same scope, whichever way it
// arrives, so Basic and Bearer cannot be told apart by Authorize. Malformed
// or wrong credentials give Unauthenticated; they never fall back to
// anonymous, which would turn a typo into a confusing "not found".
func (s *Service) AuthenticateHTTP(r *http.Request) (*Principal, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return &Principal{Anonymous: true}, nil
	}
	malformed := problem.New(problem.Unauthenticated, "malformed authorization header")
	if len(values) > 1 {
		return nil, malformed
	}
	scheme, rest, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	ctx := r.Context()
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		secret := strings.TrimSpace(rest)
		if secret == "" {
			return nil, malformed
		}
		return s.Token(ctx, secret)
	case strings.EqualFold(scheme, "Basic"):
		user, pass, ok := r.BasicAuth()
		if !ok || user == "" {
			return nil, malformed
		}
		// A project or repository token belongs to no user, so whatever
		// user name comes with it names nobody (CI tools fill in one).
		if strings.EqualFold(user, TokenUserName) || looksLikeResourceToken(pass) {
			return s.Token(ctx, pass)
		}
		// A password with the exact shape of a token is taken as one: a
		// person's password colliding with that shape is not plausible,
		// and trying both would double the work of every failed attempt.
		if looksLikeToken(pass) {
			p, err := s.token(ctx, pass)
			if err == nil && !strings.EqualFold(p.Name, user) {
				s.logger.Info("token login failed", "token_id", p.TokenID, "user", user, "reason", "token belongs to another user")
				p, err = nil, problem.New(problem.Unauthenticated, msgBadToken)
			}
			s.count(methodToken, err)
			return p, err
		}
		return s.Password(ctx, user, pass)
	default:
		return nil, problem.New(problem.Unauthenticated, "unsupported authorization scheme; use Basic or Bearer")
	}
}
