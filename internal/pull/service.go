package pull

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// Limits on user text, as Bitbucket's: a title of 255 characters and a
// description or comment of 32 KiB.
const (
	maxTitle = 255
	maxText  = 32 << 10
)

// CreateRequest is a new pull request. FromRepo is the target itself or a
// fork of it; the caller has checked read access to it.
type CreateRequest struct {
	Title       string
	Description string
	FromRepo    *store.Repository
	FromRef     string // branch name or refs/heads/…
	ToRef       string
	Reviewers   []int64
}

// branchRef turns "main" or "refs/heads/main" into the full name after
// checking it.
func branchRef(name string) (string, error) {
	short := strings.TrimPrefix(name, "refs/heads/")
	if err := repo.ValidateBranchName(short); err != nil {
		return "", err
	}
	return "refs/heads/" + short, nil
}

func checkText(what, v string, max int, required bool) error {
	if required && strings.TrimSpace(v) == "" {
		return problem.New(problem.Invalid, "%s is required", what)
	}
	if len(v) > max {
		return problem.New(problem.Invalid, "%s is longer than %d bytes", what, max)
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return problem.New(problem.Invalid, "%s is not valid text", what)
	}
	return nil
}

// Create opens a pull request into target. Its diff and merge preview are
// computed by a job; reads that come first join that computation.
func (s *Service) Create(ctx context.Context, p *auth.Principal, target *store.Repository, req CreateRequest) (*store.PullRequest, error) {
	if actorID(p) == 0 {
		return nil, problem.New(problem.Forbidden, "only a user can open a pull request")
	}
	if err := checkText("title", req.Title, maxTitle, true); err != nil {
		return nil, err
	}
	if err := checkText("description", req.Description, maxText, false); err != nil {
		return nil, err
	}
	from := req.FromRepo
	if from == nil {
		from = target
	}
	if from.ID != target.ID && from.ForkOf != target.ID {
		return nil, problem.New(problem.Invalid, "the source repository must be the target or a fork of it")
	}
	fromRef, err := branchRef(req.FromRef)
	if err != nil {
		return nil, err
	}
	toRef, err := branchRef(req.ToRef)
	if err != nil {
		return nil, err
	}
	if from.ID == target.ID && fromRef == toRef {
		return nil, problem.New(problem.Invalid, "the source and target branch are the same")
	}
	fromSHA, err := s.resolve(ctx, s.repos.Path(from.ID), fromRef)
	if err != nil {
		return nil, err
	}
	if fromSHA == "" {
		return nil, problem.New(problem.NotFound, "branch %q not found in the source repository", strings.TrimPrefix(fromRef, "refs/heads/"))
	}
	toSHA, err := s.resolve(ctx, s.repos.Path(target.ID), toRef)
	if err != nil {
		return nil, err
	}
	if toSHA == "" {
		return nil, problem.New(problem.NotFound, "branch %q not found in the target repository", strings.TrimPrefix(toRef, "refs/heads/"))
	}
	// The fork sees its parent's objects through alternates, so the merge
	// base is found there; the parent gets the fork's commits below.
	base, err := s.mergeBase(ctx, s.repos.Path(from.ID), toSHA, fromSHA)
	if err != nil {
		return nil, err
	}
	if base == fromSHA {
		return nil, problem.New(problem.Invalid, "the target branch already contains every commit of the source branch")
	}
	existing, err := s.ps.ListPullRequests(ctx, store.PullFilter{RepoID: target.ID, State: store.PullOpen}, store.Page{Limit: store.MaxPageLimit})
	if err != nil {
		return nil, err
	}
	for _, e := range existing {
		if e.FromRepoID == from.ID && e.FromRef == fromRef && e.ToRef == toRef {
			return nil, problem.New(problem.Conflict, "pull request #%d is already open between these branches", e.Number)
		}
	}

	parts := []store.Participant{{UserID: p.UserID, Role: store.RoleAuthor, Status: store.StatusUnapproved}}
	reviewers, err := s.defaultReviewers(ctx, target.ID, fromRef, toRef)
	if err != nil {
		return nil, err
	}
	if len(req.Reviewers) == 0 {
		// The default reviewer conditions (reviewers.go) fill in only
		// when the author named no one.
		more, err := s.DefaultReviewers(ctx, target, fromRef, toRef)
		if err != nil {
			return nil, err
		}
		reviewers = append(reviewers, more...)
	}
	for _, id := range append(req.Reviewers, reviewers...) {
		if id == p.UserID || containsParticipant(parts, id) {
			continue
		}
		parts = append(parts, store.Participant{UserID: id, Role: store.RoleReviewer, Status: store.StatusUnapproved})
	}
	pr := &store.PullRequest{
		RepoID: target.ID, FromRepoID: from.ID, FromRef: fromRef, FromSHA: fromSHA, ToRef: toRef, ToSHA: toSHA,
		BaseSHA: base, Title: req.Title, Description: req.Description, State: store.PullOpen, AuthorID: p.UserID,
	}
	if err := s.ps.CreatePullRequest(ctx, pr, parts); err != nil {
		return nil, err
	}
	if err := s.syncFromRef(ctx, pr); err != nil {
		// The rescope job retries; the pull request exists either way.
		s.logger.Warn("write pull request ref", "pr_id", pr.ID, "err", err)
	}
	s.activity(ctx, pr.ID, p.UserID, "OPENED", 0, nil)
	var asked []int64
	for _, pt := range parts {
		if pt.Role == store.RoleReviewer {
			asked = append(asked, pt.UserID)
		}
	}
	s.notify(notify.Event{Kind: store.NotifyReviewRequested, PRID: pr.ID, ActorID: p.UserID, Users: asked})
	s.enqueue(JobPrepare, prepareArgs{PRID: pr.ID})
	s.rescopeIfMoved(ctx, pr)
	s.emit(ctx, pr, "pr:opened", p)
	return pr, nil
}

