package hosting

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"strings"
	"sync"

	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// A protocol v0 (or v1) upload-pack session over SSH is stateful: git sends
// its ref advertisement, then negotiates with the client round by round
// until the client says "done", then sends the pack. Most sessions that
// matter for load are a single round, though: a clone sends its wants, a
// flush and "done" without waiting for anything, and so does a fetch whose
// client has fewer haves than its first batch (16) — git's fetch-pack only
// flushes, and waits for acknowledgments, at the end of a batch. Such a
// request is exactly a stateless request, and git answers it with the same
// bytes in both modes (--stateless-rpc only changes what happens at a flush
// among the haves, and that a stateless process never writes the
// advertisement), so serveV0Session lets the pack cache answer it in the
// key space it shares with smart HTTP.
//
// The advertisement is not the same bytes as HTTP's: a stateful git leaves
// "no-done" out of its capabilities (git upload-pack sets it only with
// --advertise-refs, which HTTP uses), so the cache keeps the session
// advertisement apart (see packcache) and it is produced by a stateful git
// that the session ends at once with a flush, as ls-remote does.
//
// A shallow request (deepen, deepen-since, deepen-not) takes two rounds:
// the client sends its wants and deepen lines, then waits for the
// shallow-update section (shallow/unshallow lines and a flush) before it
// sends its haves and "done". Smart HTTP asks the same thing in two
// stateless requests, and serveV0Deepen answers the session with them: the
// first round followed by a flush is what an HTTP client posts first, and a
// stateless git answers it with the shallow-update section and a NAK (no
// haves yet); the session gets the section alone. Then it reads the
// client's second round, and the first round followed by the second is a
// complete stateless request whose answer is that same section (dropped,
// after checking it is the one the client already has) followed by the
// acknowledgments and the pack. Both are cached like any request, so a
// shallow clone that hits starts no git at all.
//
// Everything else — a flush among the haves (a multi-round negotiation),
// shallow lines without deepening, anything unexpected — falls back to one
// stateful git that carries on the session: it is fed what the client has
// sent so far, then the rest of the stream. That git writes its own
// advertisement (and shallow-update section, if the session got one) first;
// the client already has them, so git's are checked against what was sent
// (length and SHA-256) and dropped. They can only differ if the refs moved
// in between, and then the session ends with an error: the client
// negotiated against refs this git no longer advertises, and a stale
// advertisement must never reach it.

// errRefsMoved is the message a session whose refs moved during its
// negotiation ends with.
var errRefsMoved = problem.New(problem.Unavailable, "the repository changed during the fetch; try again")

