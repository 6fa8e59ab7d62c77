package app

import (
	"context"

	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

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
