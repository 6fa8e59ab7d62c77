// Package web is Sluice's browser interface: server-rendered HTML pages for
// signing in, browsing projects and repositories, reviewing and merging pull
// requests, managing one's account and administering the server.
//
// # Design
//
// Every page is rendered on the server with html/template from templates
// embedded in the binary, with one stylesheet and one small plain
// JavaScript file (copy buttons, keyboard shortcuts, the diff view toggle)
// also embedded: there is no build step, no CDN and no request leaves the
// server. Pages work without JavaScript; the script only adds comfort.
//
// The web UI is a transport like the REST API and uses the same services:
// the store for metadata, auth.Authorize for every decision, the read
// helpers of internal/repo for git data (never a git command of its own),
// and the pull request service for reviews. Lookups of a project or a
// repository go through one helper (access.go) that answers a missing and a
// forbidden resource with the same 404 page, so a private repository's
// existence does not leak.
//
// Sessions live in the database (store.SessionStore) so any node of a
// cluster serves any browser. The cookie holds 32 random bytes; only their
// SHA-256 is stored. The cookie is HttpOnly, SameSite=Lax and Secure when
// the request came over HTTPS. Each session has a CSRF token that every
// form carries in a hidden field; every POST is checked against it (and
// against the browser's Sec-Fetch-Site/Origin headers), and no GET changes
// anything. Forms shown before signing in (the sign-in form itself) use a
// double-submit token kept in a separate cookie.
//
// Every response carries a strict Content-Security-Policy (no inline script
// or style, nothing from another origin), X-Frame-Options DENY,
// X-Content-Type-Options nosniff and a Referrer-Policy. User content is
// escaped by html/template; Markdown goes through goldmark and then
// bluemonday's UGC policy; raw files are served as attachments or as
// text/plain under a sandboxing CSP, so an SVG or HTML file in a
// repository never runs script in Sluice's origin.
//
// Everything a page shows is bounded: listings page, files and diffs are
// read with a byte cap and degrade to "too large to show" with a link to
// the raw file, and syntax highlighting is skipped past a size where it
// would cost more than the page budget (100 ms).
package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/packcache"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// Cluster is what the admin page shows of the cluster registry.
type Cluster interface {
	// Nodes lists the registered nodes, live and gone.
	Nodes(ctx context.Context) ([]store.Node, error)
	// Self is this node's id ("" before it registered): the registry has
	// no load column, so the page shows load for this node only, from
	// the Throttle's state.
	Self() string
}

// Cache is what the admin page shows and does with the SCM cache
// (packcache.Cache satisfies it).
type Cache interface {
	Stats() packcache.Stats
	ClearRepo(repoID int64) (entries int, bytes int64)
}

// Throttle is admission control (throttle.Throttle satisfies it): the
// admin page shows its state, and every page request is charged to the
// caller's rate-limit bucket as REST requests are.
type Throttle interface {
	State() throttle.State
	RateLimit(ctx context.Context, p *auth.Principal, remote string) error
}

// Jobs is what the admin page shows of the background job queue
// (*jobs.Queue satisfies it).
type Jobs interface {
	Stats(ctx context.Context) ([]jobs.KindStats, error)
}

// Deps is what the web UI needs from the rest of the node.
type Deps struct {
	Store    store.Store
	Sessions store.SessionStore
	Auth     *auth.Service
	// Accounts makes every change to users, groups, projects, repository
	// settings, grants, SSH keys and tokens.
	Accounts *accounts.Service
	Repos    *repo.Manager
	Logger   *slog.Logger
	// BaseURL is how users reach this server over HTTP, without a trailing
	// slash; it prefixes HTTP clone URLs. Empty: taken from the request.
	BaseURL string
	// SSHBaseURL prefixes SSH clone URLs ("ssh://git@host:7999"); empty
	// leaves SSH out.
	SSHBaseURL string
	Version    string
	// Optional services: nil hides their admin section ("not enabled").
	Cluster  Cluster
	Cache    Cache
	Throttle Throttle
	Jobs     Jobs
	// Pulls is the pull request service; nil hides pull requests.
	Pulls *pull.Service
	// BranchPerms lists branch permissions on a repository's pull
	// request settings page; set it with Pulls.
	BranchPerms *branchperm.Service
	// Notify is the dashboard's inbox; nil shows it empty.
	Notify *notify.Service
	// SessionTTL is how long an idle session lives; 0 means 7 days.
	SessionTTL time.Duration
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
}

// server is the web UI's state.
type server struct {
	Deps
	logger *slog.Logger
	mux    *http.ServeMux
	pages  *pages
	assets *assets
	// highlights caches syntax highlighting (hlcache.go).
	highlights *highlighter
}

