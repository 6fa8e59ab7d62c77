package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// cliActor is whoever runs the admin CLI: they reach the database
// directly, so the accounts service checks their input but not their
// permissions.
var cliActor = accounts.System("cli")

func newAdmin(stdout, stderr io.Writer) *cobra.Command {
	var g globalFlags
	admin := &cobra.Command{Use: "admin", Short: "Administer users, projects, repositories and permissions"}
	g.register(admin, false)

	user := &cobra.Command{Use: "user", Short: "Manage users"}
	user.AddCommand(adminUserCreate(&g, stdout, stderr))
	token := &cobra.Command{Use: "token", Short: "Manage access tokens"}
	token.AddCommand(adminTokenCreate(&g, stdout, stderr))
	project := &cobra.Command{Use: "project", Short: "Manage projects"}
	project.AddCommand(adminProjectCreate(&g, stdout, stderr))
	repos := &cobra.Command{Use: "repo", Short: "Manage repositories"}
	repos.AddCommand(adminRepoCreate(&g, stdout, stderr), adminRepoGC(&g, stdout, stderr))
	admin.AddCommand(user, token, project, repos, adminGrant(&g, stdout, stderr))
	admin.AddCommand(adminSSHKey(&g, stdout, stderr))
	admin.AddCommand(adminCluster(&g, stdout, stderr))
	admin.AddCommand(adminImport(&g, stdout, stderr))
	return admin
}

func adminUserCreate(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var name, password, display, email string
	var isAdmin bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a user",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				u, err := a.Accounts.CreateUser(ctx, cliActor, accounts.NewUser{
					Name: name, DisplayName: display, Email: email, Password: password, SysAdmin: isAdmin,
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "created user %s (id %d)\n", u.Name, u.ID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&name, "username", "", "login name (required)")
	cmd.Flags().StringVar(&password, "password", "", "password (required)")
	cmd.Flags().StringVar(&display, "display-name", "", "display name")
	cmd.Flags().StringVar(&email, "email", "", "email address")
	cmd.Flags().BoolVar(&isAdmin, "admin", false, "grant the global SYS_ADMIN permission")
	cmd.MarkFlagRequired("username")
	cmd.MarkFlagRequired("password")
	return cmd
}

// parseExpiry reads "30d", "12h", "90m" into a lifetime; "" is never.
// The accounts service bounds it.
func parseExpiry(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 || days > 3650 {
			return 0, problem.New(problem.Invalid, "--expires: %q is not a number of days between 1 and 3650 (e.g. 30d)", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, problem.New(problem.Invalid, "--expires: %q is not a duration (e.g. 30d, 12h)", s)
	}
	return d, nil
}

func adminTokenCreate(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var username, name, scope, expires string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a personal access token; prints the token alone",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exp, err := parseExpiry(expires)
			if err != nil {
				return err
			}
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				u, err := a.Store.UserByName(ctx, username)
				if err != nil {
					return err
				}
				secret, _, err := a.Accounts.CreateToken(ctx, cliActor, u, accounts.NewToken{Name: name, Scope: store.Scope(scope), Lifetime: exp})
				if err != nil {
					return err
				}
				fmt.Fprintln(stdout, secret)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&username, "username", "", "owner of the token (required)")
	cmd.Flags().StringVar(&name, "name", "", "token name (required)")
	cmd.Flags().StringVar(&scope, "scope", "read", "read, write or admin")
	cmd.Flags().StringVar(&expires, "expires", "", "lifetime, e.g. 30d or 12h (default: never)")
	cmd.MarkFlagRequired("username")
	cmd.MarkFlagRequired("name")
	return cmd
}

func adminProjectCreate(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var key, name, description string
	var public bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a project",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				p, err := a.Accounts.CreateProject(ctx, cliActor, accounts.NewProject{Key: key, Name: name, Description: description, Public: public})
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "created project %s (id %d)\n", p.Key, p.ID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "project key, e.g. PLAT (required)")
	cmd.Flags().StringVar(&name, "name", "", "project name")
	cmd.Flags().StringVar(&description, "description", "", "description")
	cmd.Flags().BoolVar(&public, "public", false, "make every repository in the project readable anonymously")
	cmd.MarkFlagRequired("key")
	return cmd
}

