// Package auth decides who a caller is and what they may do.
//
// Authentication turns credentials into a Principal: a password or an
// access token over HTTP (Basic or Bearer, see AuthenticateHTTP), or an SSH
// public key (PublicKey), which is either a user's key or an access key bound
// to one repository. No credentials at all give the anonymous principal, so
// public repositories stay readable without an account.
//
// Authorization is one function, Authorize, that every transport calls with
// the principal, the resource (a repository, a project, or global) and the
// action (Read, Write, Admin). Having exactly one check is the point: an
// authorization bug that exists on one route but not on its twin (protocol
// v0 vs v2, Basic vs Bearer, HTTP vs SSH) cannot happen if both routes ask
// the same question. The rules are Bitbucket's:
//
//   - global ADMIN and SYS_ADMIN may do everything;
//   - PROJECT_ADMIN ⊇ PROJECT_WRITE ⊇ PROJECT_READ, and each implies the same
//     level on every repository of the project;
//   - REPO_ADMIN ⊇ REPO_WRITE ⊇ REPO_READ;
//   - a public repository, or any repository of a public project, is
//     readable by anyone, including anonymous callers;
//   - a disabled or deleted user is treated as anonymous;
//   - an access token's scope caps the action (read < write < admin);
//   - an SSH access key reaches its one repository, within its scope, and
//     nothing else.
//   - a project or repository HTTP access token reaches its project (and
//     the project's repositories) or its repository, within its grant,
//     and nothing else (resourcetoken.go).
//
// A caller who may not read a resource gets NotFound, exactly as if it did
// not exist, so private names do not leak; an anonymous caller gets
// Unauthenticated instead, which makes git prompt for credentials. A caller
// who may read but not do more gets Forbidden.
//
// There is deliberately no permission cache: the admin CLI writes to the same
// database while servers run, and a revoked grant must take effect on the
// next request. Every Authorize reads the principal's grants with one
// EffectiveGrants round trip (plus a primary-key read of the user, so that a
// user disabled after authenticating loses access at once).
//
// The one exception is a database outage: with auth.outage_grace set, a
// caller whose credentials and repository read were confirmed by the
// database within the grace keeps them while the store answers
// Unavailable, so a node can go on serving clones from its pack cache
// (grace.go). The grace is consulted only when the store cannot answer,
// holds HMACs of credentials rather than secrets, and never covers writes.
//
// Secrets are never logged: passwords are hashed with argon2id, token
// secrets are stored as their SHA-256, and Principal.String names a user or
// a key id only.
package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/store"
)

// Principal is an authenticated (or anonymous) caller.
type Principal struct {
	UserID    int64
	Name      string // the user's canonical login name
	Anonymous bool
	// TokenID is set when the caller authenticated with an access token.
	TokenID int64
	// Scope caps what the principal may do. "" means a full session
	// (password or SSH user key); tokens and access keys carry their scope.
	Scope store.Scope
	// AccessKeyID and AccessKeyRepoID are set for an SSH access key, which
	// belongs to a repository rather than a user.
	AccessKeyID, AccessKeyRepoID int64
	// ResourceToken is set for a project or repository HTTP access token,
	// which belongs to that resource rather than a user (resourcetoken.go).
	ResourceToken *ResourceTokenGrant
}

// Anonymous is the principal of a caller who gave no credentials.
func Anonymous() *Principal { return &Principal{Anonymous: true} }

// IsAnonymous reports whether p carries no identity at all.
func (p *Principal) IsAnonymous() bool {
	return p == nil || p.Anonymous || (p.UserID == 0 && p.AccessKeyID == 0 && p.AccessKeyRepoID == 0 && p.ResourceToken == nil)
}

// isAccessKey reports whether p is an SSH access key. Either field makes
// it one, so a half-filled principal is held to the narrower rules.
func (p *Principal) isAccessKey() bool {
	return !p.IsAnonymous() && (p.AccessKeyID != 0 || p.AccessKeyRepoID != 0)
}

