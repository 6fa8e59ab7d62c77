package repo

import (
	"context"
	"fmt"

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
