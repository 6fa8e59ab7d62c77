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
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/config"
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
	// The REST benchmark makes more requests than a user's rate limit
	// allows; the limiter is not what is measured.
	n := testbed.NewNode(b, testbed.NodeOptions{Configure: func(c *config.Config) { c.Throttle.RateLimit = false }})
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
// request as the REST API serves them from the cache (GET …/changes and
// …/diff over HTTP, with a token) with computing them with git on request
// (the two diff-tree runs alone, without the parsing and encoding an API
// would add, so the ratio is a lower bound). "service" is the cached path
// without HTTP: the stat and the rendered diff from memory.
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
	// Let the prepare job finish, so it does not share the CPU with the
	// measurement.
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := w.n.App.DB.PullRequestByID(ctx, pr.ID)
		if err != nil {
			b.Fatal(err)
		}
		if cur.MergeStatus != "UNKNOWN" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	token := w.n.Token(b, w.admin.UserID, store.ScopeRead)
	base := fmt.Sprintf("%s/rest/api/1.0/projects/PRJ/repos/app/pull-requests/%d", w.n.URL, pr.Number)
	get := func(path string) int {
		u := base + path
		if strings.HasPrefix(path, "http") {
			u = path
		}
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, _ := io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return int(n)
	}

	gitDiff := func() {
		for _, flags := range [][]string{{"-r", "-z", "-M", "--raw", "--numstat"}, {"-r", "-p", "-M"}} {
			if _, err := w.n.App.Git.OutputLimit(ctx, gitcmd.Cmd{Dir: w.bare, Name: "diff-tree", Flags: flags,
				Args: []string{pr.BaseSHA, pr.FromSHA}}, 64<<20); err != nil {
				b.Fatal(err)
			}
		}
	}
	// The machine is shared and its load moves; the two sides run
	// alternately in one loop so that both see the same load, and the
	// ratio is of the same moments.
	// "rest" is the repository's compare/diff API for the same two
	// commits: the same HTTP, authentication and JSON, the diff computed
	// with git on request (the stat not even asked for).
	onRequest := fmt.Sprintf("%s/rest/api/1.0/projects/PRJ/repos/app/compare/diff?from=%s&to=%s", w.n.URL, pr.FromSHA, pr.BaseSHA)
	b.Run("rest-cache-vs-git", func(b *testing.B) {
		cache := make([]time.Duration, 0, b.N)
		git := make([]time.Duration, 0, b.N)
		rest := make([]time.Duration, 0, b.N)
		bytes := 0
		for i := 0; i < b.N; i++ {
			start := time.Now()
			bytes = get("/changes?limit=1000") + get("/diff")
			cache = append(cache, time.Since(start))
			start = time.Now()
			gitDiff()
			git = append(git, time.Since(start))
			start = time.Now()
			get(onRequest)
			rest = append(rest, time.Since(start))
		}
		b.ReportMetric(float64(bytes), "response-bytes")
		compare(b, "cache", cache, "git", git)
		compare(b, "cache", cache, "rest", rest)
	})
	b.Run("service-cache", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, _, err := svc.Changes(ctx, pr); err != nil {
				b.Fatal(err)
			}
			if _, _, err := svc.DiffJSON(ctx, pr, pull.DiffOptions{}); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
		}
		percentiles(b, d)
	})
}

// compare reports p50 and p95 of two interleaved series and their ratios
// (b over a: how many times faster a is).
func compare(b *testing.B, an string, a []time.Duration, bn string, bd []time.Duration) {
	pa, pb := quantiles(a), quantiles(bd)
	b.ReportMetric(pa[0], an+"-p50-ms")
	b.ReportMetric(pa[1], an+"-p95-ms")
	b.ReportMetric(pb[0], bn+"-p50-ms")
	b.ReportMetric(pb[1], bn+"-p95-ms")
	b.ReportMetric(pb[0]/pa[0], bn+"/"+an+"-p50")
	b.ReportMetric(pb[1]/pa[1], bn+"/"+an+"-p95")
}

func quantiles(d []time.Duration) [2]float64 {
	d = append([]time.Duration(nil), d...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	return [2]float64{at(0.50), at(0.95)}
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
		waitPrepared(b, w, pr)
		return pr
	}
}

// waitPrepared waits for the prepare job of a new pull request (diff and
// preview merge), so that it does not run during the measurement.
func waitPrepared(b *testing.B, w *benchWorld, pr *store.PullRequest) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		cur, err := w.n.App.DB.PullRequestByID(context.Background(), pr.ID)
		if err != nil {
			b.Fatal(err)
		}
		if cur.MergeStatus != "UNKNOWN" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("pull request %d not prepared after a minute", pr.Number)
}

// BenchmarkMerge compares a no-ff merge through the service (checks,
// merge-tree, commit-tree, compare-and-swap update-ref with the hooks,
// marking the pull request merged, queueing its jobs) with the same
// plumbing run bare, alternately in one loop (see BenchmarkDiff300).
func BenchmarkMerge(b *testing.B) {
	w := newBenchWorld(b, 300)
	ctx := context.Background()
	git := w.n.App.Git
	plumbing := func(pr *store.PullRequest) {
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
	}
	b.Run("service-vs-plumbing", func(b *testing.B) {
		b.StopTimer()
		open := mergeWorld(b, w, fmt.Sprintf("m%d", b.N), 2*b.N)
		svc := make([]time.Duration, 0, b.N)
		raw := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			for _, service := range []bool{i%2 == 0, i%2 != 0} {
				pr := open(len(svc) + len(raw))
				b.StartTimer()
				start := time.Now()
				if service {
					if _, err := w.n.App.Pulls.Merge(ctx, w.admin, w.repo, pr, pull.MergeOptions{Version: pr.Version}); err != nil {
						b.Fatal(err)
					}
					svc = append(svc, time.Since(start))
				} else {
					plumbing(pr)
					raw = append(raw, time.Since(start))
				}
				b.StopTimer()
				if !service {
					// Bare plumbing does not close the pull request; an
					// open one would be rescoped by every later merge.
					if _, err := w.n.App.Pulls.Decline(ctx, w.admin, pr, pr.Version); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		compare(b, "plumbing", raw, "service", svc)
	})
	// b.N merges in rounds of 20 started at once into main (one round
	// at -benchtime 20x): every round's merges all succeed or get a
	// retryable refusal, counted.
	b.Run("concurrent20", func(b *testing.B) {
		var all []time.Duration
		for i := 0; i < max(1, b.N/20); i++ {
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
			round := time.Now()
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
			b.ReportMetric(float64(time.Since(round).Milliseconds()), "round-ms")
			b.ReportMetric(float64(failed), "retryable-refusals")
		}
		percentiles(b, all)
	})
}
