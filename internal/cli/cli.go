// Package cli is the sluice command tree: serve, admin …, hook ….
//
// Every command loads configuration the same way (defaults → --config TOML
// → SLUICE_* environment → flags) and builds its components through
// internal/app, so the admin commands act on exactly the store and
// repositories a running server uses — SQLite runs in WAL mode with a busy
// timeout, so they work while the server runs.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/hookclient"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Main runs the command line and returns the process exit status.
func Main(args []string) int {
	// Without sluice-hook installed, git runs hooks as `sluice hook NAME …`:
	// answer before cobra so the hook path never parses configuration.
	if len(args) >= 2 && args[0] == "hook" {
		return hookclient.Run(args[1], args[2:], os.Stdin, os.Stdout, os.Stderr, os.Environ())
	}
	root := newRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice: "+userMessage(err))
		return 1
	}
	return 0
}

func userMessage(err error) string {
	var pe *problem.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// globalFlags are accepted by every command that touches data.
type globalFlags struct {
	configPath string
	dataDir    string
	httpAddr   string
	sshAddr    string
}

func (g *globalFlags) register(cmd *cobra.Command, server bool) {
	cmd.PersistentFlags().StringVar(&g.configPath, "config", os.Getenv("SLUICE_CONFIG"), "TOML configuration file")
	cmd.PersistentFlags().StringVar(&g.dataDir, "data", "", "base data directory (data.dir, default ./data)")
	if server {
		cmd.Flags().StringVar(&g.httpAddr, "http-addr", "", "HTTP listen address (server.http_addr, default 127.0.0.1:7990)")
		cmd.Flags().StringVar(&g.sshAddr, "ssh-addr", "", "SSH listen address (server.ssh_addr, default 127.0.0.1:7999; empty disables)")
	}
}

func (g *globalFlags) load(cmd *cobra.Command) (config.Config, error) {
	cfg, err := config.Load(g.configPath, os.Environ())
	if err != nil {
		return cfg, err
	}
	set := func(flag, key, val string) error {
		if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
			return cfg.Set(key, val)
		}
		return nil
	}
	for _, s := range [][3]string{
		{"data", "data.dir", g.dataDir},
		{"http-addr", "server.http_addr", g.httpAddr},
		{"ssh-addr", "server.ssh_addr", g.sshAddr},
	} {
		if err := set(s[0], s[1], s[2]); err != nil {
			return cfg, err
		}
	}
	if err := cfg.Resolve(); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Sluice: Git hosting built to scale",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServe(stdout, stderr), newAdmin(stdout, stderr), newVersion(stdout))
	root.AddCommand(newDatagen(stdout, stderr))
	root.AddCommand(newE3(stdout, stderr))
	return root
}

func newVersion(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(stdout, app.Version) },
	}
}

func newServe(stdout, stderr io.Writer) *cobra.Command {
	var g globalFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Sluice node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load(cmd)
			if err != nil {
				return err
			}
			logger := newLogger(cfg, stderr)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := app.New(ctx, cfg, logger, app.Options{Stdout: stdout})
			if err != nil {
				return err
			}
			defer a.Close()
			if err := a.Listen(); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Sluice is listening on http://%s\n", a.HTTPAddr())
			if addr := a.SSHAddr(); addr != "" {
				fmt.Fprintf(stdout, "Git over SSH on ssh://git@%s\n", addr)
			}
			return a.Serve(ctx)
		},
	}
	g.register(cmd, true)
	return cmd
}

// withApp loads configuration and builds the admin-mode app for a command.
func withApp(cmd *cobra.Command, g *globalFlags, stderr io.Writer, fn func(ctx context.Context, a *app.App) error) error {
	cfg, err := g.load(cmd)
	if err != nil {
		return err
	}
	// Admin commands log warnings only: their stdout is for results.
	cfg.Log.Level = "warn"
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	a, err := app.New(ctx, cfg, newLogger(cfg, stderr), app.Options{Admin: true})
	if err != nil {
		return err
	}
	defer a.Close()
	return fn(ctx, a)
}
