//go:build bench

package pull_test

// Benchmarks for docs/benchmarks.md, behind the bench tag because they
// build a 300-file pull request and run a node:
//
//	go test -tags bench -run '^$' -bench . -benchtime 20x -timeout 30m ./internal/pull
//
// Each reports p50 and p95 in milliseconds next to Go's mean.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

type benchWorld struct {
	n     *testbed.Node
	repo  *store.Repository
	work  string
	bare  string
	admin *auth.Principal
}

func newBenchWorld(b *testing.B, files int) *benchWorld {
	n := testbed.NewNode(b, testbed.NodeOptions{})
	w := &benchWorld{n: n, repo: n.CreateRepo(b, "PRJ", "app"), work: b.TempDir()}
	w.bare = n.App.Repos.Path(w.repo.ID)
	u, err := n.Store().UserByName(context.Background(), "admin")
	if err != nil {
		b.Fatal(err)
	}
	w.admin = &auth.Principal{UserID: u.ID, Name: u.Name}
	testbed.Git(b, w.work, "init", "-q", "-b", "main")
	for i := 0; i < files; i++ {
		writeFile(b, filepath.Join(w.work, fmt.Sprintf("dir%d/file%03d.txt", i%10, i)), benchLines(i, 60, ""))
	}
	testbed.Git(b, w.work, "add", "-A")
	testbed.Git(b, w.work, "commit", "-q", "-m", "base")
	testbed.Git(b, w.work, "remote", "add", "origin", n.CloneURL("PRJ", "app", "admin", n.AdminPassword))
	testbed.Git(b, w.work, "push", "-q", "origin", "main")
	return w
}

func benchLines(seed, n int, change string) string {
	var s strings.Builder
	for i := 0; i < n; i++ {
		if change != "" && i%10 == 3 {
			fmt.Fprintf(&s, "%s %d/%d\n", change, seed, i)
			continue
		}
		fmt.Fprintf(&s, "content of file %d line %d\n", seed, i)
	}
	return s.String()
}

func writeFile(b *testing.B, p, content string) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
}

func percentiles(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.95), "p95-ms")
}

// BenchmarkDiff300 compares the diff and diffstat of a 300-file pull
// request served from the cache with computing them with git on request.
func BenchmarkDiff300(b *testing.B) {
	w := newBenchWorld(b, 300)
	testbed.Git(b, w.work, "checkout", "-q", "-b", "wide")
	for i := 0; i < 300; i++ {
		writeFile(b, filepath.Join(w.work, fmt.Sprintf("dir%d/file%03d.txt", i%10, i)), benchLines(i, 60, "changed"))
	}
	testbed.Git(b, w.work, "commit", "-q", "-am", "wide")
	testbed.Git(b, w.work, "push", "-q", "origin", "wide")
	ctx := context.Background()
	svc := w.n.App.Pulls
	pr, err := svc.Create(ctx, w.admin, w.repo, pull.CreateRequest{Title: "wide", FromRef: "wide", ToRef: "main"})
	if err != nil {
		b.Fatal(err)
	}
	changes, _, err := svc.Changes(ctx, pr)
	if err != nil || len(changes) != 300 {
		b.Fatalf("changes: %d %v", len(changes), err)
	}

	b.Run("cache", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, _, err := svc.Changes(ctx, pr); err != nil {
				b.Fatal(err)
			}
			if _, err := svc.Diff(ctx, pr, pull.DiffOptions{}); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
		}
		percentiles(b, d)
	})
	b.Run("git", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			for _, flags := range [][]string{{"-r", "-z", "-M", "--raw", "--numstat"}, {"-r", "-p", "-M"}} {
				if _, err := w.n.App.Git.OutputLimit(ctx, gitcmd.Cmd{Dir: w.bare, Name: "diff-tree", Flags: flags,
					Args: []string{pr.BaseSHA, pr.FromSHA}}, 64<<20); err != nil {
					b.Fatal(err)
				}
			}
			d = append(d, time.Since(start))
		}
		percentiles(b, d)
	})
}

