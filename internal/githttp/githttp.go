// Package githttp is Git's smart HTTP transport: a thin layer that parses
// the route and the protocol version, authenticates the caller and hands the
// operation to hosting, which authorizes, admits and runs git.
//
// Routes, below the mount point /scm/ (project keys match in any case, the
// ".git" suffix is optional):
//
//	GET  /scm/{project}/{repo}.git/info/refs?service=git-upload-pack|git-receive-pack
//	POST /scm/{project}/{repo}.git/git-upload-pack
//	POST /scm/{project}/{repo}.git/git-receive-pack
//
// Everything else is 404; the dumb HTTP protocol (files served straight out
// of the repository) is deliberately absent, because it would bypass every
// check hosting makes. Path segments are validated with the store's name
// rules before anything else happens, and any percent-escape in them is
// refused outright: no request path ever reaches the disk, since hosting
// finds repositories by id.
//
// Errors must be something git prints. git shows the text/plain body of a
// failed GET info/refs ("remote: …") but only "RPC failed; HTTP 503" for a
// failed POST, so a POST that fails before git wrote anything is answered
// 200 with the error inside the protocol: an ERR pkt-line, or for a
// receive-pack client that asked for side-band, a band-3 message (send-pack
// demultiplexes the response and would choke on a bare ERR). The exception
// is 401, which git needs to see as a status to retry with credentials.
//
// Request bodies are bounded after decompression (a gzip bomb hits the same
// cap as a plain body), and upload-pack bodies and receive-pack's ref
// commands are checked for pkt-line framing as they stream to git
// (pktline.CheckFraming), so a malformed or oversized request ends with a
// clear ERR line rather than git's "the remote end hung up". Responses
// stream, flushed after every write.
//
// A push is not tied to its client's connection once the client has sent
// all of it: a client that hangs up then (a proxy's timeout, a killed CI
// job) finds its push in place, as it would over SSH, and the report git
// writes for nobody is dropped rather than breaking git's pipe. A client
// that leaves before its body is complete still stops git (the body read
// fails), so a partial push never lands.
package githttp

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// DefaultMaxRequestBody bounds upload-pack request bodies when
// Config.MaxRequestBody is 0. The body lists wants and haves, 50 bytes per
// object id; 10 MiB is some 200,000 haves, far beyond what git sends in one
// negotiation round (it sends haves in growing batches up to a few
// thousand).
const DefaultMaxRequestBody = 10 << 20

// Config tunes the transport.
type Config struct {
	// MaxRequestBody bounds an upload-pack request body after
	// decompression (server.max_request_body); 0 means
	// DefaultMaxRequestBody.
	MaxRequestBody int64
	// MaxPushBody bounds the pack in a receive-pack request
	// (git.max_input_size); the body may exceed it by MaxRequestBody for
	// the ref commands in front of the pack. 0 leaves the bound to git's
	// own receive.maxInputSize. git's limit is the one users normally hit,
	// with git's own message; this one keeps a client from streaming on
	// after it.
	MaxPushBody int64
	// BodyTimeout bounds how long a client may take to send a request
	// body (server.body_timeout); 0 means no bound.
	BodyTimeout time.Duration
}

type handler struct {
	svc    *hosting.Service
	auth   *auth.Service
	cfg    Config
	logger *slog.Logger
}

