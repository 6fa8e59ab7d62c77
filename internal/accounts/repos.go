package accounts

import (
	"context"
	"errors"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitref"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// NewRepository is a repository to create or fork. The slug derives from
// Name. DefaultBranch "" is "main" (a fork: the origin's); it may be given
// short ("main") or in full ("refs/heads/main").
type NewRepository struct {
	Name, Description, DefaultBranch string
	Public                           bool
}

var errNoRepos = errors.New("accounts: no repository manager")

// CreateRepository creates a repository in proj, row and directory or
// neither; PROJECT_WRITE on proj.
func (s *Service) CreateRepository(ctx context.Context, a Actor, proj *store.Project, in NewRepository) (*store.Repository, error) {
	if err := s.authorize(ctx, a, auth.Resource{Project: proj}, auth.Write); err != nil {
		return nil, err
	}
	r := &store.Repository{ProjectID: proj.ID, ProjectKey: proj.Key}
	if err := fillRepo(r, in); err != nil {
		return nil, err
	}
	if in.DefaultBranch != "" {
		b, err := BranchName("default branch", in.DefaultBranch)
		if err != nil {
			return nil, err
		}
		r.DefaultBranch = b
	}
	if err := s.provision(ctx, r); err != nil {
		return nil, err
	}
	s.logger.Info("repository created", "project", proj.Key, "repo", r.Slug, "repo_id", r.ID, "actor", a.String())
	return r, nil
}

// ForkRepository forks origin into target (origin's own project when
// target is nil); REPO_READ on origin and PROJECT_WRITE on target. Name ""
// keeps the origin's name, and the fork starts with its default branch.
func (s *Service) ForkRepository(ctx context.Context, a Actor, origin *store.Repository, target *store.Project, in NewRepository) (*store.Repository, error) {
	if err := s.authorize(ctx, a, auth.Resource{Repo: origin}, auth.Read); err != nil {
		return nil, err
	}
	if target == nil {
		p, err := s.st.ProjectByID(ctx, origin.ProjectID)
		if err != nil {
			return nil, err
		}
		target = p
	}
	if err := s.authorize(ctx, a, auth.Resource{Project: target}, auth.Write); err != nil {
		if target.ID == origin.ProjectID && problem.Is(err, problem.NotFound) {
			// The caller reads a repository of this project, so its
			// existence is no secret; say what is missing.
			return nil, problem.New(problem.Forbidden, "you do not have permission to create repositories in project %q", target.Key)
		}
		return nil, err
	}
	fork := &store.Repository{
		ProjectID: target.ID, ProjectKey: target.Key, Name: origin.Name,
		Description: origin.Description, DefaultBranch: origin.DefaultBranch, ForkOf: origin.ID,
	}
	if in.Name == "" {
		in.Name = origin.Name
	}
	if in.Description == "" {
		in.Description = origin.Description
	}
	if err := fillRepo(fork, in); err != nil {
		return nil, err
	}
	if err := s.provision(ctx, fork); err != nil {
		return nil, err
	}
	// Refs appeared without a ref transaction; readers caching by
	// generation must see a new one.
	if err := s.st.BumpGeneration(ctx, fork.ID); err != nil {
		s.logger.Warn("bump generation after fork", "repo_id", fork.ID, "err", err)
	}
	s.logger.Info("repository forked", "origin_id", origin.ID, "repo_id", fork.ID, "actor", a.String())
	return fork, nil
}

func fillRepo(r *store.Repository, in NewRepository) error {
	if err := store.ValidateRepoName(in.Name); err != nil {
		return err
	}
	if err := checkText("repository description", in.Description, maxDescriptionText); err != nil {
		return err
	}
	r.Name, r.Description, r.Public = in.Name, in.Description, in.Public
	return nil
}

func (s *Service) provision(ctx context.Context, r *store.Repository) error {
	if s.repos == nil {
		return errNoRepos
	}
	return repo.Provision(ctx, s.st, s.repos, r)
}

// RepositoryChange is a change to a repository; nil fields stay as they
// are. A new name gives a new slug, as in Bitbucket. Project moves the
// repository. DefaultBranch is accepted only unchanged (so a body read
// from a GET round-trips): moving HEAD is SetDefaultBranch.
type RepositoryChange struct {
	Name, Description, DefaultBranch *string
	Public                           *bool
	Project                          *store.Project
}

// UpdateRepository changes r; REPO_ADMIN on r, and PROJECT_WRITE on the
// project it moves to.
func (s *Service) UpdateRepository(ctx context.Context, a Actor, r *store.Repository, ch RepositoryChange) (*store.Repository, error) {
	if err := s.authorize(ctx, a, auth.Resource{Repo: r}, auth.Admin); err != nil {
		return nil, err
	}
	next := *r
	if ch.Name != nil && *ch.Name != r.Name {
		if err := store.ValidateRepoName(*ch.Name); err != nil {
			return nil, err
		}
		next.Name, next.Slug = *ch.Name, store.Slugify(*ch.Name)
		if err := store.ValidateSlug(next.Slug); err != nil {
			return nil, err
		}
	}
	if ch.Description != nil {
		if err := checkText("repository description", *ch.Description, maxDescriptionText); err != nil {
			return nil, err
		}
		next.Description = *ch.Description
	}
	if ch.Public != nil {
		next.Public = *ch.Public
	}
	if ch.DefaultBranch != nil && *ch.DefaultBranch != "" &&
		strings.TrimPrefix(*ch.DefaultBranch, "refs/heads/") != r.DefaultBranch {
		return nil, problem.New(problem.Invalid, "the default branch is changed on its own, not with the other settings")
	}
	if ch.Project != nil && ch.Project.ID != r.ProjectID {
		if err := s.authorize(ctx, a, auth.Resource{Project: ch.Project}, auth.Write); err != nil {
			return nil, err
		}
		next.ProjectID, next.ProjectKey = ch.Project.ID, ch.Project.Key
	}
	if err := s.st.UpdateRepo(ctx, &next); err != nil {
		return nil, err
	}
	s.logger.Info("repository updated", "repo_id", next.ID, "project", next.ProjectKey, "repo", next.Slug, "actor", a.String())
	return &next, nil
}

// SetDefaultBranch moves r's HEAD to branch; REPO_ADMIN. As in Bitbucket
// the branch need not exist yet (an empty repository, or a branch about to
// be pushed).
func (s *Service) SetDefaultBranch(ctx context.Context, a Actor, r *store.Repository, branch string) error {
	if err := s.authorize(ctx, a, auth.Resource{Repo: r}, auth.Admin); err != nil {
		return err
	}
	short, err := BranchName("default branch", branch)
	if err != nil {
		return err
	}
	if s.repos == nil {
		return errNoRepos
	}
	if err := s.repos.SetDefaultBranch(ctx, r.ID, short); err != nil {
		return err
	}
	next := *r
	next.DefaultBranch = short
	if err := s.st.UpdateRepo(ctx, &next); err != nil {
		return err
	}
	r.DefaultBranch = short
	// HEAD moved without a ref transaction (symbolic-ref runs no hook), so
	// caches keyed on the refs generation must be told.
	if err := s.st.BumpGeneration(ctx, r.ID); err != nil {
		return err
	}
	s.logger.Info("default branch set", "repo_id", r.ID, "branch", short, "actor", a.String())
	return nil
}

// DeleteRepository deletes r (refused while forks borrow its objects);
// REPO_ADMIN.
func (s *Service) DeleteRepository(ctx context.Context, a Actor, r *store.Repository) error {
	if err := s.authorize(ctx, a, auth.Resource{Repo: r}, auth.Admin); err != nil {
		return err
	}
	if s.repos == nil {
		return errNoRepos
	}
	if err := repo.Remove(ctx, s.st, s.repos, r); err != nil {
		return err
	}
	s.logger.Info("repository deleted", "repo_id", r.ID, "project", r.ProjectKey, "repo", r.Slug, "actor", a.String())
	return nil
}

// BranchName turns a branch as people give it ("main" or
// "refs/heads/main") into its short name, by git's rules and ours (no
// component beginning with '-'); field names it in the message.
func BranchName(field, name string) (string, error) {
	short := strings.TrimPrefix(name, "refs/heads/")
	err := gitref.CheckBranchName(short)
	if err == nil {
		err = gitref.CheckRefName("refs/heads/" + short)
	}
	if err != nil {
		if problem.KindOf(err) == problem.Invalid {
			return "", problem.New(problem.Invalid, "%s: %s", field, problem.Message(err))
		}
		return "", err
	}
	return short, nil
}
