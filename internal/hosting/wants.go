package hosting

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Protocol v2 wants.
//
// git 2.39's protocol v2 upload-pack serves any object id its repository or
// its alternates hold: uploadpack.allowAnySHA1InWant=false binds protocol
// v0 and v1 only. Every v2 command therefore passes through here, over
// HTTP and SSH alike, parsed once (parseV2), and a fetch's wants are
// proven reachable from the refs the caller is shown (repo.CheckWants)
// before git sees the request. A want that is not gets git's own v0
// answer, "upload-pack: not our ref <oid>", as an ERR pkt-line the client
// prints.
//
// The check runs inside the request's Generate, the function that produces
// what git answers now, so a pack cache hit skips it: the cache keys an
// answer on the repository, its refs generation and the request's wants,
// which is everything the check depends on, so an answer stored after a
// check that passed can only be served to a request the same check passes.
// A refused request stores nothing and is refused again next time.

// parseV2 parses one protocol v2 command. Commands git 2.39 does not
// advertise (object-info) are refused: they could name objects the check
// does not see.
func parseV2(body []byte) (*pktline.UploadRequest, error) {
	ur, err := pktline.ParseUploadRequest(bytes.NewReader(body), 2, int64(len(body))+1)
	switch {
	case err == nil:
		return ur, nil
	case errors.Is(err, io.EOF):
		return nil, problem.New(problem.Invalid, "empty git request")
	case errors.Is(err, pktline.ErrUnsupported):
		return nil, problem.Wrap(problem.Invalid, err, "unsupported git command")
	}
	if problem.KindOf(err) == problem.Internal {
		return nil, problem.Wrap(problem.Invalid, err, "malformed git request")
	}
	return nil, err
}

// checkWants refuses a fetch whose wants the caller may not have (see
// above). Other commands have none.
func (s *Service) checkWants(ctx context.Context, r *store.Repository, ur *pktline.UploadRequest) error {
	if ur == nil || ur.Command != "fetch" || len(ur.Wants) == 0 {
		return nil
	}
	return s.d.Repos.CheckWants(ctx, r.ID, ur.Wants)
}

// reportRefusal tells a session's client why its command was refused, as
// an ERR pkt-line (which git prints as "remote error: …" and stops on),
// when nothing of the command's answer went out yet. Internal errors keep
// their details for the log and give the client the generic message.
func reportRefusal(w io.Writer, err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	if werr := pktline.WriteProblem(w, pktline.AsERR, err); werr != nil {
		return err
	}
	return reportedError{err}
}
