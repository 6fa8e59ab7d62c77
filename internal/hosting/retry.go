package hosting

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/store"
)

// Retried pushes.
//
// A smart HTTP push can reach the server twice with the same body: a load
// balancer (HAProxy with "retry-on", libcurl itself on a reset connection)
// resends a POST whose first node applied the push and died, or lost its
// connection, before answering. git on the second node then finds every ref
// already at its new value, not at the old one the request names, and
// fails the push with "cannot lock ref … is at <new> but expected <old>":
// a push that is in place is reported as failed, and scripts retry or give
// up on it.
//
// So before running git for a stateless push, hosting reads its ref
// updates (pktline.ParseReceiveRequest). When every ref already holds its
// new value and none holds the old value the request names (so no update
// is a no-op git would perform itself), the push is answered as git would
// have answered the first time — "unpack ok", "ok <ref>" for each ref —
// without running git: nothing would change, so no hook, no ticket and no
// ref transaction are needed. Anything else (a ref elsewhere, a hidden
// ref, a symbolic ref, a signed or shallow push, a command section over
// MaxSessionRequest) goes to git exactly as it arrived, which answers it as
// before. The check reads the ref files without a git process, so it costs
// an ordinary push nothing measurable.
//
// SSH sessions are not checked: git itself answers their advertisement and
// reads their commands in one process, and nothing resends an SSH push.

// retriedPush reads the ref updates at the start of a stateless push from
// in and answers the push itself when it is already in place (handled
// true). Otherwise it puts what it read back in front of in, for git.
func (s *Service) retriedPush(r *store.Repository, t *tracker, in *countingReader, out io.Writer) (bool, error) {
	src := &stickyReader{r: in.r}
	var head bytes.Buffer
	req, perr := pktline.ParseReceiveRequest(io.TeeReader(src, &head), MaxSessionRequest)
	if perr != nil || !s.inPlace(r, req) {
		// Whatever went wrong (malformed, over the bound, the client
		// gone) git sees the same bytes and the same read error it
		// would have seen without this look.
		in.r = io.MultiReader(bytes.NewReader(head.Bytes()), src)
		return false, nil
	}
	in.n.Add(int64(head.Len()))
	// The rest (push options, the pack) is read to its end, so the
	// client, still sending it, gets the answer instead of a reset
	// connection. The transport bounds it.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return true, readError(err)
	}
	t.retry = true
	return true, pktline.WriteReceiveSuccess(out, req)
}

// inPlace says whether every update of req is already done and none is a
// no-op (see the comment at the top of this file).
func (s *Service) inPlace(r *store.Repository, req *pktline.ReceiveRequest) bool {
	if len(req.Commands) == 0 {
		return false
	}
	for _, c := range req.Commands {
		if hidden(c.Ref) {
			return false
		}
		cur, err := s.d.Repos.ReadRef(r.ID, c.Ref)
		if err != nil {
			return false
		}
		if cur == "" {
			cur = strings.Repeat("0", len(c.New))
		}
		if cur != c.New || cur == c.Old {
			return false
		}
	}
	return true
}

// hidden says whether ref lies in a namespace clients may not push to;
// git refuses those, and so must a retry.
func hidden(ref string) bool {
	for _, p := range gitcmd.HiddenRefs {
		if ref == p || strings.HasPrefix(ref, p+"/") {
			return true
		}
	}
	return false
}

// stickyReader returns its source's first error other than io.EOF again on
// every later read: bytes read ahead and replayed must not hide a client
// that went away behind a clean end of input.
type stickyReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (s *stickyReader) Read(p []byte) (int, error) {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
	return n, err
}
