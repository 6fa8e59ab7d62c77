package e3

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/testbed"
)

// TestSmokeExperiment runs experiments/smoke.json end to end against the
// built binary: data set, node, every script, sampling, report.
func TestSmokeExperiment(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end experiment")
	}
	e, err := Load("../../experiments/smoke.json")
	if err != nil {
		t.Fatal(err)
	}
	bin := testbed.Binary(t)
	for i := range e.Threads {
		e.Threads[i].Instance.Binary = bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	start := time.Now()
	res, err := Run(ctx, e, Options{Out: out, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), HistoryCache: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("smoke experiment took %s", time.Since(start).Round(time.Millisecond))
	for _, tr := range res.Threads {
		if tr.Error != "" {
			t.Fatalf("thread %s: %s", tr.Name, tr.Error)
		}
		if len(tr.Stages) != len(e.StagesOf(e.Threads[0])) || len(tr.Samples) < 10 {
			t.Fatalf("thread %s: %d stages, %d samples", tr.Name, len(tr.Stages), len(tr.Samples))
		}
		seen := map[string]bool{}
		for _, s := range tr.Stages {
			for _, o := range s.Ops {
				if o.Count > 0 {
					seen[o.Op] = true
				}
				for _, m := range o.ErrorMessages {
					t.Errorf("stage %d %s: %d × %s", s.Index+1, o.Op, m.Count, m.Message)
				}
			}
			if s.GitPerHour <= 0 || len(s.NodeCPU) != 1 {
				t.Errorf("stage %d: %.0f git ops/h, node cpu %v", s.Index+1, s.GitPerHour, s.NodeCPU)
			}
		}
		for _, op := range []string{"clone", "fetch", "ls-remote", "push", "rest: list projects", "rest: pr diff", "rest: create branch", "rest: list users", "ssh clone", "ssh fetch", "ssh push", "ssh ls-remote"} {
			if !seen[op] {
				t.Errorf("no successful %q operation", op)
			}
		}
		metered := false
		for _, s := range tr.Samples {
			if len(s.Nodes) == 1 && s.Nodes[0].GitProcesses >= 0 && s.Nodes[0].TicketsLimit > 0 {
				metered = true
			}
		}
		if !metered {
			t.Error("no sample read the node's /metrics")
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, b, 5)
	if _, err := LoadResults(out); err != nil {
		t.Fatal(err)
	}
}
