package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/datagen"
)

func newDatagen(stdout, stderr io.Writer) *cobra.Command {
	var g globalFlags
	var o datagen.Options
	cmd := &cobra.Command{
		Use:   "datagen",
		Short: "Generate a load-profile data set (users, projects, repositories, pull requests)",
		Long: `Generate a data set in the proportions of Bitbucket's load profiles, scaled:
small (6,200 repositories, 3,000 users, 118,000 pull requests), medium, large, xlarge.
Deterministic from --seed; re-runnable (what exists is kept). Repositories share a few
generated histories through alternates, so --profile small --scale 0.05 fits in a few GB.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, &g, stderr, func(ctx context.Context, a *app.App) error {
				if o.TokensFile == "" && o.LoadUsers > 0 {
					o.TokensFile = filepath.Join(a.Config.Data.Dir, "e3-tokens")
				}
				o.Git = a.Config.Git.Binary
				counts, err := o.Plan()
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "data set %s × %g (seed %d): %d users, %d groups, %d projects, %d repositories, %d pull requests, %d comments\n",
					o.Profile, o.Scale, o.Seed, counts.Users, counts.Groups, counts.Projects, counts.Repositories, counts.PullRequests, counts.Comments)
				rep, err := datagen.Generate(ctx, datagen.Deps{DB: a.DB, Repos: a.Repos, Auth: a.Auth, Logger: a.Logger, Progress: stderr}, o)
				if err != nil {
					return err
				}
				c := rep.Created
				fmt.Fprintf(stdout, "created %d users, %d groups, %d projects, %d repositories (%d seed histories), %d pull requests, %d comments in %s; repositories take %.1f MB on disk\n",
					c.Users, c.Groups, c.Projects, c.Repositories, rep.Seeds, c.PullRequests, c.Comments, rep.Took.Round(1e6), float64(rep.DiskBytes)/1e6)
				if o.LoadUsers > 0 {
					fmt.Fprintf(stdout, "load users' tokens: %s\n", o.TokensFile)
					if o.KeysFile != "" {
						fmt.Fprintf(stdout, "load users' ssh keys: %s\n", o.KeysFile)
					}
				}
				return nil
			})
		},
	}
	g.register(cmd, false)
	f := cmd.Flags()
	f.StringVar(&o.Profile, "profile", "small", "load profile: small, medium, large or xlarge")
	f.Float64Var(&o.Scale, "scale", 0.01, "fraction of the profile to generate")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the generator")
	f.IntVar(&o.Seeds, "histories", 0, "distinct generated histories the repositories share (default one per 100 repositories, 1–8)")
	f.IntVar(&o.Commits, "commits", 0, "commits per generated history (default 5500, about 14 MB)")
	f.IntVar(&o.LoadUsers, "load-users", 0, "load users (load-0001 …) to create, each with a write token")
	f.StringVar(&o.LoadPassword, "load-password", "", "password of the load users (default: none, tokens only)")
	f.StringVar(&o.TokensFile, "tokens", "", "file for the load users' tokens (default DATA/e3-tokens)")
	f.StringVar(&o.KeysFile, "load-keys", "", "give every load user an SSH key, kept in this file (mode 0600) and registered")
	f.StringVar(&o.SeedCache, "history-cache", "", "directory that keeps generated histories between runs")
	return cmd
}
