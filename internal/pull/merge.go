package pull

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// Veto is one failed merge check.
type Veto struct {
	Summary string `json:"summaryMessage"`
	Detail  string `json:"detailedMessage"`
}

// VetoError refuses a merge and lists every check that failed. It is a
// problem.Conflict for transports that only know the vocabulary.
type VetoError struct {
	Vetoes    []Veto
	Conflicts []string
}

func (e *VetoError) Error() string { return e.problem().Error() }

// Unwrap lets problem.KindOf and problem.Message see a Conflict.
func (e *VetoError) Unwrap() error { return e.problem() }

func (e *VetoError) problem() *problem.Error {
	msgs := make([]string, len(e.Vetoes))
	for i, v := range e.Vetoes {
		msgs[i] = v.Detail
	}
	return problem.New(problem.Conflict, "the pull request cannot be merged: %s", strings.Join(msgs, "; "))
}

// checks runs every configured merge check and returns the failed ones;
// nil means the pull request may be merged as far as reviews, tasks,
// builds and branch permissions go.
func (s *Service) checks(ctx context.Context, p *auth.Principal, target *store.Repository, pr *store.PullRequest, st *Settings, deleteSource bool) ([]Veto, error) {
	var vetoes []Veto
	c := st.Checks
	if c.MinApprovals > 0 || c.NoNeedsWork {
		parts, err := s.ps.Participants(ctx, pr.ID)
		if err != nil {
			return nil, err
		}
		approved, needsWork := 0, 0
		for _, pt := range parts {
			if pt.Role == store.RoleAuthor {
				continue
			}
			switch pt.Status {
			case store.StatusApproved:
				approved++
			case store.StatusNeedsWork:
				needsWork++
			}
		}
		if approved < c.MinApprovals {
			vetoes = append(vetoes, Veto{"Not enough approvals",
				fmt.Sprintf("%d approval(s) required, %d given", c.MinApprovals, approved)})
		}
		if c.NoNeedsWork && needsWork > 0 {
			vetoes = append(vetoes, Veto{"Needs work",
				fmt.Sprintf("%d reviewer(s) marked the pull request as needing work", needsWork)})
		}
	}
	if c.NoOpenTasks {
		comments, err := s.ps.ListComments(ctx, pr.ID)
		if err != nil {
			return nil, err
		}
		open := 0
		for _, cm := range comments {
			if cm.Severity == SeverityBlocker && cm.State == TaskOpen {
				open++
			}
		}
		if open > 0 {
			vetoes = append(vetoes, Veto{"Open tasks", fmt.Sprintf("%d open task(s) must be resolved first", open)})
		}
	}
	if c.MinSuccessfulBuilds > 0 {
		// Only statuses attached to the pull request's own repository
		// count: one reported through another repository holding the
		// same commit says nothing its readers may vouch for here.
		builds, err := s.ps.RepoBuildStatuses(ctx, pr.RepoID, pr.FromSHA)
		if err != nil {
			return nil, err
		}
		n := CountBuilds(builds)
		ok, bad := n.Successful, len(builds)-n.Successful
		if ok < c.MinSuccessfulBuilds || bad > 0 {
			vetoes = append(vetoes, Veto{"Builds",
				fmt.Sprintf("%d successful build(s) required and none failed, in progress, cancelled or unknown; %d successful, %d not", c.MinSuccessfulBuilds, ok, bad)})
		}
	}
	// Default reviewer approvals and required Code Insights reports
	// are the repository's rules too (reviewers.go, insights.go).
	for _, check := range []func(context.Context, *store.Repository, *store.PullRequest) ([]Veto, error){
		s.defaultReviewerChecks, s.requiredReportChecks} {
		v, err := check(ctx, target, pr)
		if err != nil {
			return nil, err
		}
		vetoes = append(vetoes, v...)
	}
	if s.branchPerms != nil {
		// The same judgement the merge's ref moves pass later, asked now
		// so that it is listed with the other vetoes.
		moves := []branchperm.Change{{Ref: pr.ToRef, Old: pr.ToSHA, New: pr.FromSHA}}
		if deleteSource && pr.FromRepoID == pr.RepoID {
			moves = append(moves, branchperm.Change{Ref: pr.FromRef, Old: pr.FromSHA, New: zeroOID})
		}
		msgs, err := s.branchPerms.Merge(ctx, p, target, moves)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			vetoes = append(vetoes, Veto{"Branch permission", m})
		}
	}
	return vetoes, nil
}

