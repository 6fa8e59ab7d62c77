package store_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/pgtest"
)

// BenchmarkGitRun is what recording a git run adds to every push (one
// BeginGitRun before git starts, one EndGitRun after it exits), beside the
// baseline a push already pays: one ref transaction recorded and ended.
func BenchmarkGitRun(b *testing.B) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		b.Run(dialect, func(b *testing.B) {
			url := "sqlite://" + filepath.Join(b.TempDir(), "sluice.db")
			if dialect == "postgres" {
				url = pgtest.URL(b)
			}
			ctx := context.Background()
			db, err := store.Open(ctx, url, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			p := &store.Project{Key: "P", Name: "P"}
			if err := db.CreateProject(ctx, p); err != nil {
				b.Fatal(err)
			}
			r := &store.Repository{ProjectID: p.ID, Name: "r"}
			if err := db.CreateRepo(ctx, r); err != nil {
				b.Fatal(err)
			}
			b.Run("git-run", func(b *testing.B) {
				for b.Loop() {
					id, err := db.BeginGitRun(ctx, r.ID, "node-1", "inst")
					if err != nil {
						b.Fatal(err)
					}
					if err := db.EndGitRun(ctx, id); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("ref-txn-baseline", func(b *testing.B) {
				for b.Loop() {
					id, err := db.BeginRefTxn(ctx, r.ID, "node-1", "inst", "0 1 refs/heads/main\n")
					if err != nil {
						b.Fatal(err)
					}
					if err := db.EndRefTxn(ctx, id, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