// rescopeIfMoved closes the race between opening a pull request and a
// push to one of its branches: a push skips the rescope job when no open
// pull request touches its branch (refsChanged), so one that lands after
// Create resolved the branches but before the row existed would go
// unnoticed. Every such push has moved its ref before this second look,
// which then queues the rescope itself; every later push sees the row.
func (s *Service) rescopeIfMoved(ctx context.Context, pr *store.PullRequest) {
	for _, side := range []struct {
		repo      int64
		ref, seen string
	}{{pr.FromRepoID, pr.FromRef, pr.FromSHA}, {pr.RepoID, pr.ToRef, pr.ToSHA}} {
		now, err := s.resolve(ctx, s.repos.Path(side.repo), side.ref)
		if err != nil || now != side.seen {
			s.enqueue(JobRescope, rescopeArgs{RepoID: side.repo, Refs: []string{side.ref}})
		}
	}
}

func containsParticipant(ps []store.Participant, id int64) bool {
	for _, p := range ps {
		if p.UserID == id {
			return true
		}
	}
	return false
}

func (s *Service) defaultReviewers(ctx context.Context, repoID int64, fromRef, toRef string) ([]int64, error) {
	st, err := s.GetSettings(ctx, repoID)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for _, r := range st.DefaultReviewers {
		if (r.Source == "" || branchperm.MatchRef(r.Source, fromRef)) && (r.Target == "" || branchperm.MatchRef(r.Target, toRef)) {
			ids = append(ids, r.Users...)
		}
	}
	return ids, nil
}

// syncFromRef points refs/pull-requests/N/from at the pull request's source
// commit, fetching it from the fork when it comes from one.
func (s *Service) syncFromRef(ctx context.Context, pr *store.PullRequest) error {
	ref := fmt.Sprintf("refs/pull-requests/%d/from", pr.Number)
	dir := s.repos.Path(pr.RepoID)
	cur, err := s.resolve(ctx, dir, ref)
	if err != nil {
		return err
	}
	if cur == pr.FromSHA {
		return nil
	}
	if pr.FromRepoID == pr.RepoID {
		return s.updateRef(ctx, pr.RepoID, nil, false, ref, pr.FromSHA, "")
	}
	if err := s.fetchRef(ctx, pr.RepoID, pr.FromRepoID, pr.FromRef, ref); err != nil {
		return err
	}
	// The branch may have moved between reading and fetching; whatever
	// was fetched is the newer state, and the rescope job that the move
	// started will record it.
	return nil
}

