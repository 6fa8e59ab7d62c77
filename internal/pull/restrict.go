package pull

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
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
		if err := validGlob(r.MatcherID); err != nil {
			return err
		}
	default:
		return problem.New(problem.Invalid, "invalid matcher type %q (BRANCH or PATTERN)", r.MatcherType)
	}
	return nil
}

func validGlob(p string) error {
	if len(p) > 1024 || strings.ContainsAny(p, "\x00\r\n") {
		return problem.New(problem.Invalid, "invalid pattern %q", p)
	}
	if _, err := path.Match(strings.ReplaceAll(p, "/", "\x01"), ""); err != nil {
		return problem.New(problem.Invalid, "invalid pattern %q", p)
	}
	return nil
}

// matchBranch reports whether ref (a full ref name) matches pattern. An
// exact name matches the ref or its short name; a glob's * also crosses
// '/' (so "release/*" covers "release/1.0/hotfix"), as Bitbucket's do.
func matchBranch(pattern, ref string) bool {
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
	return matchBranch(r.MatcherID, ref)
}

// exempt reports whether p is exempt from r by name or group.
func (s *Service) exempt(ctx context.Context, p *auth.Principal, r *store.BranchRestriction, groups func() []int64) bool {
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

// refChange is one ref update to judge.
type refChange struct {
	ref, old, new string
}

// judge returns a message for every restriction the change violates. viaPull
// is true for a pull request merge (allowed by pull-request-only).
func (s *Service) judge(ctx context.Context, p *auth.Principal, rs []store.BranchRestriction, ch refChange, viaPull bool,
	groups func() []int64, isFF func() (bool, error)) ([]string, error) {
	var msgs []string
	for i := range rs {
		r := &rs[i]
		if !restrictionApplies(r, ch.ref) || s.exempt(ctx, p, r, groups) {
			continue
		}
		name := shortRef(ch.ref)
		switch r.Type {
		case ReadOnly:
			msgs = append(msgs, fmt.Sprintf("branch %q is read-only (%s)", name, describe(r)))
		case PullRequestOnly:
			if !viaPull {
				msgs = append(msgs, fmt.Sprintf("branch %q can only be changed by merging a pull request (%s)", name, describe(r)))
			}
		case NoDeletes:
			if isZero(ch.new) {
				msgs = append(msgs, fmt.Sprintf("branch %q cannot be deleted (%s)", name, describe(r)))
			}
		case FastForwardOnly:
			if isZero(ch.new) {
				msgs = append(msgs, fmt.Sprintf("branch %q cannot be deleted: history may not be rewritten (%s)", name, describe(r)))
			} else if !isZero(ch.old) {
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
// reference-transaction's prepared phase, with quarantineEnv nil. Every
// update is judged against the repository's and its project's branch
// permissions; a pull request merge (req.ViaPullRequest) is what
// pull-request-only allows. A push to a fork may also not borrow objects
// of the parent (forkpush.go); server-side moves name commits the fork's
// refs already reach, which the REST handlers check.
func (s *Service) CheckPush(ctx context.Context, req hooks.Request, updates []hooks.RefUpdate, quarantineEnv []string) error {
	rp, err := s.st.RepoByID(ctx, req.RepoID)
	if err != nil {
		return err
	}
	if quarantineEnv != nil {
		var tips []string
		for _, u := range updates {
			if !isZero(u.New) {
				tips = append(tips, u.New)
			}
		}
		if err := s.repos.CheckPushedObjects(ctx, s.repos.Path(rp.ID), quarantineEnv, tips, s.cfg.PushLimits); err != nil {
			return err
		}
	}
	if rp.ForkOf != 0 && quarantineEnv != nil {
		if err := s.checkForkPush(ctx, req, rp, updates, quarantineEnv); err != nil {
			return err
		}
	}
	rs, err := s.ps.RestrictionsFor(ctx, rp.ID, rp.ProjectID)
	if err != nil || len(rs) == 0 {
		return err
	}
	groups := s.groupsOf(ctx, req.Principal)
	dir := s.repos.Path(rp.ID)
	var msgs []string
	for _, u := range updates {
		u := u
		m, err := s.judge(ctx, req.Principal, rs, refChange{ref: u.Ref, old: u.Old, new: u.New}, req.ViaPullRequest, groups, func() (bool, error) {
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

// Restrictions lists the restrictions of a repository (projectID 0) or a
// project (repoID 0).
func (s *Service) Restrictions(ctx context.Context, repoID, projectID int64) ([]store.BranchRestriction, error) {
	return s.ps.ListRestrictions(ctx, repoID, projectID)
}

// CreateRestriction validates and stores a restriction.
func (s *Service) CreateRestriction(ctx context.Context, r *store.BranchRestriction) error {
	if err := ValidRestriction(r); err != nil {
		return err
	}
	return s.ps.CreateRestriction(ctx, r)
}

// Restriction reads one restriction of a repository or project scope.
func (s *Service) Restriction(ctx context.Context, repoID, projectID, id int64) (*store.BranchRestriction, error) {
	r, err := s.ps.RestrictionByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.RepoID != repoID || r.ProjectID != projectID {
		return nil, problem.New(problem.NotFound, "restriction not found")
	}
	return r, nil
}

// DeleteRestriction removes a restriction of a repository or project scope.
func (s *Service) DeleteRestriction(ctx context.Context, repoID, projectID, id int64) error {
	if _, err := s.Restriction(ctx, repoID, projectID, id); err != nil {
		return err
	}
	return s.ps.DeleteRestriction(ctx, id)
}