// serveV0Session answers a protocol v0/v1 upload-pack session (SSH) through
// the cache. It returns handled false, having read and written nothing, when
// the cache declines the advertisement; the caller then runs the session
// with one git as before.
func (s *Service) serveV0Session(ctx context.Context, op Op, r *store.Repository, t *tracker, in io.Reader, out io.Writer) (bool, error) {
	// A stateful git ended by a flush writes the advertisement and exits.
	// The op is marked stateless so that run waits for the (tiny) input to
	// be fed; git gets no --stateless-rpc.
	genOp := op
	genOp.Stateless = true
	advertise := func(ctx context.Context, w io.Writer, progress func(string)) error {
		return s.run(ctx, genOp, r, t, nil, strings.NewReader("0000"), w, nil, progress)
	}
	sent := &digestWriter{w: out, h: sha256.New()}
	handled, err := s.d.Cache.Serve(ctx, advertisement(r, op), sent, nil, advertise)
	if !handled {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	t.cache = "session"

	br := bufio.NewReader(in)
	var got bytes.Buffer
	req, err := readV0Request(io.TeeReader(br, &got), MaxSessionRequest)
	switch {
	case err == io.EOF:
		// The client hung up after the advertisement or sent a lone flush
		// (ls-remote): git would exit without a word.
		return true, nil
	case err != nil:
		return true, readError(err)
	case req == v0Complete:
		body := got.Bytes()
		generate := func(ctx context.Context, w io.Writer, progress func(string)) error {
			return s.run(ctx, genOp, r, t, []string{"--stateless-rpc"}, bytes.NewReader(body), w, nil, progress)
		}
		return true, s.cached(ctx, request(r, genOp, body, parseRequest(op, body)), out, generate)
	case req == v0Deepen:
		return true, s.serveV0Deepen(ctx, op, genOp, r, t, got.Bytes(), br, sent, out)
	}
	return true, s.continueV0(ctx, op, r, t, got.Bytes(), br, sent, out)
}

// continueV0 hands a session to one stateful git, fed what the client has
// sent so far (read) and then the rest of in. What the session has already
// sent (sent) is dropped from git's output once checked against it.
func (s *Service) continueV0(ctx context.Context, op Op, r *store.Repository, t *tracker, read []byte, in io.Reader, sent *digestWriter, out io.Writer) error {
	t.cache = "session-git"
	stdin := io.MultiReader(bytes.NewReader(read), in)
	dst := &dropPrefix{w: out, n: sent.n, total: sent.n, want: sent.h.Sum(nil), h: sha256.New()}
	err := s.run(ctx, op, r, t, nil, stdin, dst, nil, nil)
	if dst.mismatch() {
		s.logger.Info("refs moved during an ssh negotiation", "repo_id", r.ID, "remote_addr", op.RemoteAddr)
		return errRefsMoved
	}
	return err
}

// maxShallowSection bounds the shallow-update section serveV0Deepen holds in
// memory (some 70,000 lines); a larger one is left to a stateful git.
const maxShallowSection = 4 << 20

// serveV0Deepen answers a two-round shallow request whose first round
// (wants, shallow and deepen lines, flush) is first and has been read from
// in; the advertisement has been sent through sent.
func (s *Service) serveV0Deepen(ctx context.Context, op, genOp Op, r *store.Repository, t *tracker, first []byte, in io.Reader, sent *digestWriter, out io.Writer) error {
	probe := append(first[:len(first):len(first)], "0000"...)
	generate := func(ctx context.Context, w io.Writer, progress func(string)) error {
		return s.run(ctx, genOp, r, t, []string{"--stateless-rpc"}, bytes.NewReader(probe), w, nil, progress)
	}
	// Buffered, not streamed: anything short of a well-formed section
	// followed by git's NAK (a cache that declines, a git that fails or
	// answers something else) leaves the session to a stateful git, which
	// gives the client git's own answer, errors included.
	buf := &cappedBuffer{max: maxShallowSection}
	handled, err := s.d.Cache.Serve(ctx, request(r, genOp, probe, parseRequest(op, probe)), buf, nil, generate)
	section, ok := shallowSection(buf.b.Bytes())
	if !handled || err != nil || !ok {
		return s.continueV0(ctx, op, r, t, first, in, sent, out)
	}
	if _, err := sent.Write(section); err != nil {
		return err
	}

	var got bytes.Buffer
	req, err := readV0Haves(pktline.NewReader(&limitReader{r: io.TeeReader(in, &got), left: MaxSessionRequest - len(first)}))
	switch {
	case err == io.EOF:
		// git expects the haves here; a client that hangs up gets
		// nothing more either way.
		return readError(io.ErrUnexpectedEOF)
	case err != nil:
		return readError(err)
	case req != v0Complete:
		return s.continueV0(ctx, op, r, t, append(first[:len(first):len(first)], got.Bytes()...), in, sent, out)
	}
	body := append(first[:len(first):len(first)], got.Bytes()...)
	generate = func(ctx context.Context, w io.Writer, progress func(string)) error {
		return s.run(ctx, genOp, r, t, []string{"--stateless-rpc"}, bytes.NewReader(body), w, nil, progress)
	}
	// The whole request's answer starts with the section again.
	sum := sha256.Sum256(section)
	dst := &dropPrefix{w: out, n: int64(len(section)), total: int64(len(section)), want: sum[:], h: sha256.New()}
	err = s.cached(ctx, request(r, genOp, body, parseRequest(op, body)), dst, generate)
	if dst.mismatch() {
		s.logger.Info("refs moved during an ssh shallow fetch", "repo_id", r.ID, "remote_addr", op.RemoteAddr)
		return errRefsMoved
	}
	return err
}

// shallowSection returns the shallow-update section at the start of a
// stateless git's answer to a first round alone: shallow and unshallow
// lines up to a flush, which must be followed by exactly the NAK git ends a
// round without haves with.
func shallowSection(b []byte) ([]byte, bool) {
	pr := pktline.NewReader(bytes.NewReader(b))
	n := 0
	for {
		pkt, err := pr.ReadPacket()
		if err != nil {
			return nil, false
		}
		if pkt.Type == pktline.Flush {
			n += 4
			break
		}
		if pkt.Type != pktline.Data {
			return nil, false
		}
		verb, _, _ := strings.Cut(string(pkt.Payload), " ")
		if verb != "shallow" && verb != "unshallow" {
			return nil, false
		}
		n += 4 + len(pkt.Payload)
	}
	if string(b[n:]) != "0008NAK\n" {
		return nil, false
	}
	return b[:n], true
}

// cappedBuffer collects up to max bytes and fails past them.
type cappedBuffer struct {
	b   bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		return 0, errors.New("shallow section over the limit")
	}
	return c.b.Write(p)
}

