package pull

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Pushes to a fork may not borrow the parent's objects.
//
// A fork reads its parent's objects through objects/info/alternates, and
// receive-pack's connectivity check runs with that alternate in place. So
// without more, someone who may write to a fork and knows the id of a
// commit made in the private parent after the fork (or after they lost
// access to it) could push a branch pointing at that commit, or a commit
// of their own whose parent it is, and git would accept it: every object
// is "present". From then on the fork's refs reach the parent's commit and
// the fork serves it to anyone who can read the fork. That is the leak of
// REFERENCES' known attacks the fork design must close: a private
// parent's new objects never show through a fork that lost access.
//
// The rule, checked in pre-receive with the push still in quarantine:
// every object a new ref tip makes reachable must be in the push itself
// (the quarantine) unless the fork's existing refs reach it already.
// Concretely
//
//	git rev-list --objects --no-object-names --stdin --not --all   (new tips on stdin)
//
// run with the push's quarantine environment (so the pushed objects and
// the borrowed ones are all readable) lists exactly the objects that the
// new tips reach and the fork's refs do not; each must then be found by
//
//	git cat-file --batch-check
//
// run with GIT_OBJECT_DIRECTORY set to the quarantine alone and no
// alternates, which sees only what this push brought. The two are
// streamed into each other, so memory stays flat for a large push; the
// cost is proportional to the objects of the push (receive-pack has just
// walked the same set for its connectivity check), and a push that only
// moves a branch to a commit the fork has costs one empty walk.
//
// Who pays: only forks (store.Repository.ForkOf), and only when the pusher
// cannot read the parent. Someone who can read the parent could fetch
// those objects and push them explicitly, so a shortcut through the
// alternate gives them nothing they lack; and their client legitimately
// omits the parent's objects, because receive-pack advertises the
// alternate's ref tips as ".have" lines. Ordinary repositories, and fork
// pushes by readers of the parent, run no git command for this at all.
//
// A consequence for a pusher who lost read access to the parent: a push
// whose client left out objects because of those ".have" lines (it still
// has the parent's history from before) is refused with the same message;
// pushing from a clone of the fork itself sends everything needed.

// maxListedBorrowed bounds how many borrowed objects a rejection names.
const maxListedBorrowed = 3

// CheckForkPush is the fork part of the push policy app installs in the
// hooks server (hooks.Policy semantics, with the repository rp already
// read): a push (quarantineEnv set) to a fork may not make the parent's
// objects reachable. Other repositories, and server-side moves (no
// quarantine: they name commits the fork's refs already reach, which the
// REST handlers check), pass without a look.
func (s *Service) CheckForkPush(ctx context.Context, req hooks.Request, rp *store.Repository, updates []hooks.RefUpdate, quarantineEnv []string) error {
	if rp.ForkOf == 0 || quarantineEnv == nil {
		return nil
	}
	return s.checkForkPush(ctx, req, rp, updates, quarantineEnv)
}

// checkForkPush refuses a push to fork that makes objects reachable that
// came neither with the push nor from the fork's own refs.
func (s *Service) checkForkPush(ctx context.Context, req hooks.Request, fork *store.Repository, updates []hooks.RefUpdate, qenv []string) error {
	refOf := map[string]string{} // new tip → a ref it is pushed to
	var tips []string
	for _, u := range updates {
		if isZero(u.New) {
			continue
		}
		if _, ok := refOf[u.New]; !ok {
			tips = append(tips, u.New)
			refOf[u.New] = u.Ref
		}
	}
	if len(tips) == 0 {
		return nil
	}
	if s.canReadParent(ctx, req.Principal, fork) {
		s.metrics.forkChecks.WithLabelValues("skipped").Inc()
		return nil
	}
	borrowed, err := s.borrowedObjects(ctx, s.repos.Path(fork.ID), tips, qenv)
	if err != nil {
		return fmt.Errorf("check fork push: %w", err)
	}
	if len(borrowed) == 0 {
		s.metrics.forkChecks.WithLabelValues("accepted").Inc()
		return nil
	}
	s.metrics.forkChecks.WithLabelValues("rejected").Inc()
	var msgs []string
	for _, oid := range borrowed {
		if ref, ok := refOf[oid]; ok {
			msgs = append(msgs, fmt.Sprintf("%s: %s is not in this fork or in the push", ref, oid))
		} else {
			msgs = append(msgs, fmt.Sprintf("object %s is not in this fork or in the push", oid))
		}
	}
	return problem.New(problem.Forbidden, "%s\nsluice: a push to a fork must bring every object its branches and tags reach that the fork does not have; "+
		"objects of the repository it was forked from are not available to it. Push from a clone of the fork, or base the change on the fork's own history",
		strings.Join(msgs, "\nsluice: "))
}

