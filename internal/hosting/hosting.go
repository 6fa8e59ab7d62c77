// Package hosting is the one git service runner shared by every transport.
//
// A transport (githttp, sshd) parses its request, authenticates the caller
// and describes the operation as an Op; from there every transport takes the
// same path, in the order DESIGN.md gives:
//
//  1. resolve the repository and Authorize the principal (read for
//     upload-pack and upload-archive, write for receive-pack). A repository
//     the caller may not read and a missing one give the same error;
//  2. rate-limit the principal (Admission.RateLimit);
//  3. for stateless upload-pack requests and advertisements, for each
//     command of a protocol v2 upload-pack session over SSH, and for the
//     advertisement and single-round request of a protocol v0 session over
//     SSH (see session_v0.go), let the pack cache answer (Cache) — a hit
//     starts no git process;
//  4. take a hosting ticket (Admission.Admit), queueing when the node is
//     saturated;
//  5. run git through gitcmd, with GIT_PROTOCOL and, for receive-pack, the
//     hooks environment that ties the push to this request. A smart HTTP
//     push that a load balancer resent after its first node applied it
//     (every ref already at its new value) is answered with git's success
//     report instead, without git (see retry.go).
//
// hosting is the runner; throttle and packcache are services it calls, and
// neither imports it. Each gets its own small type, which hosting fills in
// from the Op: a throttle.Ticket, a packcache.Request. A request is parsed
// once, here (GIT_PROTOCOL with pktline.ProtocolVersion, the body with
// pktline.ParseUploadRequest), and the parse travels with it. What a
// service says back while it works — the queue messages of a wait for a
// ticket — comes through a callback argument (Admit's progress,
// packcache.Generate's), not through the context.
//
// Errors raised before git wrote anything are problem errors the transport
// renders in its own way (an HTTP status, an ERR pkt-line, an SSH exit
// status). Once output has started the protocol offers no clean way to
// report a failure, so later errors are logged and returned for the
// transport to abort the stream.
//
// Over HTTP receive-pack's stderr has no way to the user, yet git writes
// the reference-transaction hook's output there, and a refusal in that hook
// (the database went away after pre-receive) makes receive-pack die with
// no report: hookrelay.go relays the hooks' "sluice: " lines as side-band
// progress and, when git wrote nothing, answers with the refusal report
// git would have sent, so the user reads why and that nothing changed.
//
// Every operation ends with exactly one structured log line and one count in
// sluice_git_operations_total; secrets never reach either.
//
// Stdin is handed to git through an os.Pipe that this package feeds, not
// through exec's own copier: exec.Cmd.Wait waits for its copier, which would
// block on an SSH session or an HTTP body that the client keeps open after
// git has exited. Owning the pipe also lets a read error on the client's side
// (a disconnect mid-push, a body over its limit, a malformed pkt-line) kill
// git at once and become the error the user sees, instead of git's less
// helpful "the remote end hung up unexpectedly". A receive-pack stopped that
// way leaves its quarantine directory behind; hosting removes it at once
// when it can tell it is that push's own (see quarantine.go).
package hosting

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/packcache"
	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// Git services a transport may ask for.
const (
	UploadPack    = "git-upload-pack"
	ReceivePack   = "git-receive-pack"
	UploadArchive = "git-upload-archive"
)

