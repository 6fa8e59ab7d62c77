// Package api is Sluice's REST API: JSON over HTTP under /rest/, with
// Bitbucket Data Center's paths, field names and paging so that scripts and
// tools written for Bitbucket work against Sluice unchanged.
//
// The design rests on one route table (routes.go). Every entry names the
// method, the ServeMux pattern, a summary, the query parameters and the
// handler. New registers the table on a net/http ServeMux (Go 1.22 method
// and wildcard patterns) and the same table generates the OpenAPI document
// served at /rest/api/1.0/openapi.json, so the document cannot drift from
// what is actually served.
//
// Every handler runs inside one wrapper that authenticates the caller
// (auth.AuthenticateHTTP) and turns a returned error into Bitbucket's error
// body {"errors":[{"context","message","exceptionName"}]} with the status of
// its problem.Kind. Handlers never write errors themselves, and every one of
// them asks auth.Authorize before it reads or changes anything, through the
// helpers in access.go: a repository the caller may not read answers exactly
// like a missing one (404, or 401 for an anonymous caller in both cases), and
// listings silently leave out what the caller may not see.
//
// Git is reached only through internal/repo's read helpers and, for ref
// changes (branches, tags), through internal/gitcmd with the environment
// hooks.Server.Register hands out, so that the reference-transaction hook
// bumps the refs generation exactly as it does for a push. A commit named
// by a caller is served only when it is reachable from the repository's
// own refs: a fork shares its origin's object store, and must not become a
// window onto objects its own refs never pointed at.
//
// Request bodies are JSON, capped at 1 MiB, with unknown fields ignored and
// strings holding booleans or numbers read into boolean and numeric fields
// (coerce.go), as Bitbucket's Jackson does. Lists page with start and limit
// (default 25, at most 1000) and answer {size, limit, start, isLastPage,
// values, nextPageStart}; a filter Sluice takes and cannot use is a 400
// naming it, a parameter it does not know is ignored, as in Bitbucket.
//
// Every route under /rest/{family}/1.0/ also answers under
// /rest/{family}/latest/, and every path with a trailing slash
// (alias.go); the route table and the OpenAPI document list each once.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// Deps is what the API needs from the rest of the node.
type Deps struct {
	Store store.Store
	Auth  *auth.Service
	// Accounts makes every change to users, groups, projects, repository
	// settings, grants, SSH keys and tokens.
	Accounts *accounts.Service
	Repos    *repo.Manager
	Git      *gitcmd.Runner
	Hooks    *hooks.Server
	Logger   *slog.Logger
	// BaseURL is how users reach this server over HTTP, without a trailing
	// slash; it prefixes self and clone links.
	BaseURL string
	// SSHBaseURL prefixes SSH clone links ("ssh://git@host:7999"); empty
	// leaves the SSH link out.
	SSHBaseURL string
	// Throttle backs the throttling admin endpoints (throttle.go); nil
	// leaves them out.
	Throttle Throttle
	// PackCache backs the SCM cache admin endpoints (cache.go); nil leaves
	// them out.
	PackCache PackCache
	// Pulls serves pull requests and build statuses
	// (pulls*.go); nil leaves those routes out.
	Pulls *pull.Service
	// Webhooks serves repository webhooks (webhooks.go); nil leaves
	// those routes out.
	Webhooks *webhook.Service
	// BranchPerms serves branch permissions (pulls_admin.go), among the
	// pull request routes; nil leaves those routes out.
	BranchPerms *branchperm.Service
	// Notify serves the inbox (inbox.go), among the pull request routes;
	// nil answers an empty inbox.
	Notify *notify.Service
	// Cluster backs the cluster status endpoint (cluster.go); nil leaves
	// it out.
	Cluster ClusterStatus
}

// maxBodyBytes caps a JSON request body. The largest legitimate body (a
// tag message) is far below it; Bitbucket's own limit is in the same range.
const maxBodyBytes = 1 << 20

// server is the API's state: the dependencies and the route table.
type server struct {
	Deps
	logger *slog.Logger
	routes []route
	mux    *http.ServeMux
}

// New returns the API handler. The app mounts it at /rest/ without
// stripping the prefix: the patterns are the full Bitbucket paths.
func New(d Deps) http.Handler {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	d.BaseURL = strings.TrimRight(d.BaseURL, "/")
	d.SSHBaseURL = strings.TrimRight(d.SSHBaseURL, "/")
	s := &server{Deps: d, logger: d.Logger.With("component", "api"), mux: http.NewServeMux()}
	s.routes = append(append(s.routeTable(), s.throttleRoutes()...), s.cacheRoutes()...)
	s.routes = append(s.routes, s.clusterRoutes()...)
	s.routes = append(s.routes, s.sshKeyRoutes()...)
	s.routes = append(s.routes, s.accountRoutes()...) // accountroutes.go
	if d.Pulls != nil {
		s.routes = append(append(s.routes, s.pullRoutes()...), s.pullAdminRoutes()...)
		s.routes = append(s.routes, s.inboxRoutes()...)
		s.routes = append(s.routes, s.webhookRoutes()...)
	}
	s.routes = canonicalRoutes(append(s.routes, s.discoveryRoutes()...))
	for _, rt := range s.routes {
		h := s.wrap(rt)
		for _, p := range patterns(rt) { // the pattern and its latest alias (alias.go)
			s.mux.Handle(rt.Method+" "+p, h)
		}
	}
	// Anything else under /rest/ still answers in the API's error shape.
	s.mux.HandleFunc("/rest/", s.unmatched)
	return stripTrailingSlash(s.mux)
}