// New returns the smart HTTP handler. It expects full request paths, with
// the /scm/ prefix.
func New(svc *hosting.Service, a *auth.Service, cfg Config, logger *slog.Logger) http.Handler {
	if cfg.MaxRequestBody <= 0 {
		cfg.MaxRequestBody = DefaultMaxRequestBody
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &handler{svc: svc, auth: a, cfg: cfg, logger: logger.With("component", "githttp")}
}

const endpointInfoRefs = "info/refs"

// route is a parsed request path.
type route struct {
	project, slug string
	endpoint      string // "info/refs", "git-upload-pack", "git-receive-pack"
}

// parseRoute splits /scm/{project}/{repo}[.git]/{endpoint}. It refuses
// escapes, empty segments and names the store would never have created.
func parseRoute(escapedPath string) (route, bool) {
	rest, ok := strings.CutPrefix(escapedPath, "/scm/")
	if !ok || strings.ContainsAny(rest, "%\\\x00") {
		return route{}, false
	}
	seg := strings.Split(rest, "/")
	if len(seg) < 3 {
		return route{}, false
	}
	rt := route{project: strings.ToUpper(seg[0]), slug: strings.TrimSuffix(seg[1], ".git")}
	switch ep := strings.Join(seg[2:], "/"); ep {
	case endpointInfoRefs, hosting.UploadPack, hosting.ReceivePack:
		rt.endpoint = ep
	default:
		return route{}, false
	}
	if store.ValidateProjectKey(rt.project) != nil || store.ValidateSlug(rt.slug) != nil {
		return route{}, false
	}
	return rt, true
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := parseRoute(r.URL.EscapedPath())
	if !ok {
		if isDumbPath(r.URL.EscapedPath()) {
			h.plainError(w, problem.New(problem.NotFound, "dumb HTTP is not supported; use a git client that speaks smart HTTP"))
			return
		}
		h.plainError(w, problem.New(problem.NotFound, "not found"))
		return
	}
	switch rt.endpoint {
	case endpointInfoRefs:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			h.plainError(w, problem.New(problem.Invalid, "method not allowed"), http.StatusMethodNotAllowed)
			return
		}
		h.infoRefs(w, r, rt)
	default:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			h.plainError(w, problem.New(problem.Invalid, "method not allowed"), http.StatusMethodNotAllowed)
			return
		}
		h.rpc(w, r, rt)
	}
}

// isDumbPath recognises what a dumb-protocol client fetches, to tell it why
// it gets nothing.
func isDumbPath(p string) bool {
	for _, s := range []string{"/HEAD", "/objects/", "/info/packs", "/info/alternates", "/info/http-alternates"} {
		if strings.Contains(p, ".git"+s) {
			return true
		}
	}
	return false
}

func (h *handler) op(r *http.Request, rt route, p *auth.Principal, service string) hosting.Op {
	proto := r.Header.Get("Git-Protocol")
	return hosting.Op{
		Principal:  p,
		ProjectKey: rt.project,
		Slug:       rt.slug,
		Service:    service,
		Protocol:   proto,
		Transport:  "http",
		RemoteAddr: r.RemoteAddr,
		Stateless:  true,
	}
}

func (h *handler) infoRefs(w http.ResponseWriter, r *http.Request, rt route) {
	service := r.URL.Query().Get("service")
	switch service {
	case hosting.UploadPack, hosting.ReceivePack:
	case "":
		h.plainError(w, problem.New(problem.NotFound, "dumb HTTP is not supported; use a git client that speaks smart HTTP"))
		return
	default:
		h.plainError(w, problem.New(problem.Invalid, "unsupported service %q", service))
		return
	}
	p, err := h.auth.AuthenticateHTTP(r)
	if err != nil {
		h.plainError(w, err)
		return
	}
	out := newStream(w, "application/x-"+service+"-advertisement")
	if r.Method == http.MethodHead {
		// HEAD asks whether the repository is there: authorize as a GET
		// would, answer without running git.
		if _, err := h.svc.Resolve(r.Context(), p, rt.project, rt.slug, action(service)); err != nil {
			h.plainError(w, err)
			return
		}
		out.start()
		return
	}
	if err := h.svc.AdvertiseRefs(r.Context(), h.op(r, rt, p, service), out); err != nil {
		if out.started.Load() {
			abort(r)
		}
		h.plainError(w, err)
	}
}

// abort ends a response that failed after its 200 went out. Ending it
// cleanly would hand the client a truncated answer that looks complete;
// aborting the handler makes net/http cut the connection without the
// final chunk, so the client sees a transport error.
func abort(r *http.Request) {
	if r.Context().Err() == nil {
		panic(http.ErrAbortHandler)
	}
}

func action(service string) auth.Action {
	if service == hosting.ReceivePack {
		return auth.Write
	}
	return auth.Read
}