// Op describes one git operation as a transport received it.
type Op struct {
	Principal  *auth.Principal
	ProjectKey string // as the client wrote it; matched case-insensitively
	Slug       string
	// Service is UploadPack, ReceivePack or UploadArchive.
	Service string
	// Protocol is the client's GIT_PROTOCOL value (the Git-Protocol HTTP
	// header, the SSH GIT_PROTOCOL env request). A value pktline.ValidProtocol
	// refuses is dropped, not refused: git itself ignores what it does not
	// understand and answers in protocol v0, which every client speaks.
	Protocol string
	// Transport is "http" or "ssh"; it labels logs and metrics.
	Transport  string
	RemoteAddr string
	// Stateless runs git with --stateless-rpc: one request, one response
	// (smart HTTP). SSH sessions are not stateless.
	Stateless bool
	// Advertisement is set by AdvertiseRefs, so that logs, metrics and the
	// throttle's ticket (Command) tell a ref advertisement from a fetch or
	// push.
	Advertisement bool
	// Stderr, when set, receives git's stderr and queueing messages; SSH
	// passes the session's stderr, which the user sees. HTTP leaves it nil:
	// stateless git has no side channel, and its stderr goes to the log.
	Stderr io.Writer
}

// Admission decides whether an operation may run now: the throttle
// service (*throttle.Throttle), whose ticket describes the operation as it
// needs it (hosting fills one in from the Op); nil admits everything.
type Admission interface {
	// Admit takes a hosting ticket, waiting (bounded) when the node is
	// saturated; progress receives human-readable queueing messages. The
	// returned release gives the ticket back. A refusal is a problem error,
	// usually Unavailable with a RetryAfter.
	Admit(ctx context.Context, tk throttle.Ticket, progress func(msg string)) (release func(), err error)
	// RateLimit charges one git operation to p (remote identifies an
	// anonymous caller) and returns a Throttled problem when over budget.
	RateLimit(ctx context.Context, p *auth.Principal, remote string) error
}

// Cache answers stateless upload-pack requests and advertisements from
// earlier answers: the pack cache (*packcache.Cache); nil disables it.
// hosting describes each request as a packcache.Request, parsed once, and
// hands it a packcache.Generate that runs git (taking the hosting ticket,
// whose queueing messages go to the progress it is given). Protocol v2 SSH
// sessions reach it too, one command (and the capability advertisement) at
// a time, as stateless requests (see serveV2Session), and so do protocol
// v0 SSH sessions (see serveV0Session): their advertisement as a Session
// one — git's session advertisement lacks the "no-done" of HTTP's, so it
// must be keyed apart — and their first request, when it ends with "done",
// as a stateless request (a shallow one as the two stateless requests an
// HTTP client would post).
//
// Serve either answers the request (handled true), writing to w what git
// would write — from storage on a hit, or by calling generate on a miss
// (coalescing identical requests as it likes) — or declines without
// writing anything (handled false), and hosting runs git itself. An error
// with handled true is reported like a git failure. progress receives the
// queueing messages of the generate this request waits on, whichever
// request started it.
type Cache interface {
	Serve(ctx context.Context, req *packcache.Request, w io.Writer, progress func(msg string), generate packcache.Generate) (handled bool, err error)
}

// Deps are the Service's collaborators. Admission and Cache may be nil.
type Deps struct {
	Store      store.Store
	Auth       *auth.Service
	Repos      *repo.Manager
	Git        *gitcmd.Runner
	Hooks      *hooks.Server
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Admission  Admission
	Cache      Cache
}

// Service runs git services for transports.
type Service struct {
	d        Deps
	pushes   pushTracker // running receive-packs, for quarantine.go
	logger   *slog.Logger
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New builds a Service. Metrics are registered on d.Registerer when set; a
// second Service on the same registry shares the first one's collectors.
func New(d Deps) *Service {
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		d:      d,
		logger: logger.With("component", "hosting"),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_git_operations_total",
			Help: "Git hosting operations by transport, command and outcome.",
		}, []string{"transport", "command", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_git_operation_duration_seconds",
			Help: "Duration of git hosting operations, from authorization to the last byte.",
			// From a ref advertisement (milliseconds) to a large clone
			// on a slow link (minutes).
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"transport", "command"}),
	}
	if d.Registerer != nil {
		s.ops = register(d.Registerer, s.ops)
		s.duration = register(d.Registerer, s.duration)
	}
	return s
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("register metric: %v", err))
	}
	return c
}

