package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/e3"
)

func newE3(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "e3", Short: "Performance lab: run experiments and compare their results"}
	cmd.AddCommand(newE3Run(stdout, stderr), newE3Compare(stdout), newE3Check(stdout))
	return cmd
}

func newE3Run(stdout, stderr io.Writer) *cobra.Command {
	var out, historyCache string
	var pprof, quiet bool
	cmd := &cobra.Command{
		Use:   "run EXPERIMENT.json",
		Short: "Run an experiment; writes results.json and report.html",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := e3.Load(args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join("e3-results", e.Name+"-"+time.Now().Format("20060102-150405"))
			}
			if historyCache == "" {
				if dir, err := os.UserCacheDir(); err == nil {
					historyCache = filepath.Join(dir, "sluice-e3", "histories")
				}
			}
			if historyCache != "" {
				if err := os.MkdirAll(historyCache, 0o755); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			var progress io.Writer = stderr
			if quiet {
				progress = nil
			}
			res, err := e3.Run(ctx, e, e3.Options{Out: out, File: args[0], Logger: logger, Progress: progress, PProf: pprof, HistoryCache: historyCache})
			if err != nil {
				return err
			}
			failed := 0
			for _, t := range res.Threads {
				if t.Error != "" {
					failed++
				}
			}
			fmt.Fprintf(stdout, "report: %s\nresults: %s\n", filepath.Join(out, "report.html"), filepath.Join(out, "results.json"))
			if failed > 0 {
				return fmt.Errorf("%d of %d threads failed (see the report)", failed, len(res.Threads))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output directory (default e3-results/NAME-TIME)")
	cmd.Flags().BoolVar(&pprof, "pprof", false, "take a CPU profile of node 1 during each thread's last stage (/debug/pprof)")
	cmd.Flags().StringVar(&historyCache, "history-cache", "", "directory keeping generated repository histories between runs (default: the user cache dir)")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no live progress line")
	return cmd
}

func newE3Compare(stdout io.Writer) *cobra.Command {
	var html string
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "Compare two runs (results.json files or run directories), with B/A ratios",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := e3.LoadResults(args[0])
			if err != nil {
				return err
			}
			b, err := e3.LoadResults(args[1])
			if err != nil {
				return err
			}
			e3.CompareText(stdout, a, b)
			if html != "" {
				f, err := os.Create(html)
				if err != nil {
					return err
				}
				if err := e3.CompareHTML(f, a, b); err != nil {
					f.Close()
					return err
				}
				return f.Close()
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&html, "html", "", "also write the comparison as an HTML page")
	return cmd
}

func newE3Check(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "check EXPERIMENT.json…",
		Short: "Validate experiment files without running them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var bad []string
			for _, p := range args {
				if _, err := e3.Load(p); err != nil {
					bad = append(bad, err.Error())
					continue
				}
				fmt.Fprintf(stdout, "%s: ok\n", p)
			}
			if len(bad) > 0 {
				return fmt.Errorf("%s", strings.Join(bad, "\n"))
			}
			return nil
		},
	}
}
