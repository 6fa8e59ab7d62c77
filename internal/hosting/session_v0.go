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
// Everything else — a flush among the haves (a multi-round negotiation),
// shallow or deepen lines (the client waits for the shallow list before it
// says more), anything unexpected — falls back to one stateful git that
// carries on the session: it is fed what the client has sent so far, then
// the rest of the stream. That git writes its own advertisement first; the
// client already has one, so git's is checked against what was sent (length
// and SHA-256) and dropped. They can only differ if the refs moved in
// between, and then the session ends with an error: the client negotiated
// against refs this git no longer advertises, and a stale advertisement must
// never reach it.

// errRefsMoved is the message a session whose refs moved during its
// negotiation ends with.
var errRefsMoved = problem.New(problem.Unavailable, "the repository changed during the fetch; try again")

// serveV0Session answers a protocol v0/v1 upload-pack session (SSH) through
// the cache. It returns handled false, having read and written nothing, when
// the cache declines the advertisement; the caller then runs the session
// with one git as before.
func (s *Service) serveV0Session(ctx context.Context, op Op, r *store.Repository, t *tracker, in io.Reader, out io.Writer) (bool, error) {
	adOp := op
	adOp.Advertisement = true
	// A stateful git ended by a flush writes the advertisement and exits.
	// The op is marked stateless so that run waits for the (tiny) input to
	// be fed; git gets no --stateless-rpc.
	genOp := op
	genOp.Stateless = true
	advertise := func(ctx context.Context, w io.Writer) error {
		return s.run(ctx, genOp, r, t, nil, strings.NewReader("0000"), w, nil)
	}
	sent := &digestWriter{w: out, h: sha256.New()}
	handled, err := s.d.Cache.Serve(ctx, &CacheRequest{Repo: r, Op: adOp, Protocol: op.Protocol}, sent, advertise)
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
		generate := func(ctx context.Context, w io.Writer) error {
			return s.run(ctx, genOp, r, t, []string{"--stateless-rpc"}, bytes.NewReader(body), w, nil)
		}
		return true, s.cached(ctx, &CacheRequest{Repo: r, Op: genOp, Protocol: op.Protocol, Body: body}, out, generate)
	}
	t.cache = "session-git"
	stdin := io.MultiReader(bytes.NewReader(got.Bytes()), br)
	dst := &dropPrefix{w: out, n: sent.n, total: sent.n, want: sent.h.Sum(nil), h: sha256.New()}
	err = s.run(ctx, op, r, t, nil, stdin, dst, nil)
	if dst.mismatch() {
		s.logger.Info("refs moved during an ssh negotiation", "repo_id", r.ID, "remote_addr", op.RemoteAddr)
		return true, errRefsMoved
	}
	return true, err
}

// v0Request is what readV0Request found.
type v0Request int

const (
	v0Complete v0Request = iota // wants, flush, haves, done: a stateless request
	v0Stateful                  // anything else: git must carry on the session
)

// readV0Request reads the client's first v0 request as far as it can
// without waiting on a client that waits for the server: the want section,
// then (unless it asks for shallow information, which the client waits
// for) haves up to "done" (complete) or the first flush (a negotiation). It
// returns io.EOF when the session ends before any want. Lines it does not
// expect make the request stateful, so git answers them as it would.
func readV0Request(r io.Reader, limit int) (v0Request, error) {
	pr := pktline.NewReader(&limitReader{r: r, left: limit})
	first := true
	shallow := false
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
		case "shallow", "deepen", "deepen-since", "deepen-not":
			shallow = true
		default:
			return v0Stateful, nil
		}
	}
	if shallow {
		return v0Stateful, nil
	}
	for {
		pkt, err := pr.ReadPacket()
		if err != nil {
			if errors.Is(err, errSessionLimit) {
				return v0Stateful, nil
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return v0Stateful, err
		}
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