// mergeWorld makes count branches off main, each adding one file, and
// returns a function that opens the pull request of branch i. Pull
// requests are opened just before they are merged: every merge rescopes
// the open pull requests into main, and a pile of them would measure the
// rescope jobs rather than the merge.
func mergeWorld(b *testing.B, w *benchWorld, prefix string, count int) func(i int) *store.PullRequest {
	testbed.Git(b, w.work, "checkout", "-q", "main")
	testbed.Git(b, w.work, "reset", "-q", "--hard", "origin/main")
	var names []string
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		testbed.Git(b, w.work, "checkout", "-q", "-b", name, "main")
		writeFile(b, filepath.Join(w.work, name+".txt"), name+"\n")
		testbed.Git(b, w.work, "add", "-A")
		testbed.Git(b, w.work, "commit", "-q", "-m", name)
		names = append(names, name)
	}
	testbed.Git(b, w.work, append([]string{"push", "-q", "origin"}, names...)...)
	return func(i int) *store.PullRequest {
		pr, err := w.n.App.Pulls.Create(context.Background(), w.admin, w.repo, pull.CreateRequest{Title: names[i], FromRef: names[i], ToRef: "main"})
		if err != nil {
			b.Fatal(err)
		}
		return pr
	}
}

// BenchmarkMerge compares a no-ff merge through the service (checks,
// merge-tree, commit-tree, compare-and-swap update-ref with the hooks,
// marking the pull request merged) with the same plumbing run bare.
func BenchmarkMerge(b *testing.B) {
	w := newBenchWorld(b, 300)
	ctx := context.Background()
	b.Run("service", func(b *testing.B) {
		b.StopTimer()
		open := mergeWorld(b, w, fmt.Sprintf("svc%d", b.N), b.N)
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			cur := open(i)
			b.StartTimer()
			start := time.Now()
			if _, err := w.n.App.Pulls.Merge(ctx, w.admin, w.repo, cur, pull.MergeOptions{Version: cur.Version}); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
			b.StopTimer()
		}
		percentiles(b, d)
	})
	b.Run("plumbing", func(b *testing.B) {
		b.StopTimer()
		open := mergeWorld(b, w, fmt.Sprintf("raw%d", b.N), b.N)
		git := w.n.App.Git
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			pr := open(i)
			b.StartTimer()
			start := time.Now()
			to, err := git.Output(ctx, gitcmd.Cmd{Dir: w.bare, Name: "rev-parse", Flags: []string{"--verify"}, Args: []string{"refs/heads/main"}})
			if err != nil {
				b.Fatal(err)
			}
			head := strings.TrimSpace(string(to))
			tree, err := git.Output(ctx, gitcmd.Cmd{Dir: w.bare, Name: "merge-tree", Flags: []string{"--write-tree"}, Args: []string{head, pr.FromSHA}})
			if err != nil {
				b.Fatal(err)
			}
			commit, err := git.Output(ctx, gitcmd.Cmd{Dir: w.bare, Name: "commit-tree", Flags: []string{"-p" + head, "-p" + pr.FromSHA},
				Args: []string{strings.TrimSpace(string(tree))}, Stdin: strings.NewReader("merge\n")})
			if err != nil {
				b.Fatal(err)
			}
			env, done := w.n.App.Hooks.Register(hooks.Request{RepoID: w.repo.ID, Principal: w.admin, Transport: "bench"})
			err = git.Run(ctx, gitcmd.Cmd{Dir: w.bare, Name: "update-ref", Args: []string{"refs/heads/main", strings.TrimSpace(string(commit)), head}, Env: env})
			done()
			if err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
			b.StopTimer()
		}
		percentiles(b, d)
	})
	b.Run("concurrent20", func(b *testing.B) {
		var all []time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			open := mergeWorld(b, w, fmt.Sprintf("c%d-%d", b.N, i), 20)
			var prs []*store.PullRequest
			for j := 0; j < 20; j++ {
				prs = append(prs, open(j))
			}
			b.StartTimer()
			var mu sync.Mutex
			var wg sync.WaitGroup
			failed := 0
			for _, pr := range prs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					_, err := w.n.App.Pulls.Merge(ctx, w.admin, w.repo, pr, pull.MergeOptions{Version: pr.Version})
					mu.Lock()
					defer mu.Unlock()
					all = append(all, time.Since(start))
					if err != nil {
						failed++
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(failed), "retryable-refusals")
		}
		percentiles(b, all)
	})
}