// unmatched answers 405 when the path exists for another method, 404
// otherwise.
func (s *server) unmatched(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/rest/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeError(w, r, &problem.Error{Kind: problem.Invalid, Message: fmt.Sprintf("method %s is not allowed here", r.Method)}, http.StatusMethodNotAllowed)
		return
	}
	s.writeError(w, r, problem.New(problem.NotFound, "no such resource"), 0)
}

// call is one request in flight.
type call struct {
	s   *server
	w   *trackingWriter
	r   *http.Request
	ctx context.Context
	p   *auth.Principal
}

// trackingWriter remembers whether the response has started, so an error
// after streaming began is logged instead of corrupting the body.
type trackingWriter struct {
	http.ResponseWriter
	started bool
}

func (t *trackingWriter) WriteHeader(code int) {
	t.started = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.started = true
	return t.ResponseWriter.Write(b)
}

func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (s *server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		p, err := s.Auth.AuthenticateHTTP(r)
		if err != nil {
			s.writeError(tw, r, err, 0)
			return
		}
		c := &call{s: s, w: tw, r: r, ctx: r.Context(), p: p}
		if err := rt.handle(c); err != nil {
			if tw.started {
				s.logger.Warn("request failed after the response started",
					"method", r.Method, "path", r.URL.Path, "principal", p.String(), "err", err)
				return
			}
			s.writeError(tw, r, err, 0)
		}
	})
}

// errorBody is Bitbucket's error document.
type errorBody struct {
	Errors []errorEntry `json:"errors"`
}

type errorEntry struct {
	Context       *string `json:"context"`
	Message       string  `json:"message"`
	ExceptionName *string `json:"exceptionName"`
}

// writeError answers err in Bitbucket's shape. status overrides the Kind's
// status when not 0. Internal errors are logged with their cause and shown
// as a generic message.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error, status int) {
	kind := problem.KindOf(err)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		kind = problem.TooLarge
		err = problem.Wrap(problem.TooLarge, err, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
	}
	if status == 0 {
		status = kind.HTTPStatus()
	}
	if kind == problem.Internal {
		s.logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	h := w.Header()
	// A streaming handler may have announced a download before failing.
	h.Del("Content-Disposition")
	switch kind {
	case problem.Unauthenticated:
		h.Set("WWW-Authenticate", `Basic realm="Sluice", charset="UTF-8"`)
	case problem.Throttled, problem.Unavailable:
		if ra := problem.RetryAfter(err); ra > 0 {
			h.Set("Retry-After", strconv.Itoa(ra))
		}
	}
	writeJSONStatus(w, status, errorBody{Errors: []errorEntry{{Message: problem.Message(err)}}})
}

// setJSONHeaders sets the headers of every JSON response.
func setJSONHeaders(h http.Header) {
	h.Set("Content-Type", "application/json;charset=UTF-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache, no-store")
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	setJSONHeaders(w.Header())
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v) // a client gone away is not our error
}

// json writes v with status 200.
func (c *call) json(v any) error {
	writeJSONStatus(c.w, http.StatusOK, v)
	return nil
}

// rawJSON writes a JSON body made beforehand with status 200 and the same
// headers as json, plus its length.
func (c *call) rawJSON(body []byte) error {
	setJSONHeaders(c.w.Header())
	c.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(body) // a client gone away is not our error
	return nil
}

// jsonStatus writes v with status.
func (c *call) jsonStatus(status int, v any) error {
	writeJSONStatus(c.w, status, v)
	return nil
}

// noContent answers 204.
func (c *call) noContent() error {
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// decode reads the JSON body into v. An empty body leaves v as it is when
// optional, and is an error otherwise.
func (c *call) decode(v any, optional bool) error {
	body := http.MaxBytesReader(c.w, c.r.Body, maxBodyBytes)
	data, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return problem.New(problem.TooLarge, "request body larger than %d bytes", maxBodyBytes)
		}
		return problem.Wrap(problem.Invalid, err, "could not read the request body")
	}
	if strings.TrimSpace(string(data)) == "" {
		if optional {
			return nil
		}
		return problem.New(problem.Invalid, "a JSON request body is required")
	}
	err = json.Unmarshal(data, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Value == "string" {
		// Jackson's leniency, as Bitbucket's clients expect (coerce.go).
		if fixed, ok := coerceJSON(data, reflect.TypeOf(v)); ok {
			err = json.Unmarshal(fixed, v)
		}
	}
	if err != nil {
		if errors.As(err, &te) && te.Field != "" {
			return problem.Wrap(problem.Invalid, err, fmt.Sprintf("invalid JSON request body: field %q has the wrong type", te.Field))
		}
		return problem.Wrap(problem.Invalid, err, "invalid JSON request body")
	}
	return nil
}

// query returns a query parameter.
func (c *call) query(name string) string { return c.r.URL.Query().Get(name) }

// path returns a path wildcard's value.
func (c *call) path(name string) string { return c.r.PathValue(name) }