// v0Request is what readV0Request found.
type v0Request int

const (
	v0Complete v0Request = iota // wants, flush, haves, done: a stateless request
	v0Deepen                    // wants with deepening, flush: the client waits for the shallow list
	v0Stateful                  // anything else: git must carry on the session
)

// readV0Request reads the client's first v0 request as far as it can
// without waiting on a client that waits for the server: the want section,
// then haves up to "done" (complete) or the first flush (a negotiation).
// A want section that deepens is v0Deepen and read only up to its flush:
// the client waits for the shallow list before it says more. It returns
// io.EOF when the session ends before any want. Lines it does not expect,
// and shallow lines without deepening (rare: a shallow clone fetching
// without --depth), make the request stateful, so git answers them as it
// would.
func readV0Request(r io.Reader, limit int) (v0Request, error) {
	pr := pktline.NewReader(&limitReader{r: r, left: limit})
	first := true
	shallow, deepen := false, false
	for {
		pkt, err := pr.ReadPacket()
		if err != nil {
			if errors.Is(err, errSessionLimit) {
				return v0Stateful, nil
			}
			if err == io.EOF && !first {
				err = io.ErrUnexpectedEOF
			}
			return v0Stateful, err
		}
		if pkt.Type == pktline.Flush {
			if first {
				return v0Stateful, io.EOF
			}
			break
		}
		first = false
		if pkt.Type != pktline.Data {
			return v0Stateful, nil
		}
		verb, _, _ := strings.Cut(string(pkt.Payload), " ")
		switch verb {
		case "want", "filter":
		case "shallow":
			shallow = true
		case "deepen", "deepen-since", "deepen-not":
			deepen = true
		default:
			return v0Stateful, nil
		}
	}
	switch {
	case deepen:
		return v0Deepen, nil
	case shallow:
		return v0Stateful, nil
	}
	req, err := readV0Haves(pr)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return req, err
}

// readV0Haves reads haves up to "done" (complete) or a flush or anything
// else (stateful): a v0 request's negotiation, or the second round of a
// shallow one. It returns io.EOF when the input ends before any line.
func readV0Haves(pr *pktline.Reader) (v0Request, error) {
	first := true
	for {
		pkt, err := pr.ReadPacket()
		if err != nil {
			if errors.Is(err, errSessionLimit) {
				return v0Stateful, nil
			}
			if err == io.EOF && !first {
				err = io.ErrUnexpectedEOF
			}
			return v0Stateful, err
		}
		first = false
		if pkt.Type != pktline.Data {
			return v0Stateful, nil
		}
		switch line := strings.TrimSuffix(string(pkt.Payload), "\n"); {
		case line == "done":
			return v0Complete, nil
		case strings.HasPrefix(line, "have "):
		default:
			return v0Stateful, nil
		}
	}
}

var errSessionLimit = errors.New("session request over the cache's limit")

// limitReader ends with errSessionLimit after left bytes: a first request
// that large is handed to git rather than buffered further.
type limitReader struct {
	r    io.Reader
	left int
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errSessionLimit
	}
	if len(p) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= n
	return n, err
}

// digestWriter remembers the length and SHA-256 of what went through it.
type digestWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (d *digestWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.h.Write(p[:n])
	d.n += int64(n)
	return n, err
}

// dropPrefix swallows the first n bytes written through it, checking that
// their SHA-256 is want, and passes the rest on. On a mismatch it writes
// nothing and fails, which stops git.
type dropPrefix struct {
	w        io.Writer
	n, total int64 // bytes left to drop, of total
	want     []byte
	h        hash.Hash

	mu  sync.Mutex
	bad bool
}

func (d *dropPrefix) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bad {
		return 0, errRefsMoved
	}
	written := 0
	if d.n > 0 {
		k := int(min(int64(len(p)), d.n))
		d.h.Write(p[:k])
		d.n -= int64(k)
		written, p = k, p[k:]
		if d.n == 0 && !bytes.Equal(d.h.Sum(nil), d.want) {
			d.bad = true
			return written, errRefsMoved
		}
	}
	if len(p) == 0 {
		return written, nil
	}
	n, err := d.w.Write(p)
	return written + n, err
}

// mismatch says whether git's advertisement differed from the one sent:
// different bytes, or fewer (git stopped inside it; a git that wrote
// nothing failed for reasons of its own).
func (d *dropPrefix) mismatch() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bad || d.n > 0 && d.n < d.total
}