func (h *handler) rpc(w http.ResponseWriter, r *http.Request, rt route) {
	service := rt.endpoint
	if ct := r.Header.Get("Content-Type"); ct != "application/x-"+service+"-request" {
		h.plainError(w, problem.New(problem.Invalid, "content type must be application/x-%s-request", service), http.StatusUnsupportedMediaType)
		return
	}
	p, err := h.auth.AuthenticateHTTP(r)
	if err != nil {
		h.plainError(w, err)
		return
	}
	if h.cfg.BodyTimeout > 0 {
		// Not every ResponseWriter supports deadlines (HTTP/2 test
		// servers); the bound is then the server's own ReadTimeout.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.cfg.BodyTimeout))
	}
	out := newStream(w, "application/x-"+service+"-result")
	op := h.op(r, rt, p, service)
	ctx := r.Context()
	if service == hosting.ReceivePack {
		// A push whose client hangs up after sending all of it is
		// completed, as over SSH: libcurl and proxies give up on slow
		// answers, and losing a push the client sent whole only makes
		// it push again. net/http watches for the hang-up only once the
		// body has been read, so detaching from the request's end
		// changes nothing before that; a client leaving earlier is a
		// body read error, which still stops git (see hosting.runGit).
		ctx = context.WithoutCancel(ctx)
		out.lenient = true
	}

	limit := h.cfg.MaxRequestBody
	if service == hosting.ReceivePack {
		limit = 0
		if h.cfg.MaxPushBody > 0 {
			limit = h.cfg.MaxPushBody + h.cfg.MaxRequestBody
		}
	}
	body, err := h.body(r, limit)
	if err != nil {
		// Still handed to hosting, so that authorization comes first and
		// the operation is logged like any other; git sees the error as
		// the end of its input.
		body = failingReader{err}
	}
	sideband := false
	if service == hosting.UploadPack {
		body = pktline.CheckFraming(body)
	} else {
		var br *bufio.Reader
		br, sideband = pktline.PeekSideband(body)
		body = pktline.CheckFramingUntilFlush(br)
	}
	err = h.svc.Serve(ctx, op, body, out)
	if out.gone.Load() {
		h.logger.Info("push finished after its client hung up", "repo", rt.project+"/"+rt.slug,
			"remote_addr", r.RemoteAddr, "error", errString(err))
		return
	}
	if err == nil || hosting.Reported(err) {
		// A reported error ended the response inside the protocol
		// (a queue wait that ran out after progress was sent).
		return
	}
	if out.started.Load() {
		abort(r)
		return
	}
	if problem.Is(err, problem.Unauthenticated) {
		h.plainError(w, err)
		return
	}
	if r.Context().Err() != nil {
		return // nobody is listening
	}
	// git reads the message, not the headers; scripts may read these.
	throttle.SetHeaders(w.Header(), err)
	h.protocolError(out, err, sideband)
}

// body returns the request body, decompressed, failing with TooLarge past
// limit bytes (0: no limit) of either the raw or the decompressed stream.
func (h *handler) body(r *http.Request, limit int64) (io.Reader, error) {
	var body io.Reader = r.Body
	if limit > 0 && r.ContentLength > limit {
		// Refused before git starts; a chunked body is caught as it streams.
		return nil, tooLarge(limit)
	}
	if limit > 0 {
		body = &capReader{r: body, left: limit, limit: limit}
	}
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			if problem.KindOf(err) == problem.TooLarge {
				return nil, err
			}
			return nil, problem.Wrap(problem.Invalid, err, "request body is not valid gzip")
		}
		if limit > 0 {
			return &capReader{r: &gzipErrReader{zr}, left: limit, limit: limit}, nil
		}
		return &gzipErrReader{zr}, nil
	default:
		return nil, problem.New(problem.Invalid, "unsupported content encoding %q", enc)
	}
}

// failingReader is a body that could not be opened.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

// gzipErrReader makes a corrupt gzip stream an Invalid problem.
type gzipErrReader struct{ r *gzip.Reader }

func (g *gzipErrReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err != nil && err != io.EOF && problem.KindOf(err) == problem.Internal {
		err = problem.Wrap(problem.Invalid, err, "request body is not valid gzip")
	}
	return n, err
}