// Resolve finds the repository projectKey/slug and checks that p may do a
// on it. A missing repository and one p may not read give the same error:
// NotFound "repository not found" for an authenticated caller,
// Unauthenticated for an anonymous one (who may see it after logging in).
//
// While the store answers Unavailable, a read by a principal auth's outage
// grace knows to have read the repository recently resolves from the grace
// (see outage.go); anything else gets the Unavailable error.
func (s *Service) Resolve(ctx context.Context, p *auth.Principal, projectKey, slug string, a auth.Action) (*store.Repository, error) {
	r, _, err := s.resolve(ctx, p, projectKey, slug, a)
	return r, err
}

// resolve is Resolve, also saying whether the repository came from the
// outage grace.
func (s *Service) resolve(ctx context.Context, p *auth.Principal, projectKey, slug string, a auth.Action) (*store.Repository, bool, error) {
	if p == nil {
		return nil, false, problem.New(problem.Internal, "no principal")
	}
	r, err := s.d.Store.RepoBySlug(ctx, projectKey, slug)
	if err != nil {
		if problem.Is(err, problem.NotFound) {
			return nil, false, notFound(p)
		}
		return s.outageRepo(p, projectKey, slug, a, err)
	}
	if err := s.d.Auth.Authorize(ctx, p, auth.Resource{Repo: r}, a); err != nil {
		switch problem.KindOf(err) {
		case problem.Unavailable:
			return s.outageRepo(p, projectKey, slug, a, err)
		case problem.NotFound:
			return nil, false, notFound(p)
		case problem.Forbidden:
			// Anonymous callers who may read but not write (a push to a
			// public repository) are asked to log in: git answers a 401
			// by retrying with credentials, a 403 by giving up.
			if p.Anonymous {
				return nil, false, problem.Wrap(problem.Unauthenticated, err, "authentication required")
			}
		}
		return nil, false, err
	}
	return r, false, nil
}

func notFound(p *auth.Principal) error {
	if p.Anonymous {
		return problem.New(problem.Unauthenticated, "authentication required")
	}
	return problem.New(problem.NotFound, "repository not found")
}

// AdvertiseRefs writes the ref advertisement for op.Service (upload-pack or
// receive-pack) as smart HTTP's GET info/refs returns it: git's
// --advertise-refs output, preceded for protocols v0 and v1 by the
// "# service=…" pkt-line and a flush. A protocol v2 upload-pack
// advertisement is git's capability list alone, as git http-backend does.
func (s *Service) AdvertiseRefs(ctx context.Context, op Op, w io.Writer) error {
	op.Advertisement = true
	t := s.begin(op)
	if op.Service != UploadPack && op.Service != ReceivePack {
		return t.finish(problem.New(problem.Invalid, "unsupported service %q", op.Service))
	}
	r, err := s.prepare(ctx, &op, t)
	if err != nil {
		return t.finish(err)
	}
	out := &countingWriter{w: w}
	t.out = out
	var dst io.Writer = out
	if op.Service == ReceivePack || pktline.ProtocolVersion(op.Protocol) != 2 {
		// Written with git's first bytes, not before, so that git failing
		// at once still leaves the transport free to answer with a status.
		dst = &prefixWriter{w: out, prefix: serviceHeader(op.Service)}
	}
	generate := func(ctx context.Context, w io.Writer, progress func(string)) error {
		return s.run(ctx, op, r, t, []string{"--stateless-rpc", "--advertise-refs"}, nil, w, nil, progress)
	}
	if s.d.Cache != nil && op.Service == UploadPack {
		handled, err := s.d.Cache.Serve(ctx, advertisement(r, op), dst, nil, generate)
		if handled {
			t.cache = "served"
			return t.finish(s.classify(ctx, err, out))
		}
	}
	return t.finish(s.classify(ctx, generate(ctx, dst, nil), out))
}

