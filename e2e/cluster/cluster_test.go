// Package cluster runs the cluster scenarios of issue 6 against three
// sluice processes sharing one PostgreSQL and one repository directory
// behind HAProxy (testbed.NewCluster): clone and push through the load
// balancer over HTTP and SSH, read-your-writes across nodes, concurrent
// pushes to one ref through two nodes, a node killed with SIGKILL during a
// clone storm, and PostgreSQL restarted under load.
//
// The scenarios share one cluster and run in order; each bounds its loops
// in count and time.
package cluster

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// git runs the git client with extra environment and returns stdout.
func git(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(testbed.GitEnv(filepath.Join(os.TempDir(), "sluice-test-home")), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func mustGit(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := git(dir, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// commit makes a commit with unique content in the work tree dir.
func commit(t *testing.T, dir, msg string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(msg+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustGit(t, dir, nil, "add", "-A")
	mustGit(t, dir, nil, "-c", "commit.gpgsign=false", "commit", "-q", "-m", msg)
	return mustGit(t, dir, nil, "rev-parse", "HEAD")
}

func remoteRef(t *testing.T, url, ref string) string {
	t.Helper()
	out := mustGit(t, "", nil, "ls-remote", url, ref)
	sha, _, _ := strings.Cut(out, "\t")
	return sha
}

type clusterStatus struct {
	Self  string `json:"self"`
	Live  int    `json:"live"`
	Nodes []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"nodes"`
}

func status(t *testing.T, c *testbed.Cluster) clusterStatus {
	t.Helper()
	var st clusterStatus
	if _, err := c.REST("GET", "/rest/sluice/1.0/admin/cluster", nil, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func nodeState(st clusterStatus, id string) string {
	for _, n := range st.Nodes {
		if n.ID == id {
			return n.State
		}
	}
	return "missing"
}

// repoDir is the repository's directory on the shared filesystem.
func repoDir(t *testing.T, c *testbed.Cluster, key, slug string) string {
	t.Helper()
	var r struct {
		ID int64 `json:"id"`
	}
	if _, err := c.REST("GET", "/rest/api/1.0/projects/"+key+"/repos/"+slug, nil, &r); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(c.Repositories, fmt.Sprintf("%03d", r.ID%1000), fmt.Sprintf("%d.git", r.ID))
}

func fsck(t *testing.T, dir string) {
	t.Helper()
	if out, err := git(dir, nil, "fsck", "--strict", "--no-progress"); err != nil {
		t.Fatalf("fsck %s: %v\n%s", dir, err, out)
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster scenarios start PostgreSQL, three nodes and HAProxy")
	}
	c := testbed.NewCluster(t, 3, testbed.ClusterOptions{SSH: true, Config: faultConfig})

	t.Run("status", func(t *testing.T) {
		st := status(t, c)
		if st.Live != 3 || len(st.Nodes) != 3 || st.Self == "" {
			t.Fatalf("REST cluster status = %+v, want 3 live nodes", st)
		}
		out := c.Admin(t, 0, "cluster", "status")
		for _, id := range []string{"node-1", "node-2", "node-3"} {
			if !strings.Contains(out, id) {
				t.Errorf("admin cluster status lacks %s:\n%s", id, out)
			}
		}
		if strings.Count(out, " live ") != 3 {
			t.Errorf("admin cluster status does not show 3 live nodes:\n%s", out)
		}
	})

	t.Run("http and ssh through the load balancer", func(t *testing.T) {
		slug := c.CreateRepo(t, "LB", "through-lb")
		wt := testbed.WorkTree(t, 3)
		mustGit(t, wt, nil, "push", "-q", c.CloneURL(c.LB(), "LB", slug), "main")
		head := mustGit(t, wt, nil, "rev-parse", "HEAD")

		clone := filepath.Join(t.TempDir(), "http")
		mustGit(t, "", nil, "clone", "-q", c.CloneURL(c.LB(), "LB", slug), clone)
		if got := mustGit(t, clone, nil, "rev-parse", "HEAD"); got != head {
			t.Fatalf("HTTP clone HEAD %s, want %s", got, head)
		}

		sshEnv := c.SSHEnv(t)
		sshClone := filepath.Join(t.TempDir(), "ssh")
		mustGit(t, "", sshEnv, "clone", "-q", c.SSHCloneURL("LB", slug), sshClone)
		if got := mustGit(t, sshClone, nil, "rev-parse", "HEAD"); got != head {
			t.Fatalf("SSH clone HEAD %s, want %s", got, head)
		}
		next := commit(t, sshClone, "pushed over ssh")
		mustGit(t, sshClone, sshEnv, "push", "-q", "origin", "main")
		if got := remoteRef(t, c.CloneURL(c.LB(), "LB", slug), "refs/heads/main"); got != next {
			t.Fatalf("after SSH push, main = %s, want %s", got, next)
		}
	})

	t.Run("push via one node, clone via another", func(t *testing.T) {
		slug := c.CreateRepo(t, "RYW", "read-your-writes")
		wt := testbed.WorkTree(t, 1)
		n1, n2 := c.Nodes[0].URL(), c.Nodes[1].URL()
		mustGit(t, wt, nil, "push", "-q", c.CloneURL(n1, "RYW", slug), "main")
		// Warm node 2's pack cache, then move the ref through node 1: the
		// next clone from node 2 must see the new tip, never the cached one.
		for i := range 5 {
			clone := filepath.Join(t.TempDir(), fmt.Sprintf("c%d", i))
			mustGit(t, "", nil, "clone", "-q", c.CloneURL(n2, "RYW", slug), clone)
			want := mustGit(t, wt, nil, "rev-parse", "HEAD")
			if got := mustGit(t, clone, nil, "rev-parse", "HEAD"); got != want {
				t.Fatalf("round %d: clone via node 2 has %s, node 1 acknowledged %s", i, got, want)
			}
			commit(t, wt, fmt.Sprintf("round %d", i))
			mustGit(t, wt, nil, "push", "-q", c.CloneURL(n1, "RYW", slug), "main")
		}
	})

	t.Run("concurrent pushes to one ref through two nodes", func(t *testing.T) {
		slug := c.CreateRepo(t, "RACE", "race")
		base := testbed.WorkTree(t, 1)
		mustGit(t, base, nil, "push", "-q", c.CloneURL(c.LB(), "RACE", slug), "main")
		const rounds = 6
		for r := range rounds {
			var wts [2]string
			var shas [2]string
			for i := range wts {
				wts[i] = filepath.Join(t.TempDir(), fmt.Sprintf("r%d-%d", r, i))
				mustGit(t, "", nil, "clone", "-q", c.CloneURL(c.Nodes[i].URL(), "RACE", slug), wts[i])
				shas[i] = commit(t, wts[i], fmt.Sprintf("round %d from node %d", r, i+1))
			}
			var errs [2]error
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range wts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = git(wts[i], nil, "push", "-q", c.CloneURL(c.Nodes[i].URL(), "RACE", slug), "main")
				}()
			}
			close(start)
			wg.Wait()
			won := 0
			var winner string
			for i, err := range errs {
				if err == nil {
					won++
					winner = shas[i]
				}
			}
			if won != 1 {
				t.Fatalf("round %d: %d pushes won (errors %v), want exactly 1", r, won, errs)
			}
			if got := remoteRef(t, c.CloneURL(c.LB(), "RACE", slug), "refs/heads/main"); got != winner {
				t.Fatalf("round %d: main = %s, the winning push was %s", r, got, winner)
			}
		}
		fsck(t, repoDir(t, c, "RACE", slug))
	})

	t.Run("kill -9 a node during a clone storm and pushes", func(t *testing.T) {
		slug := c.CreateRepo(t, "KILL", "storm")
		wt := testbed.WorkTree(t, 5)
		url := c.CloneURL(c.LB(), "KILL", slug)
		mustGit(t, wt, nil, "push", "-q", url, "main")

		var (
			mu        sync.Mutex
			acked     = map[string]string{} // branch → sha acknowledged
			cloneOK   atomic.Int64
			cloneFail atomic.Int64
			lateFail  atomic.Int64
			killedAt  atomic.Int64
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// Three cloners and one pusher, each bounded by count and by stop.
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					select {
					case <-stop:
						return
					default:
					}
					dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d-%d", w, i))
					if _, err := git("", nil, "clone", "-q", url, dir); err != nil {
						cloneFail.Add(1)
						// Clones that start well after the kill must
						// not fail: HAProxy has routed around the node.
						if k := killedAt.Load(); k != 0 && time.Since(time.Unix(0, k)) > 3*time.Second {
							lateFail.Add(1)
							t.Logf("clone after the kill failed: %v", err)
						}
						continue
					}
					cloneOK.Add(1)
					os.RemoveAll(dir)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					return
				default:
				}
				branch := fmt.Sprintf("b%03d", i)
				sha := mustGitNoFail(wt, "commit-tree", "-p", "HEAD", "-m", branch, "HEAD^{tree}")
				if sha == "" {
					continue
				}
				if _, err := git(wt, nil, "push", "-q", url, sha+":refs/heads/"+branch); err == nil {
					mu.Lock()
					acked[branch] = sha
					mu.Unlock()
				}
			}
		}()

		time.Sleep(2 * time.Second)
		c.Kill(1)
		killedAt.Store(time.Now().UnixNano())
		time.Sleep(6 * time.Second)
		close(stop)
		wg.Wait()

		t.Logf("clones ok %d, failed %d (late %d); pushes acknowledged %d", cloneOK.Load(), cloneFail.Load(), lateFail.Load(), len(acked))
		if lateFail.Load() > 0 {
			t.Errorf("%d clones failed more than 3s after the kill", lateFail.Load())
		}
		if cloneOK.Load() == 0 || len(acked) == 0 {
			t.Fatalf("no load got through: clones %d, pushes %d", cloneOK.Load(), len(acked))
		}
		refs := mustGit(t, "", nil, "ls-remote", url, "refs/heads/b*")
		have := map[string]string{}
		for _, line := range strings.Split(refs, "\n") {
			if sha, ref, ok := strings.Cut(line, "\t"); ok {
				have[strings.TrimPrefix(ref, "refs/heads/")] = sha
			}
		}
		for b, sha := range acked {
			if have[b] != sha {
				t.Errorf("acknowledged push %s=%s is %q after the crash", b, sha, have[b])
			}
		}
		fsck(t, repoDir(t, c, "KILL", slug))

		// The killed node shows as gone only after 30 s without heartbeat;
		// its restart replaces the registration at once.
		c.Restart(1)
		wait.For(t, "node-2 live after restart", 15*time.Second, func() bool {
			return nodeState(status(t, c), "node-2") == "live"
		})
		clone := filepath.Join(t.TempDir(), "after-restart")
		mustGit(t, "", nil, "clone", "-q", c.CloneURL(c.Nodes[1].URL(), "KILL", slug), clone)
	})

	t.Run("postgres restarted under load", func(t *testing.T) {
		slug := c.CreateRepo(t, "PG", "outage")
		wt := testbed.WorkTree(t, 2)
		url := c.CloneURL(c.LB(), "PG", slug)
		mustGit(t, wt, nil, "push", "-q", url, "main")
		before := mustGit(t, wt, nil, "rev-parse", "HEAD")

		c.HaltPostgres()
		n := c.Nodes[0].URL()
		for _, path := range []string{
			"/scm/pg/" + slug + ".git/info/refs?service=git-upload-pack",
			"/rest/api/1.0/projects",
		} {
			req, _ := http.NewRequest("GET", n+path, nil)
			req.SetBasicAuth("admin", c.AdminPassword)
			start := time.Now()
			resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("GET %s during the outage: %v", path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("GET %s during the outage: %d, want 503", path, resp.StatusCode)
			}
			if d := time.Since(start); d > 6*time.Second {
				t.Errorf("GET %s during the outage took %v; it must fail fast", path, d)
			}
		}
		// Readiness pings the database at most once a second and answers
		// from its last ping meanwhile (so a check never waits on a hung
		// database): it turns within a ping's time limit and a period.
		wait.For(t, "/readyz to answer 503 during the outage", 5*time.Second, func() bool {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(n + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusServiceUnavailable
		})
		// A push during the outage is refused and moves nothing.
		lost := commit(t, wt, "during the outage")
		if _, err := git(wt, nil, "push", "-q", c.CloneURL(n, "PG", slug), "main"); err == nil {
			t.Fatal("push succeeded while PostgreSQL was down")
		}

		c.ResumePostgres()
		wait.For(t, "the load balancer routes again", 30*time.Second, func() bool {
			resp, err := http.Get(c.LB() + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if got := remoteRef(t, url, "refs/heads/main"); got != before {
			t.Fatalf("after the outage main = %s, want %s (the refused push %s must not have moved it)", got, before, lost)
		}
		// Every node recovers by itself: push and clone through each.
		for i, node := range c.Nodes {
			wait.For(t, node.ID+" ready", 30*time.Second, func() bool {
				resp, err := http.Get(node.URL() + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			sha := commit(t, wt, fmt.Sprintf("after the outage via %s", node.ID))
			if _, err := git(wt, nil, "push", "-q", c.CloneURL(node.URL(), "PG", slug), "main"); err != nil {
				t.Fatalf("push via %s after the outage: %v", node.ID, err)
			}
			clone := filepath.Join(t.TempDir(), fmt.Sprintf("after-%d", i))
			mustGit(t, "", nil, "clone", "-q", c.CloneURL(c.Nodes[(i+1)%len(c.Nodes)].URL(), "PG", slug), clone)
			if got := mustGit(t, clone, nil, "rev-parse", "HEAD"); got != sha {
				t.Fatalf("clone after push via %s: %s, want %s", node.ID, got, sha)
			}
		}
		wait.For(t, "all nodes live after the outage", 20*time.Second, func() bool { return status(t, c).Live == 3 })
		fsck(t, repoDir(t, c, "PG", slug))
		var metrics bytes.Buffer
		resp, err := http.Get(c.Nodes[0].URL() + "/metrics")
		if err == nil {
			metrics.ReadFrom(resp.Body)
			resp.Body.Close()
		}
		if !strings.Contains(metrics.String(), "sluice_cluster_bus_reconnects_total 1") &&
			!strings.Contains(metrics.String(), "sluice_cluster_bus_reconnects_total 2") {
			t.Errorf("the event bus did not report reconnecting after the outage")
		}
	})

	// Last: the fault suite (fault_test.go) leaves nodes restarted.
	t.Run("faults", func(t *testing.T) { faultSuite(t, c) })
}

// mustGitNoFail is git for goroutines, which must not call t.Fatal.
func mustGitNoFail(dir string, args ...string) string {
	out, err := git(dir, nil, args...)
	if err != nil {
		return ""
	}
	return out
}