// MergeStatus answers "can it merge, and why not".
type MergeStatus struct {
	CanMerge   bool     `json:"canMerge"`
	Conflicted bool     `json:"conflicted"`
	Outcome    string   `json:"outcome"` // CLEAN, CONFLICTED
	Conflicts  []string `json:"conflicts,omitempty"`
	Vetoes     []Veto   `json:"vetoes"`
	Strategy   string   `json:"strategy"`
}

// CanMerge answers "can it merge, and why not" without writing anything
// to the repository. The merge checks (approvals, needs work, tasks,
// builds, branch permissions) are database reads and run live on every
// call; whether the commits merge under the strategy is a function of the
// two commits and the strategy only, so it is computed once per (source
// commit, target commit, strategy) and reused (mergestatus.go).
func (s *Service) CanMerge(ctx context.Context, p *auth.Principal, target *store.Repository, pr *store.PullRequest, strategy string) (*MergeStatus, error) {
	if pr.State != store.PullOpen {
		return nil, errNotOpen(pr)
	}
	st, err := s.GetSettings(ctx, target.ID)
	if err != nil {
		return nil, err
	}
	strategy, err = pickStrategy(st, strategy)
	if err != nil {
		return nil, err
	}
	vetoes, err := s.checks(ctx, p, target, pr, st, false)
	if err != nil {
		return nil, err
	}
	out := &MergeStatus{Vetoes: vetoes, Outcome: "CLEAN", Strategy: strategy}
	if out.Vetoes == nil {
		out.Vetoes = []Veto{}
	}
	// The target is read live: between a push and its rescope job the
	// stored ToSHA is behind, and the answer must be about the branch as
	// it is now.
	to, err := s.resolve(ctx, s.repos.Path(pr.RepoID), pr.ToRef)
	if err != nil {
		return nil, err
	}
	if to == "" {
		return nil, problem.New(problem.NotFound, "target branch %q not found", shortRef(pr.ToRef))
	}
	// So is the source when it is a branch of the same repository: a push
	// to it is answered about the pushed commit, not the one the rescope
	// job has yet to record. A fork's new commits are not in this
	// repository until that job fetches them, so a fork's source is the
	// recorded one until then.
	if pr.FromRepoID == pr.RepoID {
		from, err := s.resolve(ctx, s.repos.Path(pr.RepoID), pr.FromRef)
		if err != nil {
			return nil, err
		}
		if from != "" && from != pr.FromSHA {
			live := *pr
			// The row's stored outcome is about the recorded commits.
			live.FromSHA, live.MergeStatus, live.Conflicts = from, "", ""
			pr = &live
		}
	}
	o, err := s.mergeOutcome(ctx, pr, to, strategy)
	if err != nil {
		return nil, err
	}
	out.Vetoes = append(out.Vetoes, o.vetoes...)
	if len(o.conflicts) > 0 {
		out.Conflicted, out.Outcome, out.Conflicts = true, "CONFLICTED", slices.Clone(o.conflicts)
	}
	out.CanMerge = len(out.Vetoes) == 0
	return out, nil
}

func pickStrategy(st *Settings, strategy string) (string, error) {
	if strategy == "" {
		strategy = st.DefaultStrategy
	}
	if !validStrategy(strategy) {
		return "", problem.New(problem.Invalid, "unknown merge strategy %q (one of %s)", strategy, strings.Join(AllStrategies, ", "))
	}
	if len(st.Strategies) > 0 && !contains(st.Strategies, strategy) {
		return "", problem.New(problem.Invalid, "merge strategy %q is not enabled for this repository (enabled: %s)", strategy, strings.Join(st.Strategies, ", "))
	}
	return strategy, nil
}