// Serve runs op.Service with stdin as git's input and stdout as its output:
// one smart HTTP POST body when op.Stateless, or a whole SSH session.
func (s *Service) Serve(ctx context.Context, op Op, stdin io.Reader, stdout io.Writer) error {
	op.Advertisement = false
	t := s.begin(op)
	var flags []string
	switch op.Service {
	case UploadPack, ReceivePack:
		if op.Stateless {
			flags = []string{"--stateless-rpc"}
		}
	case UploadArchive:
		if op.Stateless {
			return t.finish(problem.New(problem.Invalid, "git-upload-archive is not available over HTTP"))
		}
	default:
		return t.finish(problem.New(problem.Invalid, "unsupported service %q", op.Service))
	}
	r, err := s.prepare(ctx, &op, t)
	if err != nil {
		return t.finish(err)
	}
	out := &countingWriter{w: stdout}
	t.out = out
	in := &countingReader{r: stdin}
	t.in = in

	version := pktline.ProtocolVersion(op.Protocol)
	if op.Service == UploadPack && op.Stateless && (s.d.Cache != nil || version == 2) {
		// The cache keys on the whole request, the queue progress
		// depends on it, and a protocol v2 fetch's wants are checked
		// before git sees them (see checkWants); a stateless request is
		// bounded (the transport caps the body).
		body, err := io.ReadAll(in)
		if err != nil {
			return t.finish(readError(err))
		}
		return t.finish(s.serveStateless(ctx, op, r, t, body, out))
	}
	if op.Service == UploadPack && version == 2 {
		return t.finish(s.classify(ctx, s.serveV2Session(ctx, op, r, t, in, out), out))
	}
	if s.d.Cache != nil && op.Service == UploadPack {
		handled, err := s.serveV0Session(ctx, op, r, t, in, out)
		if handled {
			return t.finish(s.classify(ctx, err, out))
		}
	}

	if op.Service == ReceivePack && op.Stateless {
		// A push resent after its first node applied it (see retry.go).
		if handled, err := s.retriedPush(r, t, in, out); handled {
			return t.finish(s.classify(ctx, err, out))
		}
	}
	var env []string
	if op.Service == ReceivePack && s.d.Hooks != nil {
		hookEnv, done := s.d.Hooks.Register(hooks.Request{RepoID: r.ID, Principal: op.Principal, Transport: op.Transport})
		defer done()
		env = hookEnv
	}
	if op.Service == ReceivePack && op.Stderr == nil {
		return t.finish(s.classify(ctx, s.runRelayed(ctx, op, r, t, flags, in, out, env), out))
	}
	return t.finish(s.classify(ctx, s.run(ctx, op, r, t, flags, in, out, env, nil), out))
}

// serveStateless answers one buffered stateless upload-pack request, from
// the cache when there is one. A protocol v2 fetch that git answers with the
// packfile section alone tells its client about a queue wait (see
// packfileWriter).
func (s *Service) serveStateless(ctx context.Context, op Op, r *store.Repository, t *tracker, body []byte, out *countingWriter) error {
	// Parsed once, here: the v2 wants check, the early packfile header and
	// the cache's key all read this.
	var ur *pktline.UploadRequest
	v2 := pktline.ProtocolVersion(op.Protocol) == 2
	if v2 {
		var err error
		if ur, err = parseV2(body); err != nil {
			return err
		}
	} else if s.d.Cache != nil {
		ur = parseRequest(op, body)
	}
	var dst io.Writer = out
	var pw *packfileWriter
	var progress func(string) // nil: run's default, op.Stderr
	if s.d.Admission != nil && v2 && earlyPackfile(ur, len(body)) {
		pw = &packfileWriter{w: out}
		dst = pw
		progress = pw.progress
	}
	generate := func(ctx context.Context, w io.Writer, progress func(string)) error {
		if v2 {
			if err := s.checkWants(ctx, r, ur); err != nil {
				return err
			}
		}
		return s.run(ctx, op, r, t, []string{"--stateless-rpc"}, bytes.NewReader(body), w, nil, progress)
	}
	var err error
	handled := false
	if s.d.Cache != nil {
		handled, err = s.d.Cache.Serve(ctx, request(r, op, body, ur), dst, progress, generate)
		if handled {
			t.cache = "served"
		}
	}
	if !handled {
		err = generate(ctx, dst, progress)
	}
	if pw != nil {
		err = pw.finish(err)
	}
	return s.classify(ctx, err, out)
}

