package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// maxKeyFile bounds what ssh-key add reads: one authorized_keys line is at
// most 16 KiB (auth's own limit), and a .pub file holds one line.
const maxKeyFile = 16<<10 + 1

func adminSSHKey(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "ssh-key", Short: "Manage SSH keys and repository access keys"}
	cmd.AddCommand(adminSSHKeyAdd(g, stdout, stderr))
	return cmd
}

func adminSSHKeyAdd(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var username, keyFile, label, repoRef, scope string
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a user's SSH public key, or an access key bound to one repository",
		Long: "Add a public key in authorized_keys format (a .pub file; - reads standard input).\n" +
			"With --username the key authenticates that user; with --repo PROJECT/slug it is an\n" +
			"access key that reaches that repository only, with --scope read or write.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (username == "") == (repoRef == "") {
				return problem.New(problem.Invalid, "give exactly one of --username and --repo")
			}
			sc := store.Scope(scope)
			if repoRef != "" && sc != store.ScopeRead && sc != store.ScopeWrite {
				return problem.New(problem.Invalid, "--scope: %q must be read or write", scope)
			}
			if repoRef == "" && cmd.Flags().Changed("scope") {
				return problem.New(problem.Invalid, "--scope applies to access keys (--repo) only; a user's key acts as the user")
			}
			line, err := readKeyFile(cmd.InOrStdin(), keyFile)
			if err != nil {
				return err
			}
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				var k *store.SSHKey
				owner := ""
				if username != "" {
					u, err := a.Store.UserByName(ctx, username)
					if err != nil {
						return err
					}
					if k, err = a.Accounts.AddSSHKey(ctx, cliActor, u, line, label); err != nil {
						return err
					}
					owner = "user " + u.Name
				} else {
					key, slug, err := splitRepoRef(repoRef)
					if err != nil {
						return err
					}
					r, err := a.Store.RepoBySlug(ctx, key, slug)
					if err != nil {
						return err
					}
					if k, err = a.Accounts.AddAccessKey(ctx, cliActor, r, line, label, sc); err != nil {
						return err
					}
					owner = fmt.Sprintf("repository %s/%s (%s access)", r.ProjectKey, r.Slug, sc)
				}
				fmt.Fprintf(stdout, "added SSH key %s (id %d) for %s\n", k.Fingerprint, k.ID, owner)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&username, "username", "", "user the key authenticates")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "public key file, e.g. ~/.ssh/id_ed25519.pub; - for standard input (required)")
	cmd.Flags().StringVar(&label, "label", "", "label (default: the key's comment)")
	cmd.Flags().StringVar(&repoRef, "repo", "", "PROJECT/slug: make an access key for this repository")
	cmd.Flags().StringVar(&scope, "scope", "read", "access key scope: read or write")
	cmd.MarkFlagRequired("key-file")
	return cmd
}

// readKeyFile reads one public key from path ("-" is stdin), refusing
// anything larger than a key could be.
func readKeyFile(stdin io.Reader, path string) (string, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", problem.Wrap(problem.Invalid, err, fmt.Sprintf("--key-file: cannot read %q", path))
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxKeyFile))
	if err != nil {
		return "", problem.Wrap(problem.Invalid, err, "--key-file: read failed")
	}
	if len(b) >= maxKeyFile {
		return "", problem.New(problem.Invalid, "--key-file: larger than any public key; give the .pub file")
	}
	if strings.Contains(string(b), "PRIVATE KEY") {
		return "", problem.New(problem.Invalid, "--key-file: this is a private key; give the .pub file")
	}
	return string(b), nil
}
