package repo

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// hideRefs makes refs/internal a hidden namespace for one test: no
// namespace is hidden today (pull request refs are served to readers), but
// the check must hold for one that is.
func hideRefs(t *testing.T) {
	old := gitcmd.HiddenRefs
	gitcmd.HiddenRefs = []string{"refs/internal"}
	t.Cleanup(func() { gitcmd.HiddenRefs = old })
}

func TestCheckWants(t *testing.T) {
	hideRefs(t)
	ctx := context.Background()
	m := newManager(t)
	var mu sync.Mutex
	outcomes := map[string]int{}
	m.OnWantCheck(func(o string) { mu.Lock(); outcomes[o]++; mu.Unlock() })
	w, h := seed(t, m, 1)

	// A branch that is deleted later, and a commit only a hidden ref holds.
	w.git("checkout", "-q", "-b", "doomed", h.c3)
	w.write("doomed.txt", "doomed\n")
	doomed := w.commit("doomed")
	w.git("push", "-q", m.Path(1), "doomed")
	w.git("checkout", "-q", "-b", "hidden", h.c3)
	w.write("hidden.txt", "only under a pull request ref\n")
	hidden := w.commit("hidden")
	hiddenBlob := w.git("rev-parse", "hidden:hidden.txt")
	w.git("push", "-q", m.Path(1), "hidden:refs/internal/1")
	// A pull request ref is served to readers, as Bitbucket does.
	w.git("checkout", "-q", "-b", "pr", h.c3)
	w.write("pr.txt", "pull request\n")
	prCommit := w.commit("pr")
	w.git("push", "-q", m.Path(1), "pr:refs/pull-requests/1/from")
	bareGit(t, m.Path(1), "update-ref", "-d", "refs/heads/doomed")
	w.git("checkout", "-q", "main")

	oldBlob := w.git("rev-parse", h.c1+":dir/a.txt") // only in c1's tree
	oldTree := w.git("rev-parse", h.c1+":dir")
	tipBlob := w.git("rev-parse", h.c3+":README.md")

	allowed := map[string]string{
		"branch tip":              h.c3,
		"annotated tag object":    h.v2tag,
		"commit behind a tip":     h.c1,
		"blob of an old commit":   oldBlob,
		"tree of an old commit":   oldTree,
		"blob of the tip's tree":  tipBlob,
		"feature branch tip":      h.feature,
		"commit reached from tag": h.c2,
		"pull request commit":     prCommit,
	}
	for name, oid := range allowed {
		if err := m.CheckWants(ctx, 1, []string{oid}); err != nil {
			t.Errorf("%s %s: %v", name, oid, err)
		}
	}
	if err := m.CheckWants(ctx, 1, []string{h.c3, h.feature, h.c1, oldBlob}); err != nil {
		t.Errorf("several reachable wants: %v", err)
	}

	refused := map[string]string{
		"commit of a deleted branch": doomed,
		"commit under a hidden ref":  hidden,
		"blob under a hidden ref":    hiddenBlob,
		"missing object":             strings.Repeat("ab", 20),
	}
	for name, oid := range refused {
		err := m.CheckWants(ctx, 1, []string{h.c3, oid})
		if err == nil || problem.KindOf(err) != problem.Forbidden || !strings.Contains(err.Error(), "not our ref "+oid) {
			t.Errorf("%s %s: got %v, want not our ref", name, oid, err)
		}
	}

	// A fork sees only its own refs, though it reads the parent's objects.
	if err := m.Fork(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	w.write("later.txt", "later\n")
	later := w.commit("later")
	laterBlob := w.git("rev-parse", "HEAD:later.txt")
	w.git("push", "-q", m.Path(1), "main")
	if err := m.CheckWants(ctx, 1, []string{later, laterBlob}); err != nil {
		t.Errorf("parent's own new commit: %v", err)
	}
	for _, oid := range []string{later, laterBlob, hidden} {
		if err := m.CheckWants(ctx, 2, []string{oid}); problem.KindOf(err) != problem.Forbidden {
			t.Errorf("fork want %s: got %v, want not our ref", oid, err)
		}
	}
	if err := m.CheckWants(ctx, 2, []string{h.c3, oldBlob}); err != nil {
		t.Errorf("fork's own history: %v", err)
	}

	// After housekeeping (bitmaps), the answers are the same.
	if err := m.Housekeep(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckWants(ctx, 1, []string{oldBlob, oldTree}); err != nil {
		t.Errorf("old objects with bitmaps: %v", err)
	}
	if err := m.CheckWants(ctx, 1, []string{hiddenBlob}); problem.KindOf(err) != problem.Forbidden {
		t.Errorf("hidden blob with bitmaps: got %v", err)
	}

	// A walk that cannot finish in time refuses.
	m.SetWantCheckTimeout(time.Nanosecond)
	if err := m.CheckWants(ctx, 1, []string{oldBlob}); problem.KindOf(err) != problem.Forbidden {
		t.Errorf("timed-out check: got %v, want a refusal", err)
	}
	m.SetWantCheckTimeout(0)
	// Tips still pass at no cost, whatever the bound.
	if err := m.CheckWants(ctx, 1, []string{later}); err != nil {
		t.Errorf("tip after timeout reset: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, o := range []string{"tip", "walked", "missing", "unreachable", "timeout"} {
		if outcomes[o] == 0 {
			t.Errorf("no %q outcome counted: %v", o, outcomes)
		}
	}
}

func TestReadTips(t *testing.T) {
	hideRefs(t)
	m := newManager(t)
	_, h := seed(t, m, 1)
	dir := m.Path(1)
	bareGit(t, dir, "update-ref", "refs/internal/7", h.c1)
	tips := readTips(dir)
	for _, oid := range []string{h.c3, h.feature, h.v2tag, h.c1} {
		if !tips[oid] {
			t.Errorf("loose tip %s missing", oid)
		}
	}
	bareGit(t, dir, "pack-refs", "--all")
	bareGit(t, dir, "update-ref", "-d", "refs/tags/v1")
	tips = readTips(dir)
	for _, oid := range []string{h.c3, h.feature, h.v2tag} {
		if !tips[oid] {
			t.Errorf("packed tip %s missing", oid)
		}
	}
	if !tips[h.c3] {
		t.Errorf("peeled tag target missing")
	}
	if tips[h.c1] {
		t.Errorf("hidden ref's target %s counted as a tip", h.c1)
	}
}
