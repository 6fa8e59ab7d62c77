package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

type rescopeArgs struct {
	RepoID int64    `json:"repo_id"`
	Refs   []string `json:"refs"`
}

type prepareArgs struct {
	PRID int64 `json:"pr_id"`
}

// RefsChanged is the hooks.Server.OnRefsChanged listener app registers.
// It runs inside the reference-transaction hook: it only queues a rescope
// for the branches that moved. Pull request refs are written by this
// package and never start one (that would loop).
func (s *Service) RefsChanged(repoID int64, updates []hooks.RefUpdate) {
	var refs []string
	for _, u := range updates {
		if strings.HasPrefix(u.Ref, "refs/heads/") {
			refs = append(refs, u.Ref)
		}
	}
	if len(refs) == 0 {
		return
	}
	// Most pushes touch no pull request: one indexed read here saves
	// them a queued job (a database write). A pull request opened while
	// this push lands is covered by Create, which looks at its branches
	// again after recording it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if prs, err := s.ps.OpenPullRequestsTouching(ctx, repoID, refs); err == nil && len(prs) == 0 {
		return
	}
	// Not Unique: a rescope already running may have read the branch
	// before this move; the job compares commits, so a spare one is cheap.
	s.enqueue(JobRescope, rescopeArgs{RepoID: repoID, Refs: refs})
}