// Get reads pull request number of repository repoID.
func (s *Service) Get(ctx context.Context, repoID, number int64) (*store.PullRequest, error) {
	return s.ps.PullRequestByNumber(ctx, repoID, number)
}

// List lists pull requests of a repository.
func (s *Service) List(ctx context.Context, f store.PullFilter, pg store.Page) ([]store.PullRequest, error) {
	if f.State != "" && f.State != "ALL" && f.State != store.PullOpen && f.State != store.PullMerged && f.State != store.PullDeclined {
		return nil, problem.New(problem.Invalid, "invalid state %q (OPEN, MERGED, DECLINED or ALL)", f.State)
	}
	return s.ps.ListPullRequests(ctx, f, pg)
}

// Participants lists a pull request's author, reviewers and participants.
func (s *Service) Participants(ctx context.Context, pr *store.PullRequest) ([]store.Participant, error) {
	return s.ps.Participants(ctx, pr.ID)
}

// UpdateRequest changes a pull request; nil fields stay.
type UpdateRequest struct {
	Version     int64
	Title       *string
	Description *string
	ToRef       *string
	Reviewers   *[]int64
}

// Update edits title, description, target branch or reviewers.
func (s *Service) Update(ctx context.Context, p *auth.Principal, pr *store.PullRequest, req UpdateRequest) (*store.PullRequest, error) {
	if err := checkVersion(pr, req.Version); err != nil {
		return nil, err
	}
	if pr.State != store.PullOpen {
		return nil, errNotOpen(pr)
	}
	upd := *pr
	if req.Title != nil {
		if err := checkText("title", *req.Title, maxTitle, true); err != nil {
			return nil, err
		}
		upd.Title = *req.Title
	}
	if req.Description != nil {
		if err := checkText("description", *req.Description, maxText, false); err != nil {
			return nil, err
		}
		upd.Description = *req.Description
	}
	retarget := false
	if req.ToRef != nil {
		ref, err := branchRef(*req.ToRef)
		if err != nil {
			return nil, err
		}
		if ref != pr.ToRef {
			sha, err := s.resolve(ctx, s.repos.Path(pr.RepoID), ref)
			if err != nil {
				return nil, err
			}
			if sha == "" {
				return nil, problem.New(problem.NotFound, "branch %q not found", strings.TrimPrefix(ref, "refs/heads/"))
			}
			upd.ToRef, retarget = ref, true
		}
	}
	if err := s.ps.UpdatePullRequest(ctx, &upd, req.Version); err != nil {
		return nil, err
	}
	var added, removed []int64
	if req.Reviewers != nil {
		var err error
		if added, removed, err = s.setReviewers(ctx, &upd, *req.Reviewers); err != nil {
			return nil, err
		}
		s.notify(notify.Event{Kind: store.NotifyReviewRequested, PRID: pr.ID, ActorID: actorID(p), Users: added})
	}
	s.activity(ctx, pr.ID, actorID(p), "UPDATED", 0, nil)
	if retarget {
		s.enqueue(JobRescope, rescopeArgs{RepoID: upd.RepoID, Refs: []string{upd.ToRef}})
	}
	// Bitbucket sends pr:modified for title, description and target
	// changes, with the previous values, and pr:reviewer:updated for the
	// reviewers; an update that changes neither sends nothing.
	var mod webhook.PullEvent
	if upd.Title != pr.Title || upd.Description != pr.Description || retarget {
		mod.PreviousTitle, mod.PreviousDescription = &pr.Title, &pr.Description
		if retarget {
			prev := entity.Ref{ID: pr.ToRef, DisplayID: shortRef(pr.ToRef), Type: entity.Branch, LatestCommit: pr.ToSHA, LatestChangeset: pr.ToSHA}
			mod.PreviousTarget = &prev
		}
		s.announce(ctx, &upd, webhook.PRModified, p, mod)
	}
	if len(added) > 0 || len(removed) > 0 {
		s.announce(ctx, &upd, webhook.PRReviewerUpdated, p, webhook.PullEvent{AddedReviewers: added, RemovedReviewers: removed})
	}
	return &upd, nil
}

