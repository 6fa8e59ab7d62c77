package pull_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// A node died twice over in the middle of pushes, and restarted: once
// after git renamed the pull request's source branch but before the move
// was recorded (nobody was told), once inside the prepared window of a
// push to main (git's main.lock stayed behind). The restarted node's
// reconciler announces the first move, so the pull request is rescoped
// and merges, and removes the dead lock, so main takes pushes at once; the
// pack cache, off while a transaction was pending, serves again.
func TestCrashedPushesReconciled(t *testing.T) {
	w := newWorldOpts(t, testbed.NodeOptions{Configure: func(c *config.Config) {
		c.Node.ID = "crash-node"
		c.Node.ReconcileInterval = config.Duration{Duration: 100 * time.Millisecond}
	}})
	ctx := context.Background()
	st := w.n.Store()
	from := w.branch("crashy", "main", map[string]string{"crashy.txt": "one\n"})
	pr := w.openPR("crashy", "main", "crashy")
	mainTip := w.server("rev-parse", "refs/heads/main")

	// What the dead run left: crashy moved on disk, its record pending.
	w.write("crashy.txt", "two\n")
	moved := w.commit("lost announcement")
	w.git("push", "-q", "-f", "origin", "HEAD:refs/heads/scratch")
	w.server("update-ref", "refs/heads/crashy", moved)
	if _, err := st.BeginRefTxn(ctx, w.repo.ID, "crash-node", "dead-run", from+" "+moved+" refs/heads/crashy\n"); err != nil {
		t.Fatal(err)
	}
	// And main.lock, holding what git was about to write, with main
	// still at its old value.
	w.git("checkout", "-q", "-B", "main", "origin/main")
	w.write("main.txt", "blocked\n")
	blocked := w.commit("blocked push")
	w.git("push", "-q", "-f", "origin", "HEAD:refs/heads/scratch")
	lock := filepath.Join(w.bare, "refs", "heads", "main.lock")
	if err := os.WriteFile(lock, []byte(blocked+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BeginRefTxn(ctx, w.repo.ID, "crash-node", "dead-run", mainTip+" "+blocked+" refs/heads/main\n"); err != nil {
		t.Fatal(err)
	}

	// The node running now is a later run of crash-node: it reconciles
	// within its interval, and main takes the push within seconds.
	start := time.Now()
	wait.For(t, "the dead run's transactions reconciled", 45*time.Second, func() bool {
		s, err := st.RepoState(ctx, w.repo.ID)
		return err == nil && s.Pending == 0
	})
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Fatalf("main.lock still there: %v", err)
	}
	w.git("push", "-q", "origin", "HEAD:refs/heads/main")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("main took pushes again after %v", took)
	}

	wait.For(t, "the pull request rescoped to the unannounced commit", 45*time.Second, func() bool {
		return w.pr(pr.ID).FromRef.LatestCommit == moved
	})
	got := w.pr(pr.ID)
	var merged prJSON
	w.must(200, w.admin, "POST", fmt.Sprintf("%s/%d/merge?version=%d", prs, pr.ID, got.Version), map[string]any{}, &merged)
	if merged.State != "MERGED" {
		t.Fatalf("state %s after merge", merged.State)
	}

	// Nothing pending: clones are cached again.
	cache := w.n.App.Cache
	if cache == nil {
		t.Fatal("no pack cache on the test node")
	}
	wait.For(t, "a clone served from the pack cache", 45*time.Second, func() bool {
		testbed.Git(t, t.TempDir(), "clone", "-q", "--bare", w.n.CloneURL("PRJ", "app", "admin", w.n.AdminPassword), "c.git")
		return cache.Stats().Hits > 0
	})
}