func (s *Service) runRescope(ctx context.Context, payload json.RawMessage) error {
	var args rescopeArgs
	if err := json.Unmarshal(payload, &args); err != nil {
		return fmt.Errorf("decode rescope args: %w", err)
	}
	prs, err := s.ps.OpenPullRequestsTouching(ctx, args.RepoID, args.Refs)
	if err != nil {
		return err
	}
	var errs []error
	for i := range prs {
		if err := s.Rescope(ctx, &prs[i]); err != nil {
			s.logger.Warn("rescope", "pr_id", prs[i].ID, "err", err)
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("rescope %d of %d pull requests failed: %w", len(errs), len(prs), errs[0])
	}
	return nil
}

// Rescope brings an open pull request up to its branches: new commits,
// fresh pull request ref, drifted comments, then the diff and merge
// preview. A deleted source branch declines the pull request.
func (s *Service) Rescope(ctx context.Context, pr *store.PullRequest) error {
	if pr.State != store.PullOpen {
		return nil
	}
	from, err := s.resolve(ctx, s.repos.Path(pr.FromRepoID), pr.FromRef)
	if err != nil {
		return err
	}
	to, err := s.resolve(ctx, s.repos.Path(pr.RepoID), pr.ToRef)
	if err != nil {
		return err
	}
	if from == "" || to == "" {
		upd := *pr
		upd.State = store.PullDeclined
		t := nowUTC()
		upd.ClosedAt = &t
		if err := s.ps.UpdatePullRequest(ctx, &upd, pr.Version); err != nil {
			if problem.Is(err, problem.Conflict) {
				return nil // someone acted on it meanwhile; the next move retries
			}
			return err
		}
		s.activity(ctx, pr.ID, 0, "DECLINED", 0, map[string]string{"reason": "branch deleted"})
		s.emit(ctx, &upd, "pr:declined", nil)
		s.notify(notify.Event{Kind: store.NotifyDeclined, PRID: pr.ID, Version: upd.Version})
		return nil
	}
	if from == pr.FromSHA && to == pr.ToSHA {
		return s.syncFromRef(ctx, pr)
	}
	upd := *pr
	upd.FromSHA, upd.ToSHA = from, to
	if err := s.syncFromRef(ctx, &upd); err != nil {
		return err
	}
	if pr.FromRepoID != pr.RepoID {
		// Use what was fetched: the fork's branch may have moved again,
		// and only the fetched commit is readable in the target.
		fetched, err := s.resolve(ctx, s.repos.Path(pr.RepoID), fmt.Sprintf("refs/pull-requests/%d/from", pr.Number))
		if err != nil {
			return err
		}
		upd.FromSHA = fetched
	}
	base, err := s.mergeBase(ctx, s.repos.Path(pr.RepoID), upd.ToSHA, upd.FromSHA)
	if err != nil {
		return err
	}
	upd.BaseSHA = base
	ok, err := s.ps.RescopePullRequest(ctx, pr.ID, pr.FromSHA, pr.ToSHA, upd.FromSHA, upd.ToSHA, base)
	if err != nil || !ok {
		return err // !ok: another rescope got there first
	}
	s.metrics.rescopes.Inc()
	if upd.FromSHA != pr.FromSHA {
		s.activity(ctx, pr.ID, 0, "RESCOPED", 0, map[string]string{"fromHash": upd.FromSHA, "previousFromHash": pr.FromSHA})
		s.announce(ctx, &upd, webhook.PRFromRefUpdated, nil, webhook.PullEvent{PreviousFromHash: pr.FromSHA})
		if err := s.resetApprovals(ctx, &upd); err != nil {
			return err
		}
	}
	if upd.ToSHA != pr.ToSHA {
		// The target moved (a push, another pull request merged): the
		// diff and mergeability of this one may have changed.
		s.announce(ctx, &upd, webhook.PRToRefUpdated, nil, webhook.PullEvent{PreviousToHash: pr.ToSHA})
	}
	if err := s.drift(ctx, &upd, pr.BaseSHA, pr.FromSHA); err != nil {
		s.logger.Warn("comment drift", "pr_id", pr.ID, "err", err)
	}
	return s.prepare(ctx, &upd)
}

// resetApprovals withdraws the approvals of a pull request whose source
// moved, when its repository asks for it. Only the first rescope to see a
// move gets here (RescopePullRequest's compare-and-swap), so a retried job
// does not reset approvals given after the move.
func (s *Service) resetApprovals(ctx context.Context, pr *store.PullRequest) error {
	st, err := s.GetSettings(ctx, pr.RepoID)
	if err != nil || !st.ResetApprovalsOnChange {
		return err
	}
	parts, err := s.ps.Participants(ctx, pr.ID)
	if err != nil {
		return err
	}
	approved := false
	for _, p := range parts {
		approved = approved || p.Status == store.StatusApproved
	}
	if !approved {
		return nil
	}
	if err := s.ps.ResetApprovals(ctx, pr.ID); err != nil {
		return err
	}
	s.activity(ctx, pr.ID, 0, "UNAPPROVED", 0, map[string]string{"reason": "source branch changed", "fromHash": pr.FromSHA})
	return nil
}

func (s *Service) runPrepare(ctx context.Context, payload json.RawMessage) error {
	var args prepareArgs
	if err := json.Unmarshal(payload, &args); err != nil {
		return fmt.Errorf("decode prepare args: %w", err)
	}
	pr, err := s.ps.PullRequestByID(ctx, args.PRID)
	if problem.Is(err, problem.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if pr.State != store.PullOpen {
		return nil
	}
	return s.prepare(ctx, pr)
}

// prepare computes and stores the diff (joining a request computing it
// already) and the merge preview.
func (s *Service) prepare(ctx context.Context, pr *store.PullRequest) error {
	d, err := s.diff(ctx, pr)
	if err != nil {
		return err
	}
	// Warm this node's rendered copy while nobody waits for it.
	if _, err := d.json(); err != nil {
		return err
	}
	return s.preview(ctx, pr)
}

// preview tries the no-ff merge of the pull request: when clean it writes
// refs/pull-requests/N/merge for CI, when conflicted it records the files
// and removes the ref.
func (s *Service) preview(ctx context.Context, pr *store.PullRequest) error {
	dir := s.repos.Path(pr.RepoID)
	ref := fmt.Sprintf("refs/pull-requests/%d/merge", pr.Number)
	tree, conflicts, err := s.mergeTree(ctx, dir, nil, pr.ToSHA, pr.FromSHA)
	if problem.Is(err, problem.Conflict) {
		conflicts = []string{noHistory}
	} else if err != nil {
		return err
	}
	if len(conflicts) > 0 {
		if cur, _ := s.resolve(ctx, dir, ref); cur != "" {
			if err := s.updateRef(ctx, pr.RepoID, nil, false, ref, zeroOID, ""); err != nil {
				s.logger.Warn("remove merge ref", "pr_id", pr.ID, "err", err)
			}
		}
		return s.ps.SetMergeStatus(ctx, pr.ID, pr.FromSHA, pr.ToSHA, mergeConflicted, strings.Join(conflicts, "\n"))
	}
	msg := fmt.Sprintf("Merge pull request #%d preview\n", pr.Number)
	commit, err := s.commitTree(ctx, dir, nil, tree, []string{pr.ToSHA, pr.FromSHA}, msg, identity{name: "Sluice", email: "sluice@localhost",
		// A fixed date makes the preview commit a function of its inputs,
		// so recomputing it does not move the ref needlessly.
		authorDate: "1000000000 +0000", committerDate: "1000000000 +0000"})
	if err != nil {
		return err
	}
	if err := s.updateRef(ctx, pr.RepoID, nil, false, ref, commit, ""); err != nil {
		return err
	}
	return s.ps.SetMergeStatus(ctx, pr.ID, pr.FromSHA, pr.ToSHA, mergeClean, "")
}