// setReviewers makes exactly ids the reviewers: new ones are added
// unapproved, dropped ones stay as participants with their status. It
// returns the users who became reviewers and those who stopped being.
func (s *Service) setReviewers(ctx context.Context, pr *store.PullRequest, ids []int64) (added, removed []int64, err error) {
	parts, err := s.ps.Participants(ctx, pr.ID)
	if err != nil {
		return nil, nil, err
	}
	want := map[int64]bool{}
	for _, id := range ids {
		if id != pr.AuthorID {
			want[id] = true
		}
	}
	for _, pt := range parts {
		switch {
		case pt.Role == store.RoleReviewer && !want[pt.UserID]:
			pt.Role = store.RoleParticipant
			if err := s.ps.PutParticipant(ctx, pr.ID, pt); err != nil {
				return nil, nil, err
			}
			removed = append(removed, pt.UserID)
		case pt.Role != store.RoleAuthor && want[pt.UserID]:
			if pt.Role != store.RoleReviewer {
				pt.Role = store.RoleReviewer
				if err := s.ps.PutParticipant(ctx, pr.ID, pt); err != nil {
					return nil, nil, err
				}
				added = append(added, pt.UserID)
			}
			delete(want, pt.UserID)
		}
	}
	for id := range want {
		if containsParticipant(parts, id) {
			continue
		}
		if err := s.ps.PutParticipant(ctx, pr.ID, store.Participant{UserID: id, Role: store.RoleReviewer, Status: store.StatusUnapproved}); err != nil {
			return nil, nil, err
		}
		added = append(added, id)
	}
	return added, removed, nil
}

// SetStatus records a user's review: APPROVED, NEEDS_WORK or UNAPPROVED.
// Anyone who can read the repository may review; a user who is not yet a
// reviewer becomes a participant. The author cannot review their own pull
// request.
func (s *Service) SetStatus(ctx context.Context, p *auth.Principal, pr *store.PullRequest, status string) (*store.Participant, error) {
	if actorID(p) == 0 {
		return nil, problem.New(problem.Forbidden, "only a user can review")
	}
	switch status {
	case store.StatusApproved, store.StatusNeedsWork, store.StatusUnapproved:
	default:
		return nil, problem.New(problem.Invalid, "invalid status %q (APPROVED, NEEDS_WORK or UNAPPROVED)", status)
	}
	if pr.State != store.PullOpen {
		return nil, errNotOpen(pr)
	}
	if p.UserID == pr.AuthorID {
		return nil, problem.New(problem.Conflict, "the author cannot review their own pull request")
	}
	parts, err := s.ps.Participants(ctx, pr.ID)
	if err != nil {
		return nil, err
	}
	pt := store.Participant{UserID: p.UserID, Role: store.RoleParticipant}
	for _, x := range parts {
		if x.UserID == p.UserID {
			pt = x
		}
	}
	prev := pt.Status
	pt.Status = status
	if err := s.ps.PutParticipant(ctx, pr.ID, pt); err != nil {
		return nil, err
	}
	if prev != status {
		action := map[string]string{store.StatusApproved: "APPROVED", store.StatusNeedsWork: "REVIEWED", store.StatusUnapproved: "UNAPPROVED"}[status]
		s.activity(ctx, pr.ID, p.UserID, action, 0, map[string]string{"status": status})
		key := map[string]string{store.StatusApproved: webhook.PRReviewerApproved, store.StatusNeedsWork: webhook.PRReviewerNeedsWork,
			store.StatusUnapproved: webhook.PRReviewerUnapprove}[status]
		if prev == "" {
			prev = store.StatusUnapproved // a new participant had not reviewed
		}
		s.announce(ctx, pr, key, p, webhook.PullEvent{Participant: &pt, PreviousStatus: prev})
	}
	return &pt, nil
}

