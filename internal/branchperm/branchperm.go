// Package branchperm is Sluice's branch permissions (Bitbucket's branch
// restrictions): their types and matchers, their validation, and the
// judgement every user's ref move passes.
//
// One judgement, three callers, so a rule cannot be enforced on one path
// and forgotten on another:
//
//   - pushes over HTTP and SSH, in pre-receive with the pushed objects
//     still in quarantine (hooks.Policy; the quarantine is read to tell a
//     fast-forward from a rewrite);
//   - every other move by a user (REST branches and tags, the web UI,
//     pull request merges), in the reference-transaction's prepared
//     phase, before git takes the new values (the same CheckPush, with no
//     quarantine);
//   - pull's merge checks, which ask Merge before a merge starts so that
//     "can it merge" lists a branch permission with the other vetoes.
//
// A restriction matches one branch exactly (BRANCH: its full ref) or a
// glob (PATTERN: * and ? over the name, '/' included, as Bitbucket's do);
// users and groups named on it are exempt. A refusal names the
// restriction and the branch, every restriction a change violates, not
// the first. A pull request merge (hooks.Request.ViaPullRequest) is what
// pull-request-only allows.
//
// The rows live in store.PullStore (branch_restrictions). Authorization
// of the REST routes is the transport's job; app installs the judgement
// in the hooks server, composed with the rest of the push policy (object
// limits, the fork check) there.
package branchperm

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Branch permission types, as Bitbucket names them.
const (
	ReadOnly        = "read-only"         // no change at all, pushes or merges
	NoDeletes       = "no-deletes"        // the branch cannot be deleted
	FastForwardOnly = "fast-forward-only" // no rewrite of history
	PullRequestOnly = "pull-request-only" // changes only by merging a pull request
)

// Matcher kinds.
const (
	MatchBranch  = "BRANCH"  // one branch, exactly
	MatchPattern = "PATTERN" // a glob: * and ? over the name, '/' included
)

// Deps is what the service needs from the node.
type Deps struct {
	Store store.Store
	// Restrictions holds the rows (store.PullStore).
	Restrictions store.PullStore
	// Repos and Git read a push's quarantine to tell a fast-forward.
	Repos  *repo.Manager
	Git    *gitcmd.Runner
	Logger *slog.Logger
}

// Service is the branch permissions of one node.
type Service struct {
	st     store.Store
	rs     store.PullStore
	repos  *repo.Manager
	git    *gitcmd.Runner
	logger *slog.Logger
}

// New builds the service. It registers nothing: app installs CheckPush in
// the hooks server.
func New(d Deps) *Service {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{st: d.Store, rs: d.Restrictions, repos: d.Repos, git: d.Git, logger: d.Logger.With("component", "branchperm")}
}

// ValidRestriction checks a restriction before it is stored and fills in
// the full ref of an exact matcher.
func ValidRestriction(r *store.BranchRestriction) error {
	switch r.Type {
	case ReadOnly, NoDeletes, FastForwardOnly, PullRequestOnly:
	default:
		return problem.New(problem.Invalid, "invalid restriction type %q (%s, %s, %s or %s)", r.Type, ReadOnly, NoDeletes, FastForwardOnly, PullRequestOnly)
	}
	switch r.MatcherType {
	case MatchBranch:
		short := strings.TrimPrefix(r.MatcherID, "refs/heads/")
		if err := repo.ValidateBranchName(short); err != nil {
			return err
		}
		r.MatcherID = "refs/heads/" + short
	case MatchPattern:
		if r.MatcherID == "" {
			return problem.New(problem.Invalid, "a pattern matcher needs a pattern")
		}
		if err := ValidPattern(r.MatcherID); err != nil {
			return err
		}
	default:
		return problem.New(problem.Invalid, "invalid matcher type %q (BRANCH or PATTERN)", r.MatcherType)
	}
	return nil
}

// ValidPattern checks a glob of a PATTERN matcher (pull's reviewer rules
// use the same globs).
func ValidPattern(p string) error {
	if len(p) > 1024 || strings.ContainsAny(p, "\x00\r\n") {
		return problem.New(problem.Invalid, "invalid pattern %q", p)
	}
	if _, err := path.Match(strings.ReplaceAll(p, "/", "\x01"), ""); err != nil {
		return problem.New(problem.Invalid, "invalid pattern %q", p)
	}
	return nil
}

// MatchRef reports whether ref (a full ref name) matches pattern. An
// exact name matches the ref or its short name; a glob's * also crosses
// '/' (so "release/*" covers "release/1.0/hotfix"), as Bitbucket's do.
func MatchRef(pattern, ref string) bool {
	short := strings.TrimPrefix(ref, "refs/heads/")
	if pattern == ref || pattern == short {
		return true
	}
	return globMatch(pattern, ref) || (short != ref && globMatch(pattern, short))
}

// globMatch is path.Match with '/' treated as an ordinary character.
func globMatch(pattern, name string) bool {
	ok, err := path.Match(strings.ReplaceAll(pattern, "/", "\x01"), strings.ReplaceAll(name, "/", "\x01"))
	return err == nil && ok
}

func restrictionApplies(r *store.BranchRestriction, ref string) bool {
	if r.MatcherType == MatchBranch {
		return r.MatcherID == ref
	}
	return MatchRef(r.MatcherID, ref)
}