// MergeOptions are the merge request's parameters.
type MergeOptions struct {
	Version      int64
	Strategy     string // "" for the repository's default
	Message      string // "" for the generated one
	DeleteSource bool
}

// Merge merges the pull request into its target branch. See the package
// doc for why nothing but the merge and the ref update happens here.
func (s *Service) Merge(ctx context.Context, p *auth.Principal, target *store.Repository, pr *store.PullRequest, o MergeOptions) (_ *store.PullRequest, err error) {
	start := time.Now()
	strategy := o.Strategy
	defer func() {
		outcome := "merged"
		switch {
		case errors.Is(err, errRefMoved):
			outcome = "raced"
		case err != nil:
			outcome = problem.KindOf(err).String()
		}
		label := strategy
		if !validStrategy(label) {
			label = "invalid"
		}
		s.metrics.merges.WithLabelValues(label, outcome).Observe(time.Since(start).Seconds())
	}()
	if err := checkVersion(pr, o.Version); err != nil {
		return nil, err
	}
	if pr.State != store.PullOpen {
		return nil, errNotOpen(pr)
	}
	if err := checkText("merge message", o.Message, maxText, false); err != nil {
		return nil, err
	}
	st, err := s.GetSettings(ctx, target.ID)
	if err != nil {
		return nil, err
	}
	if strategy, err = pickStrategy(st, strategy); err != nil {
		return nil, err
	}
	if vetoes, err := s.checks(ctx, p, target, pr, st, o.DeleteSource); err != nil {
		return nil, err
	} else if len(vetoes) > 0 {
		return nil, &VetoError{Vetoes: vetoes}
	}
	// The source must still be what the pull request shows: merging a
	// commit the reviewers never saw would defeat the review.
	src, err := s.resolve(ctx, s.repos.Path(pr.FromRepoID), pr.FromRef)
	if err != nil {
		return nil, err
	}
	if src != pr.FromSHA {
		// The rescope that should have followed the move may never come
		// (its announcement was lost in a crash); do it here, so that
		// reloading shows the new commits and the next merge can pass.
		if err := s.Rescope(ctx, pr); err != nil {
			s.logger.Warn("rescope a pull request behind its source branch", "pr_id", pr.ID, "err", err)
			return nil, problem.New(problem.Conflict, "the source branch has new commits that the pull request does not show yet; reload it and try again")
		}
		return nil, problem.New(problem.Conflict, "the source branch has new commits that the pull request did not show; it shows them now: reload it, review them and try again")
	}
	if pr.FromRepoID != pr.RepoID {
		if err := s.syncFromRef(ctx, pr); err != nil {
			return nil, err
		}
	}
	id := s.identityOf(ctx, p)
	dir := s.repos.Path(pr.RepoID)
	unlock, err := s.merging.lock(ctx, fmt.Sprintf("%d\x00%s", pr.RepoID, pr.ToRef))
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another merge of this very pull request may have finished while we
	// waited.
	if cur, err := s.ps.PullRequestByID(ctx, pr.ID); err != nil {
		return nil, err
	} else if err := checkVersion(cur, o.Version); err != nil {
		return nil, err
	}
	var tip, to string
	for attempt := 0; ; attempt++ {
		to, err = s.resolve(ctx, dir, pr.ToRef)
		if err != nil {
			return nil, err
		}
		if to == "" {
			return nil, problem.New(problem.NotFound, "target branch %q not found", shortRef(pr.ToRef))
		}
		if ok, err := s.isAncestor(ctx, dir, pr.FromSHA, to, nil); err != nil {
			return nil, err
		} else if ok {
			return nil, problem.New(problem.Conflict, "the target branch already contains the source branch; the pull request was merged already")
		}
		if tip, err = s.build(ctx, dir, nil, strategy, to, pr, target, id, o.Message); err != nil {
			return nil, err
		}
		err = s.updateRef(ctx, pr.RepoID, p, true, pr.ToRef, tip, to)
		if err == nil {
			break
		}
		if !errors.Is(err, errRefMoved) {
			return nil, err
		}
		if attempt >= s.cfg.MergeRetries {
			return nil, problem.Wrap(problem.Conflict, err, "the target branch kept moving during the merge; try again")
		}
	}
	merged, err := s.recordMerge(ctx, pr, tip)
	if err != nil {
		return nil, err
	}
	s.activity(ctx, pr.ID, actorID(p), "MERGED", 0, map[string]string{"strategy": strategy, "commit": tip, "previousTarget": to})
	if o.DeleteSource && pr.FromRepoID == pr.RepoID {
		if err := s.updateRef(ctx, pr.FromRepoID, p, true, pr.FromRef, zeroOID, pr.FromSHA); err != nil {
			s.logger.Warn("delete source branch after merge", "pr_id", pr.ID, "err", err)
		}
	}
	s.announce(ctx, merged, webhook.PRMerged, p, webhook.PullEvent{MergeCommit: tip})
	s.notify(notify.Event{Kind: store.NotifyMerged, PRID: pr.ID, ActorID: actorID(p)})
	return merged, nil
}