func adminRepoCreate(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var projectKey, name, branch string
	var public bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a repository",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				p, err := a.Store.ProjectByKey(ctx, projectKey)
				if err != nil {
					return err
				}
				r, err := a.Accounts.CreateRepository(ctx, cliActor, p, accounts.NewRepository{Name: name, Public: public, DefaultBranch: branch})
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "created repository %s/%s (id %d): %s/scm/%s/%s.git\n",
					p.Key, r.Slug, r.ID, strings.TrimRight(a.Config.Server.BaseURL, "/"), strings.ToLower(p.Key), r.Slug)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&projectKey, "project", "", "project key (required)")
	cmd.Flags().StringVar(&name, "name", "", "repository name; the slug derives from it (required)")
	cmd.Flags().StringVar(&branch, "default-branch", "main", "default branch")
	cmd.Flags().BoolVar(&public, "public", false, "readable anonymously")
	cmd.MarkFlagRequired("project")
	cmd.MarkFlagRequired("name")
	return cmd
}

// splitRepoRef parses "PROJECT/slug".
func splitRepoRef(s string) (key, slug string, err error) {
	key, slug, ok := strings.Cut(s, "/")
	if !ok || key == "" || slug == "" || strings.Contains(slug, "/") {
		return "", "", problem.New(problem.Invalid, "%q is not PROJECT/REPO", s)
	}
	return key, strings.TrimSuffix(slug, ".git"), nil
}

func adminRepoGC(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "gc PROJECT/REPO",
		Short: "Run housekeeping (repack, bitmaps, commit-graph, pack-refs) now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, slug, err := splitRepoRef(args[0])
			if err != nil {
				return err
			}
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				r, err := a.Store.RepoBySlug(ctx, key, slug)
				if err != nil {
					return err
				}
				start := time.Now()
				if err := a.Repos.Housekeep(ctx, r.ID); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "housekeeping of %s/%s done in %s\n", r.ProjectKey, r.Slug, time.Since(start).Round(time.Millisecond))
				return nil
			})
		},
	}
}

var grantablePerms = map[string]store.Permission{}

func init() {
	for _, p := range []store.Permission{store.PermRepoRead, store.PermRepoWrite, store.PermRepoAdmin,
		store.PermProjectRead, store.PermProjectWrite, store.PermProjectAdmin} {
		grantablePerms[string(p)] = p
	}
}

func adminGrant(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var userName, groupName, projectKey, slug, perm string
	cmd := &cobra.Command{
		Use:   "grant",
		Short: "Grant a user or group a permission on a project or repository",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, ok := grantablePerms[strings.ToUpper(perm)]
			if !ok {
				return problem.New(problem.Invalid, "--permission: %q must be one of REPO_READ, REPO_WRITE, REPO_ADMIN, PROJECT_READ, PROJECT_WRITE, PROJECT_ADMIN", perm)
			}
			if (userName == "") == (groupName == "") {
				return problem.New(problem.Invalid, "give exactly one of --user and --group")
			}
			isRepoPerm := strings.HasPrefix(string(p), "REPO_")
			if isRepoPerm != (slug != "") {
				if isRepoPerm {
					return problem.New(problem.Invalid, "%s needs --repo", p)
				}
				return problem.New(problem.Invalid, "%s is a project permission; drop --repo or use a REPO_ permission", p)
			}
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				var users, groups []string
				if userName != "" {
					users = []string{userName}
				} else {
					groups = []string{groupName}
				}
				grantees, err := a.Accounts.Grantees(ctx, users, groups)
				if err != nil {
					return err
				}
				proj, err := a.Store.ProjectByKey(ctx, projectKey)
				if err != nil {
					return err
				}
				t, target := accounts.Target{Project: proj}, proj.Key
				if slug != "" {
					r, err := a.Store.RepoBySlug(ctx, proj.Key, slug)
					if err != nil {
						return err
					}
					t.Repo, target = r, proj.Key+"/"+r.Slug
				}
				if err := a.Accounts.Grant(ctx, cliActor, t, grantees, p); err != nil {
					return err
				}
				who := "user " + userName
				if groupName != "" {
					who = "group " + groupName
				}
				fmt.Fprintf(stdout, "granted %s %s on %s\n", who, p, target)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&userName, "user", "", "user name")
	cmd.Flags().StringVar(&groupName, "group", "", "group name")
	cmd.Flags().StringVar(&projectKey, "project", "", "project key (required)")
	cmd.Flags().StringVar(&slug, "repo", "", "repository slug (for REPO_ permissions)")
	cmd.Flags().StringVar(&perm, "permission", "", "REPO_READ|REPO_WRITE|REPO_ADMIN|PROJECT_READ|PROJECT_WRITE|PROJECT_ADMIN")
	cmd.MarkFlagRequired("project")
	cmd.MarkFlagRequired("permission")
	return cmd
}