// plainError answers with an HTTP status and a text/plain body, which git
// prints line by line as "remote: …". status overrides the kind's status.
func (h *handler) plainError(w http.ResponseWriter, err error, status ...int) {
	kind := problem.KindOf(err)
	code := kind.HTTPStatus()
	if len(status) > 0 {
		code = status[0]
	}
	if kind == problem.Internal {
		h.logger.Error("git http request failed", "error", err)
	}
	hdr := w.Header()
	if kind == problem.Unauthenticated {
		hdr.Set("WWW-Authenticate", `Basic realm="Sluice"`)
	}
	if ra := problem.RetryAfter(err); ra > 0 {
		hdr.Set("Retry-After", strconv.Itoa(ra))
	}
	throttle.SetHeaders(hdr, err) // X-RateLimit-* on a rate-limit refusal
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	setNoCache(hdr)
	w.WriteHeader(code)
	fmt.Fprintln(w, problem.Message(err))
}

// protocolError answers a POST whose git never started with the error inside
// the protocol (see the package comment).
func (h *handler) protocolError(out *stream, err error, sideband bool) {
	form := pktline.AsERR
	if sideband {
		form = pktline.AsBand3
	}
	_ = pktline.WriteProblem(out, form, err)
	_ = pktline.NewWriter(out).Flush()
}

func setNoCache(h http.Header) {
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	h.Set("Pragma", "no-cache")
	h.Set("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
}

// stream is the response body handed to hosting: the 200 header goes out
// with the first byte, so a failure before that can still become a status;
// every write is flushed, so the client sees progress and packs as git
// produces them.
type stream struct {
	w           http.ResponseWriter
	rc          *http.ResponseController
	contentType string
	started     atomic.Bool
	length      int64 // > 0: the whole body's length, known before it starts
	// lenient drops what is written once the client has gone, instead of
	// failing: git's receive-pack must not see a broken pipe (and maybe
	// die before updating refs) because nobody reads its report.
	lenient bool
	gone    atomic.Bool
}

func newStream(w http.ResponseWriter, contentType string) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), contentType: contentType}
}

func (s *stream) start() {
	if s.started.Swap(true) {
		return
	}
	hdr := s.w.Header()
	hdr.Set("Content-Type", s.contentType)
	if s.length > 0 {
		hdr.Set("Content-Length", strconv.FormatInt(s.length, 10))
	}
	setNoCache(hdr)
	s.w.WriteHeader(http.StatusOK)
}

// SetContentLength is called by the pack cache, before the first byte,
// when it serves a complete entry: the response then carries a
// Content-Length instead of chunking, which lets ReadFrom use sendfile.
func (s *stream) SetContentLength(n int64) {
	if !s.started.Load() {
		s.length = n
	}
}

// ReadFrom streams r (a cache file) through net/http's own ReadFrom, which
// uses sendfile for an *os.File on an unchunked HTTP/1.1 response.
//
// Without a known length (git's output copied by exec, for one) the
// response must not start before the first byte arrives — a failure
// before it can still become a status — so that case copies through Write.
func (s *stream) ReadFrom(r io.Reader) (int64, error) {
	if s.length <= 0 {
		return io.Copy(struct{ io.Writer }{s}, r)
	}
	s.start()
	if rf, ok := s.w.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(r)
		if err == nil {
			err = s.rc.Flush()
		}
		return n, err
	}
	return io.Copy(struct{ io.Writer }{s}, r)
}

func (s *stream) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.gone.Load() {
		return len(p), nil
	}
	s.start()
	n, err := s.w.Write(p)
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil && s.lenient {
		s.gone.Store(true)
		return len(p), nil
	}
	return n, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// capReader fails with TooLarge once more than limit bytes were read.
type capReader struct {
	r           io.Reader
	left, limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, tooLarge(c.limit)
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n + int(c.left), tooLarge(c.limit)
	}
	return n, err
}

func tooLarge(limit int64) error {
	return problem.New(problem.TooLarge, "request body is larger than %s", problem.Size(limit))
}