// exempt reports whether p is exempt from r by name or group.
func exempt(p *auth.Principal, r *store.BranchRestriction, groups func() []int64) bool {
	if p == nil || p.UserID == 0 {
		return false
	}
	if contains(r.UserIDs, p.UserID) {
		return true
	}
	for _, g := range groups() {
		if contains(r.GroupIDs, g) {
			return true
		}
	}
	return false
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// groupsOf returns a lazy, memoised list of p's group ids.
func (s *Service) groupsOf(ctx context.Context, p *auth.Principal) func() []int64 {
	var ids []int64
	loaded := false
	return func() []int64 {
		if loaded || p == nil || p.UserID == 0 {
			return ids
		}
		loaded = true
		gs, err := s.st.UserGroups(ctx, p.UserID)
		if err != nil {
			s.logger.Warn("read groups for branch permissions", "user_id", p.UserID, "err", err)
			return nil
		}
		for _, g := range gs {
			ids = append(ids, g.ID)
		}
		return ids
	}
}

func shortRef(ref string) string { return strings.TrimPrefix(ref, "refs/heads/") }

func describe(r *store.BranchRestriction) string {
	return fmt.Sprintf("branch permission #%d: %s on %s", r.ID, r.Type, shortRef(r.MatcherID))
}

func isZero(oid string) bool { return strings.Trim(oid, "0") == "" }

// Change is one ref update to judge; New zero deletes the ref.
type Change struct {
	Ref, Old, New string
}

// judge returns a message for every restriction the change violates. viaPull
// is true for a pull request merge (allowed by pull-request-only).
func judge(p *auth.Principal, rs []store.BranchRestriction, ch Change, viaPull bool,
	groups func() []int64, isFF func() (bool, error)) ([]string, error) {
	var msgs []string
	for i := range rs {
		r := &rs[i]
		if !restrictionApplies(r, ch.Ref) || exempt(p, r, groups) {
			continue
		}
		name := shortRef(ch.Ref)
		switch r.Type {
		case ReadOnly:
			msgs = append(msgs, fmt.Sprintf("branch %q is read-only (%s)", name, describe(r)))
		case PullRequestOnly:
			if !viaPull {
				msgs = append(msgs, fmt.Sprintf("branch %q can only be changed by merging a pull request (%s)", name, describe(r)))
			}
		case NoDeletes:
			if isZero(ch.New) {
				msgs = append(msgs, fmt.Sprintf("branch %q cannot be deleted (%s)", name, describe(r)))
			}
		case FastForwardOnly:
			if isZero(ch.New) {
				msgs = append(msgs, fmt.Sprintf("branch %q cannot be deleted: history may not be rewritten (%s)", name, describe(r)))
			} else if !isZero(ch.Old) {
				ff, err := isFF()
				if err != nil {
					return nil, err
				}
				if !ff {
					msgs = append(msgs, fmt.Sprintf("branch %q only accepts fast-forward updates; this push rewrites history (%s)", name, describe(r)))
				}
			}
		}
	}
	return msgs, nil
}

// CheckPush is the branch-permission judgement of every user's ref move
// (hooks.Policy): pushes in pre-receive, with the pushed objects read from
// quarantine, and server-side moves (REST, web, merges) in the
// reference-transaction's prepared phase, with quarantineEnv nil. It reads
// the repository and hands it to Check.
func (s *Service) CheckPush(ctx context.Context, req hooks.Request, updates []hooks.RefUpdate, quarantineEnv []string) error {
	rp, err := s.st.RepoByID(ctx, req.RepoID)
	if err != nil {
		return err
	}
	return s.Check(ctx, req, rp, updates, quarantineEnv)
}

// Check judges every update of req against rp's and its project's branch
// permissions; a pull request merge (req.ViaPullRequest) is what
// pull-request-only allows. The refusal lists every violation.
func (s *Service) Check(ctx context.Context, req hooks.Request, rp *store.Repository, updates []hooks.RefUpdate, quarantineEnv []string) error {
	rs, err := s.rs.RestrictionsFor(ctx, rp.ID, rp.ProjectID)
	if err != nil || len(rs) == 0 {
		return err
	}
	groups := s.groupsOf(ctx, req.Principal)
	dir := s.repos.Path(rp.ID)
	var msgs []string
	for _, u := range updates {
		u := u
		m, err := judge(req.Principal, rs, Change{Ref: u.Ref, Old: u.Old, New: u.New}, req.ViaPullRequest, groups, func() (bool, error) {
			return s.isAncestor(ctx, dir, u.Old, u.New, quarantineEnv)
		})
		if err != nil {
			return err
		}
		msgs = append(msgs, m...)
	}
	if len(msgs) > 0 {
		return problem.New(problem.Forbidden, "%s", strings.Join(msgs, "\nsluice: "))
	}
	return nil
}

// Merge judges the moves a pull request merge into target would make, as
// p: each change is a merge (pull-request-only allows it) and only ever
// moves a branch forward. It returns a message for every violation, for
// pull's merge checks to list with the other vetoes.
func (s *Service) Merge(ctx context.Context, p *auth.Principal, target *store.Repository, changes []Change) ([]string, error) {
	rs, err := s.rs.RestrictionsFor(ctx, target.ID, target.ProjectID)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	groups := s.groupsOf(ctx, p)
	always := func() (bool, error) { return true, nil }
	var msgs []string
	for _, ch := range changes {
		m, err := judge(p, rs, ch, true, groups, always)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m...)
	}
	return msgs, nil
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
