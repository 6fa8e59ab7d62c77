package pull

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// limitService is a Service with only what diffs need, over a repository
// generated here: base has small.txt, from changes it and adds big.txt.
// With changeBig, base has big.txt too, with one line different.
func limitService(t *testing.T, cfg Config, git gitcmd.Config, bigLines int, changeBig bool) (*Service, *store.PullRequest) {
	t.Helper()
	git.HomeDir, git.HookBinary, git.Timeout = t.TempDir(), "/bin/true", time.Minute
	runner, err := gitcmd.New(git, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	repos := repo.NewManager(t.TempDir(), runner, nil)
	if err := repos.Create(context.Background(), 1, "main"); err != nil {
		t.Fatal(err)
	}
	dir := repos.Path(1)
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir=" + dir}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=A", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=A", "GIT_COMMITTER_EMAIL=a@example.com"}
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	small1 := run("one\n", "hash-object", "-w", "--stdin")
	small2 := run("two\n", "hash-object", "-w", "--stdin")
	big := run(strings.Repeat("line\n", bigLines), "hash-object", "-w", "--stdin")
	baseEntries := "100644 blob " + small1 + "\tsmall.txt\n"
	if changeBig {
		half := strings.Repeat("line\n", bigLines/2)
		old := run(half+"other\n"+half, "hash-object", "-w", "--stdin")
		baseEntries = "100644 blob " + old + "\tbig.txt\n" + baseEntries
	}
	baseTree := run(baseEntries, "mktree")
	fromTree := run("100644 blob "+big+"\tbig.txt\n100644 blob "+small2+"\tsmall.txt\n", "mktree")
	base := run("base\n", "commit-tree", baseTree)
	from := run("from\n", "commit-tree", fromTree, "-p", base)
	cfg.defaults()
	s := &Service{git: runner, repos: repos, cfg: cfg, logger: slog.New(slog.DiscardHandler),
		metrics: &metrics{diffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"source"})}}
	return s, &store.PullRequest{ID: 1, RepoID: 1, BaseSHA: base, FromSHA: from}
}

// TestFileDiffCutSaysSo is issue 14's item 6: the stored diff is cut at
// MaxDiffLines inside big.txt, and asking for big.txt alone used to return
// the cut part with truncated false.
func TestFileDiffCutSaysSo(t *testing.T) {
	s, pr := limitService(t, Config{MaxDiffLines: 1000}, gitcmd.Config{}, 5000, false)
	ctx := context.Background()
	d, err := s.computeDiff(ctx, pr.RepoID, pr.BaseSHA, pr.FromSHA)
	if err != nil {
		t.Fatal(err)
	}
	if !d.truncated {
		t.Fatal("the whole diff was not cut")
	}
	s.mem.put(diffKey(pr), d)

	one, err := s.Diff(ctx, pr, DiffOptions{Path: "big.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Files) != 1 || !one.Truncated || !one.Files[0].Truncated {
		t.Fatalf("big.txt: %d files, truncated %v", len(one.Files), one.Truncated)
	}
	lines := 0
	for _, h := range one.Files[0].Hunks {
		for _, sg := range h.Segments {
			lines += len(sg.Lines)
		}
	}
	if lines == 0 || lines >= 5000 {
		t.Errorf("big.txt has %d lines, want a cut above 0", lines)
	}

	all, err := s.Diff(ctx, pr, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := all.Files[len(all.Files)-1]
	if !all.Truncated || !last.Truncated || last.Destination != "big.txt" {
		t.Errorf("whole diff: truncated %v, last file %q truncated %v", all.Truncated, last.Destination, last.Truncated)
	}
	body, _, err := s.DiffJSON(ctx, pr, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`"toString":"big.txt"},"binary":false,"hunks"`)) || bytes.Count(body, []byte(`"truncated":true`)) != 2 {
		t.Errorf("whole diff JSON does not mark the cut file: %.300s", body)
	}
}

// TestDiffOverMemoryLimit: a pull request diff that needs more memory than
// git.read_memory_limit answers TooLarge naming the setting, not an
// internal error, and a file over git.max_diff_blob_size is not diffed.
func TestDiffOverMemoryLimit(t *testing.T) {
	// A one-line change in a file of a million lines: xdiff indexes every
	// line of both sides, well over 64 MiB.
	s, pr := limitService(t, Config{}, gitcmd.Config{ReadMemoryLimit: 64 << 20}, 1_000_000, true)
	// computeDiff is what the precompute job and a first read run.
	_, err := s.computeDiff(context.Background(), pr.RepoID, pr.BaseSHA, pr.FromSHA)
	if !problem.Is(err, problem.TooLarge) || !strings.Contains(problem.Message(err), "git.read_memory_limit") {
		t.Fatalf("got %v, want TooLarge naming git.read_memory_limit", err)
	}

	s, pr = limitService(t, Config{}, gitcmd.Config{ReadMemoryLimit: 64 << 20, MaxDiffBlobSize: 1 << 20}, 1_000_000, true)
	d, err := s.diffOnRequest(context.Background(), pr, "big.txt", false, defaultContextLines)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 1 || !d.Files[0].Binary || len(d.Files[0].Hunks) != 0 {
		t.Fatalf("big.txt over git.max_diff_blob_size: %+v", d.Files)
	}
	if !d.Files[0].TooLarge || !d.Files[0].Truncated {
		t.Errorf("big.txt over git.max_diff_blob_size is not marked too large: %+v", d.Files[0])
	}
	// The whole diff, as the API serves it, says so too; the small file
	// does not.
	whole, err := s.computeDiff(context.Background(), pr.RepoID, pr.BaseSHA, pr.FromSHA)
	if err != nil {
		t.Fatal(err)
	}
	s.mem.put(diffKey(pr), whole)
	body, _, err := s.DiffJSON(context.Background(), pr, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`"destination":{"components":["big.txt"],"parent":"","name":"big.txt","extension":"txt","toString":"big.txt"},"binary":true,"hunks":[],"truncated":true,"tooLarge":true`)) ||
		bytes.Count(body, []byte(`"tooLarge"`)) != 1 {
		t.Errorf("whole diff JSON does not mark big.txt too large: %.400s", body)
	}
}