// MaxSessionRequest bounds one command of a protocol v2 session (SSH) that
// serveV2Session buffers for the cache, like githttp's default bound on a
// stateless request body (some 200,000 haves).
const MaxSessionRequest = 10 << 20

// serveV2Session answers a protocol v2 upload-pack session (SSH) one
// command at a time, so that the pack cache can answer each command like a
// stateless HTTP request. Protocol v2 is stateless by design: git's own
// HTTP transport runs exactly these --stateless-rpc invocations, which
// answer each command as the long-lived session would, and the capability
// advertisement is the same bytes. Protocol v0 sessions are stateful;
// serveV0Session handles them.
func (s *Service) serveV2Session(ctx context.Context, op Op, r *store.Repository, t *tracker, in io.Reader, out io.Writer) error {
	advertise := func(ctx context.Context, w io.Writer, progress func(string)) error {
		return s.run(ctx, op, r, t, []string{"--stateless-rpc", "--advertise-refs"}, nil, w, nil, progress)
	}
	if err := s.cached(ctx, advertisement(r, op), out, advertise); err != nil {
		return err
	}
	t.cache = "session"
	br := bufio.NewReader(in)
	for {
		body, err := readV2Command(br, MaxSessionRequest)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError(err)
		}
		ur, err := parseV2(body)
		if err != nil {
			return reportRefusal(out, err)
		}
		generate := func(ctx context.Context, w io.Writer, progress func(string)) error {
			if err := s.checkWants(ctx, r, ur); err != nil {
				return err
			}
			return s.run(ctx, op, r, t, []string{"--stateless-rpc"}, bytes.NewReader(body), w, nil, progress)
		}
		// Counted per command: a refusal before the command's first byte
		// can still be told inside the protocol.
		cmdOut := &countingWriter{w: out}
		if err := s.cached(ctx, request(r, op, body, ur), cmdOut, generate); err != nil {
			if cmdOut.n.Load() > 0 {
				return err
			}
			return reportRefusal(out, err)
		}
	}
}

// cached answers req from the cache, or with generate when there is no
// cache or it declines. Queueing messages go where run sends them by
// default when git runs for this request, and nowhere when it follows
// another's.
func (s *Service) cached(ctx context.Context, req *packcache.Request, w io.Writer, generate packcache.Generate) error {
	if s.d.Cache != nil {
		if handled, err := s.d.Cache.Serve(ctx, req, w, nil, generate); handled {
			return err
		}
	}
	return generate(ctx, w, nil)
}

// advertisement is op's ref (or capability) advertisement as the cache
// keys it. A v0/v1 one for a session (SSH) is not smart HTTP's.
func advertisement(r *store.Repository, op Op) *packcache.Request {
	return &packcache.Request{RepoID: r.ID, Protocol: op.Protocol, Session: !op.Stateless}
}

// request is the stateless request body, parsed as ur, as the cache keys it.
func request(r *store.Repository, op Op, body []byte, ur *pktline.UploadRequest) *packcache.Request {
	return &packcache.Request{RepoID: r.ID, Protocol: op.Protocol, Body: body, Parsed: ur}
}