// recordMerge marks the pull request merged. The ref has moved already, so
// a concurrent edit of the title must not undo that: on a version conflict
// the latest row is read and marked instead.
func (s *Service) recordMerge(ctx context.Context, pr *store.PullRequest, tip string) (*store.PullRequest, error) {
	ctx = context.WithoutCancel(ctx)
	cur := pr
	for i := 0; i < 5; i++ {
		upd := *cur
		upd.State, upd.MergeSHA = store.PullMerged, tip
		t := nowUTC()
		upd.ClosedAt = &t
		err := s.ps.UpdatePullRequest(ctx, &upd, cur.Version)
		if err == nil {
			return &upd, nil
		}
		if !problem.Is(err, problem.Conflict) {
			return nil, err
		}
		if cur, err = s.ps.PullRequestByID(ctx, pr.ID); err != nil {
			return nil, err
		}
	}
	return nil, problem.New(problem.Unavailable, "the merge landed but the pull request could not be marked merged; it will be on the next change")
}

func (s *Service) identityOf(ctx context.Context, p *auth.Principal) identity {
	if p != nil && p.UserID != 0 {
		if u, err := s.st.UserByID(ctx, p.UserID); err == nil {
			email := u.Email
			if email == "" {
				email = u.Name + "@users.noreply.sluice"
			}
			name := u.DisplayName
			if name == "" {
				name = u.Name
			}
			return identity{name: name, email: email}
		}
	}
	return identity{name: "Sluice", email: "sluice@localhost"}
}