// Decline closes an open pull request without merging.
func (s *Service) Decline(ctx context.Context, p *auth.Principal, pr *store.PullRequest, version int64) (*store.PullRequest, error) {
	if err := checkVersion(pr, version); err != nil {
		return nil, err
	}
	if pr.State != store.PullOpen {
		return nil, errNotOpen(pr)
	}
	upd := *pr
	upd.State = store.PullDeclined
	t := nowUTC()
	upd.ClosedAt = &t
	if err := s.ps.UpdatePullRequest(ctx, &upd, version); err != nil {
		return nil, err
	}
	s.activity(ctx, pr.ID, actorID(p), "DECLINED", 0, nil)
	s.emit(ctx, &upd, "pr:declined", p)
	s.notify(notify.Event{Kind: store.NotifyDeclined, PRID: pr.ID, ActorID: actorID(p), Version: upd.Version})
	return &upd, nil
}

// Delete removes a pull request, as its author or a repository
// administrator may (Bitbucket's rule), when it is still at version: its
// comments, activity and stored diff go with it, and so do its refs
// (refs/pull-requests/N/from and /merge, a system move like their
// creation). Watchers hear pr:deleted.
func (s *Service) Delete(ctx context.Context, p *auth.Principal, r *store.Repository, pr *store.PullRequest, version int64) error {
	if p == nil || p.UserID == 0 || p.UserID != pr.AuthorID {
		if err := s.auth.Authorize(ctx, p, auth.Resource{Repo: r}, auth.Admin); err != nil {
			if problem.Is(err, problem.NotFound) {
				return err
			}
			return problem.New(problem.Forbidden, "only the pull request's author or a repository administrator may delete it")
		}
	}
	if err := checkVersion(pr, version); err != nil {
		return err
	}
	if err := s.ps.DeletePullRequest(ctx, pr.ID, version); err != nil {
		return err
	}
	dir := s.repos.Path(pr.RepoID)
	for _, name := range []string{"from", "merge"} {
		ref := fmt.Sprintf("refs/pull-requests/%d/%s", pr.Number, name)
		if cur, _ := s.resolve(ctx, dir, ref); cur == "" {
			continue
		}
		// The row is gone: a ref left behind only wastes space, and
		// the next pull request with this number rewrites it.
		if err := s.updateRef(context.WithoutCancel(ctx), pr.RepoID, nil, false, ref, zeroOID, ""); err != nil {
			s.logger.Warn("delete pull request ref", "pr_id", pr.ID, "ref", ref, "err", err)
		}
	}
	s.logger.Info("pull request deleted", "repo_id", pr.RepoID, "pr_id", pr.ID, "number", pr.Number, "principal", p.String())
	s.emit(ctx, pr, "pr:deleted", p)
	return nil
}

// Reopen reopens a declined pull request and rescopes it.
func (s *Service) Reopen(ctx context.Context, p *auth.Principal, pr *store.PullRequest, version int64) (*store.PullRequest, error) {
	if err := checkVersion(pr, version); err != nil {
		return nil, err
	}
	if pr.State != store.PullDeclined {
		return nil, problem.New(problem.Conflict, "only a declined pull request can be reopened; #%d is %s", pr.Number, strings.ToLower(pr.State))
	}
	upd := *pr
	upd.State = store.PullOpen
	upd.ClosedAt = nil
	if err := s.ps.UpdatePullRequest(ctx, &upd, version); err != nil {
		return nil, err
	}
	s.activity(ctx, pr.ID, actorID(p), "REOPENED", 0, nil)
	s.enqueue(JobRescope, rescopeArgs{RepoID: upd.RepoID, Refs: []string{upd.ToRef}})
	s.emit(ctx, &upd, "pr:opened", p)
	return &upd, nil
}

// Activities pages through a pull request's activity, newest first.
func (s *Service) Activities(ctx context.Context, pr *store.PullRequest, pg store.Page) ([]store.PullActivity, error) {
	return s.ps.ListActivities(ctx, pr.ID, pg)
}
