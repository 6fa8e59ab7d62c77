package pull

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/problem"
)

// The git plumbing every operation here is built from. Every command goes
// through gitcmd; commit ids and ref names reach git as Args.

const zeroOID = "0000000000000000000000000000000000000000"

func isZero(oid string) bool { return strings.Trim(oid, "0") == "" }

func shortRef(ref string) string { return strings.TrimPrefix(ref, "refs/heads/") }

// resolve returns the commit ref points at in dir, "" when the ref does not
// exist.
func (s *Service) resolve(ctx context.Context, dir, ref string) (string, error) {
	out, err := s.git.Output(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-parse", Flags: []string{"--verify", "--quiet"}, Args: []string{ref + "^{commit}"}})
	if gitcmd.ExitCode(err) == 1 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", ref, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// mergeBase is the best common ancestor of a and b ("" when unrelated).
func (s *Service) mergeBase(ctx context.Context, dir, a, b string) (string, error) {
	out, err := s.git.Output(ctx, gitcmd.Cmd{Dir: dir, Name: "merge-base", Args: []string{a, b}})
	if gitcmd.ExitCode(err) == 1 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("merge base: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// isAncestor reports whether a is an ancestor of (or equal to) b. env may
// carry the quarantine variables of a push in progress.
func (s *Service) isAncestor(ctx context.Context, dir, a, b string, env []string) (bool, error) {
	err := s.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "merge-base", Flags: []string{"--is-ancestor"}, Args: []string{a, b}, Env: env})
	if err == nil {
		return true, nil
	}
	if gitcmd.ExitCode(err) == 1 {
		return false, nil
	}
	return false, fmt.Errorf("is-ancestor: %w", err)
}

// mergeTree merges ours and theirs in the object database. It returns the
// tree and, when the merge conflicts, the conflicted paths (and no error).
// It writes tree and blob objects, never a commit; env may point the
// writes at a scratch object directory (see scratchODB).
func (s *Service) mergeTree(ctx context.Context, dir string, env []string, ours, theirs string) (tree string, conflicts []string, err error) {
	out, err := s.git.Output(ctx, gitcmd.Cmd{Dir: dir, Name: "merge-tree",
		Flags: []string{"--write-tree", "-z", "--name-only", "--no-messages"}, Args: []string{ours, theirs}, Env: env})
	code := gitcmd.ExitCode(err)
	if err != nil && code != 1 {
		var ee *gitcmd.ExitError
		if errors.As(err, &ee) && strings.Contains(ee.Stderr, "refusing to merge unrelated histories") {
			return "", nil, problem.New(problem.Conflict, "the branches have no common history")
		}
		return "", nil, fmt.Errorf("merge-tree: %w", err)
	}
	// "<tree>\0" then, on conflict, "<path>\0" for each conflicted path.
	parts := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	tree = strings.TrimSpace(parts[0])
	if code == 1 {
		seen := map[string]bool{}
		for _, p := range parts[1:] {
			if p != "" && !seen[p] {
				seen[p] = true
				conflicts = append(conflicts, p)
			}
		}
		if len(conflicts) == 0 {
			conflicts = []string{"(unknown)"}
		}
	}
	return tree, conflicts, nil
}

// identity is the author and committer of a commit the server writes.
type identity struct {
	name, email string
	// authorName etc. override the author (a replayed commit keeps its
	// author); the date too.
	authorName, authorEmail, authorDate string
	committerDate                       string
}

func (id identity) env() []string {
	an, ae := id.name, id.email
	if id.authorName != "" {
		an, ae = id.authorName, id.authorEmail
	}
	env := []string{
		"GIT_AUTHOR_NAME=" + clean(an), "GIT_AUTHOR_EMAIL=" + clean(ae),
		"GIT_COMMITTER_NAME=" + clean(id.name), "GIT_COMMITTER_EMAIL=" + clean(id.email),
	}
	if id.authorDate != "" {
		env = append(env, "GIT_AUTHOR_DATE="+clean(id.authorDate))
	}
	if id.committerDate != "" {
		env = append(env, "GIT_COMMITTER_DATE="+clean(id.committerDate))
	}
	return env
}

// clean makes a value acceptable to gitcmd's identity check: no control
// characters or angle brackets, bounded length.
func clean(v string) string {
	v = strings.Map(func(r rune) rune {
		if r < 0x20 || r == '<' || r == '>' || r == 0x7f {
			return -1
		}
		return r
	}, v)
	if len(v) > 200 {
		v = v[:200]
	}
	return v
}

// commitTree writes a commit of tree with parents and message, into the
// object directory env names (the repository's when env is nil).
func (s *Service) commitTree(ctx context.Context, dir string, env []string, tree string, parents []string, message string, id identity) (string, error) {
	args := []string{tree}
	flags := []string{}
	for _, p := range parents {
		// The value is glued to -p so it stays one option; parents are
		// commit ids we resolved, never user text.
		flags = append(flags, "-p"+p)
	}
	out, err := s.git.Output(ctx, gitcmd.Cmd{Dir: dir, Name: "commit-tree", Flags: flags, Args: args,
		Stdin: strings.NewReader(message), Env: append(id.env(), env...)})
	if err != nil {
		return "", fmt.Errorf("commit-tree: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// commitInfo reads what a replay needs of commit c: its parents, author and
// message.
type commitInfo struct {
	parents                       []string
	authorName, authorEmail, date string
	message                       string
}

func (s *Service) readCommit(ctx context.Context, dir, c string) (*commitInfo, error) {
	out, err := s.git.Output(ctx, gitcmd.Cmd{Dir: dir, Name: "log",
		Flags: []string{"-1", "--no-walk", "--format=%P%x00%an%x00%ae%x00%ad%x00%B", "--date=raw"}, Args: []string{c}})
	if err != nil {
		return nil, fmt.Errorf("read commit: %w", err)
	}
	f := strings.SplitN(string(out), "\x00", 5)
	if len(f) != 5 {
		return nil, fmt.Errorf("read commit %s: unexpected output", c)
	}
	return &commitInfo{parents: strings.Fields(f[0]), authorName: f[1], authorEmail: f[2], date: f[3],
		message: strings.TrimRight(f[4], "\n") + "\n"}, nil
}

// revList lists the commits of "from" not reachable from "not", oldest
// first, with their parent counts.
func (s *Service) revList(ctx context.Context, dir, from, not string) ([]string, error) {
	out, err := s.git.Output(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list",
		Flags: []string{"--reverse", "--topo-order", "--parents"}, Args: []string{from, "^" + not}})
	if err != nil {
		return nil, fmt.Errorf("rev-list: %w", err)
	}
	var commits []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) > 2 {
			return nil, problem.New(problem.Conflict, "cannot rebase: commit %s is a merge", f[0][:11])
		}
		commits = append(commits, f[0])
	}
	return commits, nil
}

// errRefMoved is updateRef's answer when the ref no longer held the
// expected value: someone else won the compare-and-swap.
var errRefMoved = errors.New("ref moved")

// updateRef moves ref from old to new (new zero: delete) as p, through the
// hooks server so the refs generation moves, listeners hear of it and, for
// a user, the branch permissions judge it (viaPull: as the merge of a pull
// request). p nil is the server itself (pull request refs).
// old "" means "whatever it is"; zero means "must not exist".
func (s *Service) updateRef(ctx context.Context, repoID int64, p *auth.Principal, viaPull bool, ref, newOID, old string) error {
	env, done := s.hookEnvFor(repoID, p, viaPull)
	defer done()
	var flags, args []string
	if isZero(newOID) {
		flags, args = []string{"-d"}, []string{ref}
	} else {
		args = []string{ref, newOID}
	}
	if old != "" {
		args = append(args, old)
	}
	// A ref update half done must finish even if the caller has gone.
	err := s.git.Run(context.WithoutCancel(ctx), gitcmd.Cmd{Dir: s.repos.Path(repoID), Name: "update-ref", Flags: flags, Args: args, Env: env})
	if err != nil {
		var ee *gitcmd.ExitError
		if errors.As(err, &ee) {
			if msg, ok := hooks.Refusal(ee.Stderr); ok {
				return problem.Wrap(problem.Forbidden, err, msg)
			}
		}
		if errors.As(err, &ee) && (strings.Contains(ee.Stderr, "but expected") || strings.Contains(ee.Stderr, "cannot lock ref") ||
			strings.Contains(ee.Stderr, "reference already exists") || strings.Contains(ee.Stderr, "unable to resolve reference")) {
			return fmt.Errorf("%w: %s", errRefMoved, ee.Stderr)
		}
		return fmt.Errorf("update %s: %w", ref, err)
	}
	return nil
}

// hookEnv registers a system move (pull request refs, fork copies).
func (s *Service) hookEnv(repoID int64, p *auth.Principal) ([]string, func()) {
	return s.hookEnvFor(repoID, p, false)
}

// hookEnvFor registers a move by p, or by the server itself when p is nil.
func (s *Service) hookEnvFor(repoID int64, p *auth.Principal, viaPull bool) ([]string, func()) {
	if s.hooks == nil {
		return nil, func() {}
	}
	if p == nil {
		return s.hooks.Register(hooks.Request{RepoID: repoID, Principal: &auth.Principal{Name: "sluice"}, Transport: "pull", System: true})
	}
	return s.hooks.Register(hooks.Request{RepoID: repoID, Principal: p, Transport: "pull", ViaPullRequest: viaPull})
}

// fetchRef copies ref of repository from (with the objects it needs) into
// dst of repository to. A fork's objects are not visible to its parent, so
// a pull request from a fork needs its commits copied before the parent can
// diff or merge them. Both paths derive from repository ids.
func (s *Service) fetchRef(ctx context.Context, toRepo, fromRepo int64, ref, dst string) error {
	env, done := s.hookEnv(toRepo, nil)
	defer done()
	err := s.git.Run(context.WithoutCancel(ctx), gitcmd.Cmd{Dir: s.repos.Path(toRepo), Name: "fetch",
		Flags: []string{"--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"},
		Args:  []string{s.repos.Path(fromRepo), "+" + ref + ":" + dst}, Env: env})
	if err != nil {
		return fmt.Errorf("fetch from repository %d: %w", fromRepo, err)
	}
	return nil
}

// nul splits NUL-terminated output.
func nul(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// branchLocks serialises, within this node, the merges into one branch.
// It is not what keeps merges correct (the update-ref compare-and-swap is,
// across nodes too); it keeps merges into a busy branch on one node from
// burning their retries against each other, so twenty concurrent merges
// queue instead of failing. Other branches and other repositories never
// wait.
type branchLocks struct {
	mu    sync.Mutex
	locks map[string]*branchLock
}

type branchLock struct {
	ch   chan struct{} // holds one token while the branch is locked
	refs int
}

func (b *branchLocks) lock(ctx context.Context, key string) (func(), error) {
	b.mu.Lock()
	if b.locks == nil {
		b.locks = map[string]*branchLock{}
	}
	l := b.locks[key]
	if l == nil {
		l = &branchLock{ch: make(chan struct{}, 1)}
		b.locks[key] = l
	}
	l.refs++
	b.mu.Unlock()
	release := func() {
		b.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(b.locks, key)
		}
		b.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, problem.Wrap(problem.Unavailable, ctx.Err(), "gave up waiting for other merges into this branch; try again")
	}
}
