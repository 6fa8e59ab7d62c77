package branchperm

import (
	"context"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// The REST routes' side (branch-permissions/2.0): a scope is a repository
// (projectID 0) or a project (repoID 0), and a restriction read or
// deleted through one scope must belong to it.

// Restrictions lists the restrictions of a repository (projectID 0) or a
// project (repoID 0).
func (s *Service) Restrictions(ctx context.Context, repoID, projectID int64) ([]store.BranchRestriction, error) {
	return s.rs.ListRestrictions(ctx, repoID, projectID)
}

// CreateRestriction validates and stores a restriction.
func (s *Service) CreateRestriction(ctx context.Context, r *store.BranchRestriction) error {
	if err := ValidRestriction(r); err != nil {
		return err
	}
	return s.rs.CreateRestriction(ctx, r)
}

// Restriction reads one restriction of a repository or project scope.
func (s *Service) Restriction(ctx context.Context, repoID, projectID, id int64) (*store.BranchRestriction, error) {
	r, err := s.rs.RestrictionByID(ctx, id)
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
	return s.rs.DeleteRestriction(ctx, id)
}