// canReadParent reports whether p may read fork's parent now. A parent
// that is gone, or an error, counts as no.
func (s *Service) canReadParent(ctx context.Context, p *auth.Principal, fork *store.Repository) bool {
	if s.auth == nil || p == nil {
		return false
	}
	parent, err := s.st.RepoByID(ctx, fork.ForkOf)
	if err != nil {
		return false
	}
	res := auth.Resource{Repo: parent}
	if proj, err := s.st.ProjectByID(ctx, parent.ProjectID); err == nil {
		res.Project = proj
	}
	return s.auth.Authorize(ctx, p, res, auth.Read) == nil
}

// borrowedObjects lists (up to maxListedBorrowed of) the objects that tips
// reach, dir's refs do not, and the quarantine does not hold.
func (s *Service) borrowedObjects(ctx context.Context, dir string, tips []string, qenv []string) ([]string, error) {
	quarantine := ""
	for _, kv := range qenv {
		if k, v, _ := strings.Cut(kv, "="); k == "GIT_OBJECT_DIRECTORY" {
			quarantine = v
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	walkDone := make(chan error, 1)
	go func() {
		err := s.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list",
			Flags: []string{"--objects", "--no-object-names", "--stdin", "--not", "--all"},
			Stdin: strings.NewReader(strings.Join(tips, "\n") + "\n"), Stdout: pw, Env: qenv})
		pw.CloseWithError(err)
		walkDone <- err
	}()
	found := &missingLines{}
	var checkErr error
	if quarantine == "" {
		// No quarantine: the push brought no objects, so every object
		// the walk lists is borrowed.
		found.allMissing = true
		_, checkErr = io.Copy(found, pr)
	} else {
		// GIT_OBJECT_DIRECTORY alone, without GIT_ALTERNATE_OBJECT_DIRECTORIES:
		// git reads the quarantine and the quarantine's own (absent)
		// info/alternates, never the fork's or the parent's objects.
		checkErr = s.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "cat-file", Flags: []string{"--batch-check=%(objectname)"},
			Stdin: pr, Stdout: found, Env: []string{"GIT_OBJECT_DIRECTORY=" + quarantine}})
	}
	// Unblock the walk if the check stopped reading early.
	pr.CloseWithError(io.ErrClosedPipe)
	walkErr := <-walkDone
	if walkErr != nil {
		return nil, fmt.Errorf("list new objects: %w", walkErr)
	}
	if checkErr != nil {
		return nil, fmt.Errorf("look objects up in the quarantine: %w", checkErr)
	}
	found.flush()
	return found.missing, nil
}

// missingLines reads cat-file --batch-check output ("<oid>" or "<oid>
// missing") and keeps the first few missing ids. With allMissing every
// line (rev-list's own output) counts as missing.
type missingLines struct {
	partial    []byte
	missing    []string
	allMissing bool
}

func (m *missingLines) Write(b []byte) (int, error) {
	n := len(b)
	m.partial = append(m.partial, b...)
	for {
		i := bytes.IndexByte(m.partial, '\n')
		if i < 0 {
			break
		}
		m.line(string(m.partial[:i]))
		m.partial = m.partial[i+1:]
	}
	return n, nil
}

func (m *missingLines) flush() {
	if len(m.partial) > 0 {
		m.line(string(m.partial))
		m.partial = nil
	}
}

func (m *missingLines) line(l string) {
	l = strings.TrimSpace(l)
	if l == "" || len(m.missing) >= maxListedBorrowed {
		return
	}
	if oid, ok := strings.CutSuffix(l, " missing"); ok {
		m.missing = append(m.missing, oid)
	} else if m.allMissing {
		m.missing = append(m.missing, l)
	}
}