// String names the principal for logs. It never contains a secret.
func (p *Principal) String() string {
	switch {
	case p.IsAnonymous():
		return "anonymous"
	case p.ResourceToken != nil:
		return p.ResourceToken.String()
	case p.isAccessKey():
		return fmt.Sprintf("accesskey:%d", p.AccessKeyID)
	case p.TokenID != 0:
		return fmt.Sprintf("%s (token:%d)", p.Name, p.TokenID)
	default:
		return p.Name
	}
}

// Action is what a principal wants to do to a resource. Actions are
// ordered: Admin implies Write implies Read.
type Action int

const (
	Read Action = iota + 1
	Write
	Admin
)

func (a Action) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case Admin:
		return "admin"
	default:
		return fmt.Sprintf("action(%d)", int(a))
	}
}

// Resource is what an action applies to: a repository (Project may be set
// too, to spare a lookup of whether the project is public), a project, or,
// with both nil, the whole server. On the whole server Read means "any
// signed-in user", Write means creating projects (PROJECT_CREATE) and Admin
// means global administration.
type Resource struct {
	Repo    *store.Repository
	Project *store.Project
}

// Service authenticates callers and authorizes their actions against the
// store.
type Service struct {
	st     store.Store
	logger *slog.Logger

	attempts *prometheus.CounterVec

	// verify checks a password against a hash. It is a field so tests can
	// observe that unknown users still cost one verification.
	verify func(hash, pw string) bool
	now    func() time.Time

	// touched remembers when a token or key was last recorded as used, so
	// a busy client costs the database one write a minute, not one per
	// request. It holds timestamps only, never permissions.
	touchMu sync.Mutex
	touched map[touchKey]time.Time

	verified *verifiedCache
	grace    *outageGrace // grace.go
}

type touchKey struct {
	key bool // false: access token, true: SSH key
	id  int64
}

// touchInterval bounds how often last-used times are written per token or
// key; the listing shows minutes at best, so finer is wasted writes.
const touchInterval = time.Minute

// New returns a Service reading from st. Metrics are registered on reg
// when it is not nil.
func New(st store.Store, logger *slog.Logger, reg prometheus.Registerer) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		st:       st,
		logger:   logger.With("component", "auth"),
		verify:   VerifyPassword,
		now:      time.Now,
		touched:  make(map[touchKey]time.Time),
		verified: newVerifiedCache(),
		grace:    newOutageGrace(0),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_auth_attempts_total",
			Help: "Authentication attempts by method (password, token, publickey) and outcome (success, failure, error).",
		}, []string{"method", "outcome"}),
	}
	// Compute the dummy hash now rather than on the first unknown user,
	// whose login would otherwise take twice as long as any other.
	dummyHash()
	if reg != nil {
		if err := reg.Register(s.attempts); err != nil {
			// Several services on one registry (tests, or a second
			// construction in app) share the first collector.
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(fmt.Sprintf("register auth metrics: %v", err))
			}
			s.attempts = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return s
}

const (
	methodPassword  = "password"
	methodToken     = "token"
	methodPublicKey = "publickey"

	outcomeSuccess = "success"
	outcomeFailure = "failure"
	outcomeError   = "error"
)

func (s *Service) count(method string, err error) {
	outcome := outcomeSuccess
	if err != nil {
		outcome = outcomeFailure
		if !isDenial(err) {
			outcome = outcomeError
		}
	}
	s.attempts.WithLabelValues(method, outcome).Inc()
}

// shouldTouch reports whether the last-used time of k is due for a write,
// and if so records now as the last write.
func (s *Service) shouldTouch(k touchKey, now time.Time) bool {
	s.touchMu.Lock()
	defer s.touchMu.Unlock()
	if last, ok := s.touched[k]; ok && now.Sub(last) < touchInterval {
		return false
	}
	// Entries older than the interval are useless; drop them once the map
	// grows so it stays bounded by the number of recently used credentials.
	if len(s.touched) >= 4096 {
		for key, last := range s.touched {
			if now.Sub(last) >= touchInterval {
				delete(s.touched, key)
			}
		}
	}
	s.touched[k] = now
	return true
}