// build computes the new tip of the target for strategy without touching
// any ref. Conflicts come back as a VetoError listing the files.
func (s *Service) build(ctx context.Context, dir string, env []string, strategy, to string, pr *store.PullRequest, target *store.Repository, id identity, message string) (string, error) {
	from := pr.FromSHA
	if message == "" {
		message = fmt.Sprintf("Merge pull request #%d in %s/%s from %s to %s\n\n%s\n", pr.Number, target.ProjectKey, target.Slug,
			shortRef(pr.FromRef), shortRef(pr.ToRef), pr.Title)
	}
	ffable := func() (bool, error) { return s.isAncestor(ctx, dir, to, from, nil) }
	notFF := &VetoError{Vetoes: []Veto{notFastForward(strategy)}}
	mergeTree := func(ours, theirs string) (string, error) {
		tree, conflicts, err := s.mergeTree(ctx, dir, env, ours, theirs)
		if err != nil {
			return "", err
		}
		if len(conflicts) > 0 {
			return "", &VetoError{Conflicts: conflicts, Vetoes: []Veto{conflictVeto(conflicts)}}
		}
		return tree, nil
	}
	switch strategy {
	case FFOnly, FF:
		ok, err := ffable()
		if err != nil {
			return "", err
		}
		if ok {
			return from, nil
		}
		if strategy == FFOnly {
			return "", notFF
		}
		fallthrough
	case NoFF:
		tree, err := mergeTree(to, from)
		if err != nil {
			return "", err
		}
		return s.commitTree(ctx, dir, env, tree, []string{to, from}, message, id)
	case Squash, SquashFFOnly:
		tree := from + "^{tree}"
		if strategy == SquashFFOnly {
			ok, err := ffable()
			if err != nil {
				return "", err
			}
			if !ok {
				return "", notFF
			}
		} else {
			var err error
			if tree, err = mergeTree(to, from); err != nil {
				return "", err
			}
		}
		author := s.authorOf(ctx, pr, id)
		return s.commitTree(ctx, dir, env, tree, []string{to}, squashMessage(pr, message), author)
	case RebaseNoFF:
		tip, err := s.rebase(ctx, dir, env, to, from, id)
		if err != nil {
			return "", err
		}
		return s.commitTree(ctx, dir, env, tip+"^{tree}", []string{to, tip}, message, id)
	}
	return "", problem.New(problem.Invalid, "unknown merge strategy %q", strategy)
}

// squashMessage is the pull request's title and description (Bitbucket's
// squash default), unless the caller gave a message.
func squashMessage(pr *store.PullRequest, message string) string {
	if !strings.HasPrefix(message, "Merge pull request #") {
		return message
	}
	m := pr.Title + "\n"
	if pr.Description != "" {
		m += "\n" + pr.Description + "\n"
	}
	return m
}

// authorOf makes the pull request's author the author of a squashed commit,
// the merger its committer.
func (s *Service) authorOf(ctx context.Context, pr *store.PullRequest, committer identity) identity {
	a := s.identityOf(ctx, &auth.Principal{UserID: pr.AuthorID})
	committer.authorName, committer.authorEmail = a.name, a.email
	return committer
}

// rebase replays the commits of from that to lacks onto to and returns the
// new tip. Each commit C with parent P becomes merge-tree(X, C) where X is
// a synthetic commit with the current tip's tree and parent P: their merge
// base is P, so the result is the tip plus C's own change.
func (s *Service) rebase(ctx context.Context, dir string, env []string, to, from string, id identity) (string, error) {
	commits, err := s.revList(ctx, dir, from, to)
	if err != nil {
		var pe *problem.Error
		if errors.As(err, &pe) && pe.Kind == problem.Conflict {
			return "", &VetoError{Vetoes: []Veto{{"Rebase not possible", pe.Message}}}
		}
		return "", err
	}
	tip := to
	for _, c := range commits {
		info, err := s.readCommit(ctx, dir, c)
		if err != nil {
			return "", err
		}
		if len(info.parents) != 1 {
			return "", &VetoError{Vetoes: []Veto{{"Rebase not possible", fmt.Sprintf("commit %s has no parent to replay from", c[:11])}}}
		}
		synthetic, err := s.commitTree(ctx, dir, env, tip+"^{tree}", []string{info.parents[0]}, "rebase base\n", id)
		if err != nil {
			return "", err
		}
		tree, conflicts, err := s.mergeTree(ctx, dir, env, synthetic, c)
		if err != nil {
			return "", err
		}
		if len(conflicts) > 0 {
			return "", &VetoError{Conflicts: conflicts, Vetoes: []Veto{{"Merge conflicts",
				fmt.Sprintf("rebasing commit %s conflicts in %s", c[:11], strings.Join(conflicts, ", "))}}}
		}
		replay := id
		replay.authorName, replay.authorEmail, replay.authorDate = info.authorName, info.authorEmail, info.date
		if tip, err = s.commitTree(ctx, dir, env, tree, []string{tip}, info.message, replay); err != nil {
			return "", err
		}
	}
	return tip, nil
}
