package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/datagen"
)

var errImportStopped = errors.New("import stopped")

func newDatagen(stdout, stderr io.Writer) *cobra.Command {
	var g globalFlags
	var o datagen.Options
	var out string
	cmd := &cobra.Command{
		Use:   "datagen",
		Short: "Generate a load-profile data set (users, projects, repositories, pull requests)",
		Long: `Generate a data set in the proportions of Bitbucket's load profiles, scaled:
small (6,200 repositories, 3,000 users, 118,000 pull requests), medium, large, xlarge.
Deterministic from --seed; re-runnable (what exists is kept). Repositories share a few
generated histories through alternates, so --profile small --scale 0.05 fits in a few GB.

The data set is an import file (see docs/import.md) loaded as 'sluice admin import'
loads it; --out writes the file instead, for a node elsewhere (copy the history
directory along: the file names its repositories by path).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			counts, err := o.Plan()
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "data set %s × %g (seed %d): %d users, %d groups, %d projects, %d repositories, %d pull requests, %d comments\n",
				o.Profile, o.Scale, o.Seed, counts.Users, counts.Groups, counts.Projects, counts.Repositories, counts.PullRequests, counts.Comments)
			if out != "" {
				return datagenToFile(cmd.Context(), o, out, stdout, stderr)
			}
			return withApp(cmd, &g, stderr, func(ctx context.Context, a *app.App) error {
				if o.TokensFile == "" && o.LoadUsers > 0 {
					o.TokensFile = filepath.Join(a.Config.Data.Dir, "e3-tokens")
				}
				if o.SeedCache == "" {
					// Kept beside the data: the repositories hard-link its
					// packs, so it costs next to no space and spares a
					// re-run generating the histories again.
					o.SeedCache = filepath.Join(a.Config.Data.Dir, "datagen-histories")
				}
				o.Git = a.Config.Git.Binary
				// The generator writes the file into the importer as it
				// goes; the pipe's back pressure keeps the progress bar
				// honest about the import.
				pr, pw := io.Pipe()
				type result struct {
					rep datagen.Report
					err error
				}
				done := make(chan result, 1)
				go func() {
					rep, err := datagen.Write(ctx, o, pw, stderr)
					pw.CloseWithError(err)
					done <- result{rep, err}
				}()
				c, err := importFile(ctx, a, pr, o.TokensFile)
				pr.CloseWithError(errImportStopped)
				gen := <-done
				// The side that failed first says why; the other only
				// saw its pipe close.
				if gen.err != nil && !errors.Is(gen.err, errImportStopped) {
					return gen.err
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "created %d users, %d groups, %d projects, %d repositories (%d seed histories), %d pull requests, %d comments in %s; repositories take %.1f MB on disk\n",
					c.Users, c.Groups, c.Projects, c.Repositories, gen.rep.Seeds, c.PullRequests, c.Comments, gen.rep.Took.Round(1e6),
					float64(datagen.DiskUsage(a.Config.Storage.Repositories))/1e6)
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
	f.StringVar(&o.SeedCache, "history-cache", "", "directory that keeps generated histories between runs (default DATA/datagen-histories)")
	f.StringVar(&out, "out", "", "write the import file here instead of loading it (needs --history-cache)")
	return cmd
}

// datagenToFile writes the data set's import file without a node.
func datagenToFile(ctx context.Context, o datagen.Options, path string, stdout, stderr io.Writer) error {
	if o.SeedCache == "" {
		return fmt.Errorf("--out needs --history-cache: the file names the histories by path")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	rep, err := datagen.Write(ctx, o, f, stderr)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d records to %s in %s; load it with: sluice admin import %s", rep.Records, path, rep.Took.Round(1e6), path)
	if o.LoadUsers > 0 {
		fmt.Fprintf(stdout, " --tokens FILE")
	}
	fmt.Fprintln(stdout)
	return nil
}