// New returns the web UI handler, to be mounted at "/".
func New(d Deps) (http.Handler, error) {
	if d.Store == nil || d.Sessions == nil || d.Auth == nil || d.Repos == nil {
		return nil, errors.New("web: store, sessions, auth and repos are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.SessionTTL <= 0 {
		d.SessionTTL = 7 * 24 * time.Hour
	}
	d.BaseURL = strings.TrimRight(d.BaseURL, "/")
	d.SSHBaseURL = strings.TrimRight(d.SSHBaseURL, "/")
	s := &server{Deps: d, logger: d.Logger.With("component", "web"), mux: http.NewServeMux(),
		highlights: newHighlighter(highlightCacheBytes)}
	var err error
	if s.assets, err = loadAssets(); err != nil {
		return nil, err
	}
	if s.pages, err = parsePages(s.assets); err != nil {
		return nil, err
	}
	s.routes()
	return s.secure(s.mux), nil
}

// handler is a page handler: it writes the page or returns an error that
// the wrapper renders as an error page.
type handler func(c *call) error

// call is one request in flight.
type call struct {
	s    *server
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	p    *auth.Principal
	user *store.User    // nil when anonymous
	sess *store.Session // nil when anonymous
	// csrf is the token forms of this response carry.
	csrf string
	// wrote is set once the response has started.
	wrote bool
}

func (c *call) signedIn() bool { return c.user != nil }

// page wraps h: it loads the session, checks CSRF on POST, and renders a
// returned error.
func (s *server) page(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{s: s, w: w, r: r, ctx: r.Context(), p: auth.Anonymous()}
		if err := s.loadSession(c); err != nil {
			s.renderError(c, err)
			return
		}
		if s.Throttle != nil {
			if err := s.Throttle.RateLimit(c.ctx, c.p, r.RemoteAddr); err != nil {
				s.renderError(c, err)
				return
			}
		}
		if r.Method == http.MethodPost {
			if err := s.checkCSRF(c); err != nil {
				s.renderError(c, err)
				return
			}
		}
		if err := h(c); err != nil {
			if c.wrote {
				s.logger.Warn("request failed after the response started", "method", r.Method, "path", r.URL.Path, "err", err)
				return
			}
			s.renderError(c, err)
		}
	})
}

// query reads a query parameter.
func (c *call) query(name string) string { return c.r.URL.Query().Get(name) }

// form reads a posted form field (the body is capped by the wrapper).
func (c *call) form(name string) string { return strings.TrimSpace(c.r.PostFormValue(name)) }

// start reads the "start" paging parameter; nonsense means the first page.
func (c *call) start() int {
	n, err := strconv.Atoi(c.query("start"))
	if err != nil || n < 0 {
		return 0
	}
	// Deep pages cost a git --skip walk; the cap keeps one request bounded.
	return min(n, 1_000_000)
}

// redirect answers a POST with 303 See Other, so a reload does not repost.
func (c *call) redirect(to string) error {
	c.wrote = true
	http.Redirect(c.w, c.r, to, http.StatusSeeOther)
	return nil
}

// flash redirects with a short confirmation shown on the next page. Only a
// code travels in the URL, so nobody can make Sluice display text of their
// choosing through a crafted link.
func (c *call) flash(to, msg string) error {
	sep := "?"
	if strings.Contains(to, "?") {
		sep = "&"
	}
	return c.redirect(to + sep + "flash=" + urlQueryEscape(msg))
}

// requireUser sends an anonymous visitor to the sign-in page and refuses
// access keys, which have no session anyway.
func (c *call) requireUser() error {
	if !c.signedIn() {
		return errSignIn
	}
	return nil
}

// errSignIn asks the error renderer to redirect to the sign-in page.
var errSignIn = problem.New(problem.Unauthenticated, "sign in to continue")

// requireAdmin allows only global administrators.
func (c *call) requireAdmin() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	if !c.s.Auth.IsAdmin(c.ctx, c.p) {
		// Admin pages are not secret; saying so helps.
		return problem.New(problem.Forbidden, "only administrators can see this page")
	}
	return nil
}

// renderError renders err as an error page with the status of its kind.
func (s *server) renderError(c *call, err error) {
	kind := problem.KindOf(err)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		kind, err = problem.TooLarge, problem.New(problem.TooLarge, "the form is larger than %d bytes", tooBig.Limit)
	}
	if kind == problem.Unauthenticated && c.r.Method == http.MethodGet {
		if c.signedIn() {
			// A signed-in user asked for something that needs more: hide
			// it like a missing page.
			kind = problem.NotFound
		} else if errors.Is(err, errSignIn) {
			c.wrote = true
			http.Redirect(c.w, c.r, "/login?next="+urlQueryEscape(c.r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
	}
	status := kind.HTTPStatus()
	data := errorPage{Title: "Something went wrong", Message: "An unexpected error occurred; it has been logged."}
	switch kind {
	case problem.NotFound, problem.Unauthenticated:
		// One page for missing and for not allowed: existence must not
		// leak. An anonymous visitor is offered the sign-in link.
		status = http.StatusNotFound
		data = errorPage{Title: "Page not found", Message: "There is nothing here, or you do not have access to it."}
	case problem.Forbidden:
		data = errorPage{Title: "Not allowed", Message: problem.Message(err)}
	case problem.Invalid, problem.Conflict, problem.TooLarge:
		data = errorPage{Title: "That did not work", Message: problem.Message(err)}
	case problem.Throttled:
		data = errorPage{Title: "Too many requests", Message: "The server is busy with your earlier requests. Please wait a moment and try again."}
		retryAfter(c.w, err, 10)
	case problem.Unavailable:
		data = errorPage{Title: "Temporarily unavailable", Message: "The server cannot answer right now. Please try again in a little while."}
		retryAfter(c.w, err, 5)
	default:
		s.logger.Error("page failed", "method", c.r.Method, "path", c.r.URL.Path, "err", err)
	}
	if kind == problem.Throttled {
		throttle.SetHeaders(c.w.Header(), err)
	}
	data.Status = status
	c.w.Header().Del("Content-Disposition")
	s.render(c, status, "error", data.Title, data)
}

// retryAfter sets Retry-After from err's hint, or def seconds.
func retryAfter(w http.ResponseWriter, err error, def int) {
	n := problem.RetryAfter(err)
	if n <= 0 {
		n = def
	}
	w.Header().Set("Retry-After", strconv.Itoa(n))
}

type errorPage struct {
	Status         int
	Title, Message string
}

// notFound is the one 404 error for anything hidden or missing.
func notFound() error { return problem.New(problem.NotFound, "not found") }
