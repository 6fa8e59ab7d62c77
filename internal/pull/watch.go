package pull

import (
	"context"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Watch makes userID a watcher of the pull request: internal/notify then
// tells them of its comments, merge and decline. The caller has checked
// that the user may read the repository. Watching again is no error.
func (s *Service) Watch(ctx context.Context, pr *store.PullRequest, userID int64) error {
	if userID == 0 {
		return problem.New(problem.Unauthenticated, "watching needs a signed-in user")
	}
	return s.ps.Watch(ctx, pr.ID, userID)
}

// Unwatch stops userID watching the pull request (not watching is no
// error).
func (s *Service) Unwatch(ctx context.Context, pr *store.PullRequest, userID int64) error {
	if userID == 0 {
		return problem.New(problem.Unauthenticated, "watching needs a signed-in user")
	}
	return s.ps.Unwatch(ctx, pr.ID, userID)
}

// Watchers are the users watching the pull request, in id order.
func (s *Service) Watchers(ctx context.Context, pr *store.PullRequest) ([]int64, error) {
	return s.ps.Watchers(ctx, pr.ID)
}
