package pull

import (
	"context"

	"github.com/sluice-scm/sluice/internal/store"
)

// maxDashboard bounds the pull requests of one dashboard list.
const maxDashboard = 100

// Authored lists up to limit open pull requests userID created, across
// repositories, in those the user may read (the store narrows in SQL; a
// transport still authorizes each row), most recently updated first.
func (s *Service) Authored(ctx context.Context, userID int64, limit int) ([]store.DashboardPull, error) {
	if userID == 0 {
		return nil, nil
	}
	return s.ps.OpenPullRequestsAuthoredBy(ctx, userID, min(max(limit, 1), maxDashboard))
}

// ToReview lists up to limit open pull requests waiting for userID's
// review (a reviewer still UNAPPROVED), across repositories, like
// Authored.
func (s *Service) ToReview(ctx context.Context, userID int64, limit int) ([]store.DashboardPull, error) {
	if userID == 0 {
		return nil, nil
	}
	return s.ps.OpenPullRequestsToReview(ctx, userID, min(max(limit, 1), maxDashboard))
}
