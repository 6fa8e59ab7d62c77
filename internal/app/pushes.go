package app

import (
	"context"
	"time"

	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// What a ref move passes and what runs after it is registered here, and
// only here: no service registers itself on the hooks server.
//
//   - the push policy (installPushPolicy): every user's ref move;
//   - OnPushed, when a request that moved refs ends: housekeeping is
//     queued, and webhooks announce repo:refs_changed;
//   - OnRefsChanged, after each committed ref transaction: pull requests
//     whose branches moved are rescoped, the local pack cache drops the
//     repository's older entries (invalidateCacheOnRefMoves, once the
//     cache is built) and, in a cluster, the other nodes are told
//     (cluster.go, with the bus).

// registerRefWork installs the push policy and the listeners of every
// service newPulls built. app.New calls it right after newPulls, so the
// admin CLI's ref moves are judged and announced too.
func (a *App) registerRefWork() {
	a.installPushPolicy()
	a.Hooks.OnPushed(a.housekeepAfterPush())
	// Every ref move a request made (push, REST, merge) is announced as
	// repo:refs_changed once the request ends.
	a.Hooks.OnPushed(a.Webhooks.OnPushed)
	a.Hooks.OnRefsChanged(a.Pulls.RefsChanged)
}

// housekeepAfterPush queues a repository's housekeeping after a push.
// Housekeeping never runs inside a push: it is queued, delayed so a burst
// of pushes is housekept once, and one pending job per repository is
// enough however many pushes land. The job this node queued a moment ago
// has not started yet (it is delayed), so a push meanwhile skips the
// database round trip that River's uniqueness check would turn into a
// no-op anyway.
func (a *App) housekeepAfterPush() func(hooks.Request, []hooks.RefUpdate) {
	queued := newRecentSet(housekeepingDelay - time.Second)
	return func(req hooks.Request, _ []hooks.RefUpdate) {
		now := time.Now()
		if queued.has(req.RepoID, now) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Jobs.Enqueue(ctx, JobHousekeeping, map[string]int64{"repo_id": req.RepoID}, jobs.Unique(), jobs.Delay(housekeepingDelay)); err != nil {
			a.Logger.Warn("enqueue housekeeping", "component", "app", "repo_id", req.RepoID, "err", err)
			return
		}
		queued.add(req.RepoID, now)
	}
}

// invalidateCacheOnRefMoves frees the pack cache's entries of a
// repository whose refs moved. Entries of an older generation can never
// be hit again; the event only frees their disk space early.
func (a *App) invalidateCacheOnRefMoves() {
	a.Hooks.OnRefsChanged(func(repoID int64, _ []hooks.RefUpdate) { a.Cache.Invalidate(repoID) })
}

// pushCheck is one part of the push policy, given the repository read
// once for all of them.
type pushCheck func(ctx context.Context, req hooks.Request, rp *store.Repository, updates []hooks.RefUpdate, quarantineEnv []string) error

// pushPolicy is the hooks.Policy every user's ref move passes: pushes in
// pre-receive (quarantineEnv set), REST, web and merge moves in the
// reference-transaction's prepared phase (quarantineEnv nil). It reads the
// repository, then runs each check in order; the first refusal answers.
type pushPolicy struct {
	st     store.Store
	checks []pushCheck
}

func (p *pushPolicy) CheckPush(ctx context.Context, req hooks.Request, updates []hooks.RefUpdate, quarantineEnv []string) error {
	rp, err := p.st.RepoByID(ctx, req.RepoID)
	if err != nil {
		return err
	}
	for _, check := range p.checks {
		if err := check(ctx, req, rp, updates, quarantineEnv); err != nil {
			return err
		}
	}
	return nil
}

// installPushPolicy sets the one push policy: what a push may add
// (git.max_blob_size, git.max_tree_depth, checked in quarantine), what a
// push to a fork may borrow from its parent (pull, forkpush.go), then
// branch permissions (branchperm).
func (a *App) installPushPolicy() {
	limits := repo.PushLimits{MaxBlobSize: int64(a.Config.Git.MaxBlobSize), MaxTreeDepth: a.Config.Git.MaxTreeDepth}
	objectLimits := func(ctx context.Context, _ hooks.Request, rp *store.Repository, updates []hooks.RefUpdate, qenv []string) error {
		if qenv == nil {
			return nil // not a push: the objects are in the repository already
		}
		var tips []string
		for _, u := range updates {
			if !u.Deleted() {
				tips = append(tips, u.New)
			}
		}
		return a.Repos.CheckPushedObjects(ctx, a.Repos.Path(rp.ID), qenv, tips, limits)
	}
	a.Hooks.SetPolicy(&pushPolicy{st: a.Store, checks: []pushCheck{objectLimits, a.Pulls.CheckForkPush, a.BranchPerms.Check}})
}
