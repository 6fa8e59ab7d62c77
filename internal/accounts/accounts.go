// Package accounts is the one service that writes users, groups, projects,
// repository metadata, grants, SSH keys and access tokens.
//
// Every transport (REST, web, the admin CLI) and the node's own start-up
// (the first administrator) call it instead of the store, so each rule
// exists once: what a name, a description, a key or a token lifetime may
// be, who may change what, and the wording of the refusal. Before this
// package each transport carried its own copy and the copies drifted (one
// validated e-mail addresses, another did not; one stopped an administrator
// demoting a system administrator, another did not).
//
// Every method takes the acting party first. An Actor is either a caller's
// auth.Principal, whose permission is checked here with auth.Authorize (the
// same single check the git transports use), or the System, which is the
// machine's operator (the admin CLI reads the database directly, so whoever
// runs it already holds everything) or the node bootstrapping itself. The
// System skips the permission checks but never the validation: a project
// key the REST API refuses is refused on the command line too.
//
// Reads stay where they are: transports look resources up in the store and
// hand them here, and this package authorizes the write on the resource it
// is given. A resource a caller may not read is NotFound, exactly as
// Authorize says, so existence does not leak through a write either.
//
// Reviewer resolution (names to users who may read a repository) still
// lives with pull requests; it reads, and moves here when audit events do.
package accounts

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Actor is who asks for a write: a caller (As) or the System.
type Actor struct {
	p      *auth.Principal
	system string
}

// As is the actor for an authenticated (or anonymous) caller; a nil
// principal is anonymous.
func As(p *auth.Principal) Actor {
	if p == nil {
		p = auth.Anonymous()
	}
	return Actor{p: p}
}

// System is the actor for the machine's operator and the node itself; who
// names it in the log ("cli", "bootstrap").
func System(who string) Actor {
	if who == "" {
		who = "system"
	}
	return Actor{system: who}
}

// IsSystem reports whether a is the System.
func (a Actor) IsSystem() bool { return a.system != "" }

// String names the actor for logs; it never holds a secret.
func (a Actor) String() string {
	if a.system != "" {
		return a.system
	}
	if a.p == nil {
		return "anonymous"
	}
	return a.p.String()
}

// userID is the acting user's id, 0 for the System and for callers
// without a user (anonymous, access keys).
func (a Actor) userID() int64 {
	if a.p == nil || a.p.IsAnonymous() {
		return 0
	}
	return a.p.UserID
}

// viaToken reports whether the caller authenticated with an access token.
func (a Actor) viaToken() bool {
	return a.p != nil && (a.p.TokenID != 0 || a.p.Scope != "")
}

// Service applies the rules and writes through the store.
type Service struct {
	st     store.Store
	auth   *auth.Service
	repos  *repo.Manager
	logger *slog.Logger
	now    func() time.Time
}

// New returns the service. repos may be nil for callers that never create,
// fork or delete repositories (their methods then fail).
func New(st store.Store, au *auth.Service, repos *repo.Manager, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{st: st, auth: au, repos: repos, logger: logger.With("component", "accounts"), now: time.Now}
}

// authorize is auth.Authorize for a caller; the System may do anything.
func (s *Service) authorize(ctx context.Context, a Actor, res auth.Resource, act auth.Action) error {
	if a.IsSystem() {
		return nil
	}
	return s.auth.Authorize(ctx, a.p, res, act)
}

// isSysAdmin reports whether a holds SYS_ADMIN (the System does).
func (s *Service) isSysAdmin(ctx context.Context, a Actor) (bool, error) {
	if a.IsSystem() {
		return true, nil
	}
	if a.userID() == 0 {
		return false, nil
	}
	global, _, _, err := s.st.EffectiveGrants(ctx, a.userID(), 0, 0)
	if err != nil {
		return false, err
	}
	return slices.Contains(global, store.PermSysAdmin), nil
}

// isAdmin reports whether a administers the server (the System does).
func (s *Service) isAdmin(ctx context.Context, a Actor) bool {
	return a.IsSystem() || !a.p.IsAnonymous() && s.auth.IsAdmin(ctx, a.p)
}

// signedIn requires a user behind the caller: anonymous callers and access
// keys own no keys or tokens.
func (s *Service) signedIn(ctx context.Context, a Actor) error {
	if a.IsSystem() {
		return nil
	}
	if err := s.authorize(ctx, a, auth.Resource{}, auth.Read); err != nil {
		return err
	}
	if a.userID() == 0 {
		return problem.New(problem.Forbidden, "an access key cannot do this")
	}
	return nil
}

// Lengths Bitbucket allows for free text: names and e-mail addresses 255,
// descriptions 4000.
const (
	maxNameText        = 255
	maxDescriptionText = 4000
)

// checkText checks free text shown to people: a length cap, valid UTF-8,
// no control characters but tab (descriptions are pasted from elsewhere).
func checkText(field, v string, maxLen int) error {
	if len(v) > maxLen {
		return problem.New(problem.Invalid, "%s must be at most %d bytes long", field, maxLen)
	}
	if !utf8.ValidString(v) {
		return problem.New(problem.Invalid, "%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) && r != '\t' {
			return problem.New(problem.Invalid, "%s must not contain control characters", field)
		}
	}
	return nil
}

// checkEmail accepts "" (no address) or something shaped like one; the
// address is shown and used for notifications, never for a login.
func checkEmail(e string) error {
	if e == "" {
		return nil
	}
	if err := checkText("e-mail address", e, maxNameText); err != nil {
		return err
	}
	local, domain, ok := strings.Cut(e, "@")
	if !ok || local == "" || domain == "" || strings.ContainsAny(e, " <>") {
		return problem.New(problem.Invalid, "%s is not an e-mail address", quoteShort(e))
	}
	return nil
}

// quoteShort quotes v for a message, cut so that a megabyte of garbage
// does not end up in an error body.
func quoteShort(v string) string {
	const max = 64
	if len(v) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", v[:cut])
	}
	return fmt.Sprintf("%q", v)
}