// parseRequest parses a protocol v0/v1 stateless request for the cache,
// the one parse it gets. A request the parser refuses gets nil, which the
// cache stays out of: git answers it, errors included, as it would without
// a cache. (Protocol v2 commands are parsed by parseV2, and refused there.)
func parseRequest(op Op, body []byte) *pktline.UploadRequest {
	// The body is the whole request, already bounded by the transport; the
	// parser's limit only has to let all of it in.
	ur, err := pktline.ParseUploadRequest(bytes.NewReader(body), pktline.ProtocolVersion(op.Protocol), int64(len(body))+1)
	if err != nil {
		return nil
	}
	return ur
}

// readV2Command returns the raw pkt-lines of one v2 command, up to and
// including its closing flush. A flush where a command should start, or
// the end of input, ends the session (io.EOF). What the lines hold is left
// to git and the cache's parser.
func readV2Command(r *bufio.Reader, limit int) ([]byte, error) {
	var buf []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF && len(buf) == 0 {
				return nil, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
		if err != nil {
			return nil, problem.New(problem.Invalid, "malformed pkt-line length %q", hdr[:])
		}
		if n == 0 && len(buf) == 0 {
			return nil, io.EOF
		}
		buf = append(buf, hdr[:]...)
		switch {
		case n == 0:
			return buf, nil
		case n < 4: // delim (0001) or response-end (0002)
			continue
		}
		if len(buf)+int(n) > limit {
			return nil, problem.New(problem.TooLarge, "git request larger than %d bytes", limit)
		}
		start := len(buf)
		buf = append(buf, make([]byte, n-4)...)
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// prepare resolves and authorizes op's repository and charges the rate
// limit. It normalizes op.Protocol.
func (s *Service) prepare(ctx context.Context, op *Op, t *tracker) (*store.Repository, error) {
	if op.Protocol != "" && !pktline.ValidProtocol(op.Protocol) {
		s.logger.Debug("ignoring invalid GIT_PROTOCOL", "protocol", op.Protocol, "remote_addr", op.RemoteAddr)
		op.Protocol = ""
	}
	t.op.Protocol = op.Protocol
	action := auth.Read
	if op.Service == ReceivePack {
		action = auth.Write
	}
	r, outage, err := s.resolve(ctx, op.Principal, op.ProjectKey, op.Slug, action)
	if err != nil {
		return nil, err
	}
	if outage && op.Service != UploadPack {
		// Only what the pack cache answers is served during an outage;
		// an archive always needs git.
		return nil, errOutage()
	}
	t.repo = r
	t.outage = outage
	if s.d.Admission != nil {
		if err := s.d.Admission.RateLimit(ctx, op.Principal, op.RemoteAddr); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// run takes a hosting ticket and runs git once. progress receives the
// queueing messages; nil sends them to op.Stderr, if any.
func (s *Service) run(ctx context.Context, op Op, r *store.Repository, t *tracker, flags []string, stdin io.Reader, stdout io.Writer, env []string, progress func(string)) error {
	if t.outage {
		// The one door to git is shut during an outage: see outage.go.
		return errOutage()
	}
	if s.d.Admission != nil {
		start := time.Now()
		if progress == nil {
			progress = func(msg string) {
				if op.Stderr != nil {
					fmt.Fprintf(op.Stderr, "%s\n", msg)
				}
			}
		}
		release, err := s.d.Admission.Admit(ctx, ticket(op), progress)
		t.queued = time.Since(start)
		if err != nil {
			return err
		}
		defer release()
	}
	if op.Protocol != "" {
		env = append(env, "GIT_PROTOCOL="+op.Protocol)
	}
	// git's stderr tail travels in gitcmd's ExitError into the log line.
	cmd := gitcmd.Cmd{
		Dir:    s.d.Repos.Path(r.ID),
		Name:   strings.TrimPrefix(op.Service, "git-"),
		Flags:  flags,
		Env:    env,
		Stdout: stdout,
		Stderr: op.Stderr,
	}
	if op.Service == ReceivePack && !op.Advertisement {
		g := s.guardQuarantine(r.ID)
		err := s.runGit(ctx, cmd, stdin, op.Stateless, g)
		g.done(err != nil)
		return err
	}
	return s.runGit(ctx, cmd, stdin, op.Stateless, nil)
}

// runGit starts cmd with stdin fed through a pipe this function owns (see the
// package comment). A read error on stdin cancels git and is returned in
// preference to git's own result. When wait is set the feeding goroutine
// is waited for; otherwise (a long-lived SSH stream) it ends when the
// transport closes stdin.
func (s *Service) runGit(ctx context.Context, cmd gitcmd.Cmd, stdin io.Reader, wait bool, g *quarantineGuard) error {
	if stdin == nil {
		return s.startWait(ctx, cmd)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("stdin pipe: %w", err)
	}
	cmd.Stdin = pr
	src := &errReader{r: stdin}
	proc, err := s.d.Git.Start(ctx, cmd)
	// git holds its own copy of the read end now; ours must go so that
	// writes fail, instead of blocking, once git exits.
	pr.Close()
	if err != nil {
		pw.Close()
		return fmt.Errorf("start git %s: %w", cmd.Name, err)
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		_, _ = io.Copy(pw, src)
		if src.failed() {
			cancel()
		}
		pw.Close()
	}()
	werr := proc.Wait()
	if g != nil {
		g.pgid = proc.Pid()
	}
	pw.Close()
	if wait {
		<-fed
	}
	// A request git never fully received is the client's failure even
	// when git, seeing the end of its input, exited cleanly.
	if rerr := src.err(); rerr != nil {
		return readError(rerr)
	}
	if werr != nil {
		return fmt.Errorf("git %s: %w", cmd.Name, werr)
	}
	return nil
}

func (s *Service) startWait(ctx context.Context, cmd gitcmd.Cmd) error {
	proc, err := s.d.Git.Start(ctx, cmd)
	if err != nil {
		return fmt.Errorf("start git %s: %w", cmd.Name, err)
	}
	if err := proc.Wait(); err != nil {
		return fmt.Errorf("git %s: %w", cmd.Name, err)
	}
	return nil
}

// readError turns a failure to read the client's input into what the
// client should see: the transport's own problem (a body over its limit, a
// malformed pkt-line) when it gave one.
func readError(err error) error {
	var pe *problem.Error
	if errors.As(err, &pe) {
		return err
	}
	return problem.Wrap(problem.Invalid, err, "read request")
}

// classify makes a git failure the transport can render when nothing was
// written yet; problem errors (admission, cache, input) pass through.
func (s *Service) classify(ctx context.Context, err error, out *countingWriter) error {
	if err == nil {
		return nil
	}
	var pe *problem.Error
	if errors.As(err, &pe) {
		return err
	}
	if ctx.Err() != nil {
		return problem.Wrap(problem.Unavailable, fmt.Errorf("%w: %w", ctx.Err(), err), "request canceled")
	}
	if out.n.Load() > 0 {
		return err
	}
	return problem.Wrap(problem.Internal, err, "git failed to serve the request")
}

func serviceHeader(service string) []byte {
	line := "# service=" + service + "\n"
	return []byte(fmt.Sprintf("%04x%s0000", len(line)+4, line))
}

// tracker collects what the single log line and the metrics report.
type tracker struct {
	s      *Service
	op     Op
	start  time.Time
	repo   *store.Repository
	in     *countingReader
	out    *countingWriter
	cache  string
	queued time.Duration
	// retry marks a resent push answered without git (see retry.go).
	retry bool
	// outage marks an operation resolved from auth's outage grace: the
	// pack cache may answer it, git may not (see outage.go).
	outage bool
}

func (s *Service) begin(op Op) *tracker {
	return &tracker{s: s, op: op, start: time.Now()}
}

func (t *tracker) command() string { return command(t.op) }

// command names op in logs and metrics.
func command(op Op) string {
	c := strings.TrimPrefix(op.Service, "git-")
	if op.Advertisement {
		return c + "-advertisement"
	}
	return c
}

// ticket is what the throttle needs to know of op.
func ticket(op Op) throttle.Ticket {
	return throttle.Ticket{
		Principal: op.Principal, RemoteAddr: op.RemoteAddr,
		ProjectKey: op.ProjectKey, Slug: op.Slug,
		Command: command(op), Transport: op.Transport,
	}
}

func (t *tracker) finish(err error) error {
	d := time.Since(t.start)
	outcome := "ok"
	level := slog.LevelInfo
	if err != nil {
		outcome = problem.KindOf(err).String()
		// A body cut short (io.ErrUnexpectedEOF from net/http) is a client
		// that went away, like a canceled context.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) {
			outcome = "canceled"
		} else if problem.Is(err, problem.Internal) {
			level = slog.LevelWarn
		}
	}
	cmd := t.command()
	t.s.ops.WithLabelValues(t.op.Transport, cmd, outcome).Inc()
	t.s.duration.WithLabelValues(t.op.Transport, cmd).Observe(d.Seconds())

	attrs := []slog.Attr{
		slog.String("principal", principalName(t.op.Principal)),
		slog.String("command", cmd),
		slog.String("transport", t.op.Transport),
		slog.String("protocol", t.op.Protocol),
		slog.String("remote_addr", t.op.RemoteAddr),
		slog.String("outcome", outcome),
	}
	if t.repo != nil {
		attrs = append(attrs, slog.String("repo", t.repo.ProjectKey+"/"+t.repo.Slug), slog.Int64("repo_id", t.repo.ID))
	} else {
		attrs = append(attrs, slog.String("repo", t.op.ProjectKey+"/"+t.op.Slug))
	}
	var in, out int64
	if t.in != nil {
		in = t.in.n.Load()
	}
	if t.out != nil {
		out = t.out.n.Load()
	}
	attrs = append(attrs,
		slog.Int64("bytes_in", in),
		slog.Int64("bytes_out", out),
		slog.Int64("duration_ms", d.Milliseconds()),
	)
	if t.queued > 0 {
		attrs = append(attrs, slog.Int64("queued_ms", t.queued.Milliseconds()))
	}
	if t.cache != "" {
		attrs = append(attrs, slog.String("cache", t.cache))
	}
	if t.retry {
		attrs = append(attrs, slog.Bool("retry_in_place", true))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	t.s.logger.LogAttrs(context.Background(), level, "git operation", attrs...)
	return err
}

func principalName(p *auth.Principal) string {
	if p == nil {
		return ""
	}
	return p.String()
}

type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// ReadFrom passes a pack cache hit's file down to the transport, so that
// net/http can hand it to sendfile instead of copying it through here.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	var err error
	if rf, ok := c.w.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(c.w, r)
	}
	c.n.Add(n)
	return n, err
}

// SetContentLength forwards a cache hit's length to the transport (see
// packcache), when the transport can use it.
func (c *countingWriter) SetContentLength(n int64) {
	if ls, ok := c.w.(interface{ SetContentLength(int64) }); ok {
		ls.SetContentLength(n)
	}
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// errReader remembers the first error other than io.EOF its source gave.
type errReader struct {
	r   io.Reader
	mu  sync.Mutex
	bad error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.mu.Lock()
		if e.bad == nil {
			e.bad = err
		}
		e.mu.Unlock()
	}
	return n, err
}

func (e *errReader) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bad
}

func (e *errReader) failed() bool { return e.err() != nil }

// prefixWriter writes prefix before the first bytes written through it.
type prefixWriter struct {
	w      io.Writer
	prefix []byte
	done   bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if !p.done && len(b) > 0 {
		p.done = true
		if _, err := p.w.Write(p.prefix); err != nil {
			return 0, err
		}
	}
	return p.w.Write(b)
}
