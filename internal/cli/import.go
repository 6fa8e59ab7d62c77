package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/bulkimport"
)

func adminImport(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var tokens string
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Load users, groups, projects, repositories and pull requests from an NDJSON file (- for stdin)",
		Long: `Load an import file: one JSON record per line (user, group, project, repository,
pull_request, pull_request_activity, token, ssh_key; see docs/import.md). What exists is
skipped by name, so importing a file twice changes nothing and an interrupted import is
finished by running it again. Token records mint tokens whose secrets are appended to
--tokens as "user secret" lines.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := io.Reader(os.Stdin)
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				c, err := importFile(ctx, a, in, tokens)
				printImported(stdout, c)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&tokens, "tokens", "", "file the secrets of minted tokens are appended to (mode 0600)")
	return cmd
}

// importFile runs an import into a's database and repositories; tokens
// names the file minted secrets are appended to ("" refuses tokens).
func importFile(ctx context.Context, a *app.App, in io.Reader, tokens string) (bulkimport.Counts, error) {
	d := bulkimport.Deps{DB: a.DB, Repos: a.Repos, Auth: a.Auth, Logger: a.Logger}
	if tokens != "" {
		f, err := os.OpenFile(tokens, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return bulkimport.Counts{}, err
		}
		defer f.Close()
		d.Tokens = f
	}
	return bulkimport.Import(ctx, d, in)
}

func printImported(w io.Writer, c bulkimport.Counts) {
	fmt.Fprintf(w, "imported %d users, %d groups, %d projects, %d repositories, %d pull requests, %d comments, %d tokens, %d ssh keys\n",
		c.Users, c.Groups, c.Projects, c.Repositories, c.PullRequests, c.Comments, c.Tokens, c.SSHKeys)
}
