package repo

import (
	"context"
	"fmt"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Provision creates a repository: validates the name, derives the slug,
// records it in the store (which assigns the id), then creates it on disk
// at the path derived from that id. If the disk step fails the database
// row is removed again, so a repository is either fully there or not at all.
// The admin CLI and the REST API both create repositories through here.
func Provision(ctx context.Context, st store.Store, m *Manager, r *store.Repository) error {
	if err := store.ValidateRepoName(r.Name); err != nil {
		return err
	}
	if r.Slug == "" {
		r.Slug = store.Slugify(r.Name)
	}
	if err := store.ValidateSlug(r.Slug); err != nil {
		return err
	}
	if r.DefaultBranch == "" {
		r.DefaultBranch = "main"
	}
	if err := st.CreateRepo(ctx, r); err != nil {
		return err
	}
	var err error
	if r.ForkOf != 0 {
		err = m.Fork(ctx, r.ForkOf, r.ID)
	} else {
		err = m.Create(ctx, r.ID, r.DefaultBranch)
	}
	if err != nil {
		if derr := st.DeleteRepo(context.WithoutCancel(ctx), r.ID); derr != nil {
			return fmt.Errorf("create repository on disk: %w (and removing its record failed: %v)", err, derr)
		}
		return fmt.Errorf("create repository on disk: %w", err)
	}
	return nil
}

// Remove deletes repository r: refused (Conflict) while forks borrow its
// objects through alternates; otherwise the row goes first — from then on
// nobody can reach the repository, and a failure removing the directory
// leaves only garbage on disk (logged), never a repository in the database
// without its data. The REST API and the web UI both delete through here.
func Remove(ctx context.Context, st store.Store, m *Manager, r *store.Repository) error {
	forks, err := st.CountForks(ctx, r.ID)
	if err != nil {
		return err
	}
	if forks > 0 {
		return problem.New(problem.Conflict, "repository %q has %d fork(s); delete them first", r.Slug, forks)
	}
	if err := st.DeleteRepo(ctx, r.ID); err != nil {
		return err
	}
	if err := m.Delete(context.WithoutCancel(ctx), r.ID); err != nil {
		m.logger.Error("remove deleted repository from disk", "repo_id", r.ID, "err", err)
	}
	return nil
}
