package pull_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// TestCanMergeWritesNothing asks "can it merge" under every strategy and
// checks that the answers are right for the current target commit, that
// the merge checks stay live while the merge outcome is reused, and that
// no GET leaves an object (or a scratch directory) in the repository.
func TestCanMergeWritesNothing(t *testing.T) {
	w := newWorld(t)
	w.branch("feat", "main", map[string]string{"feat.txt": "feat\n"})
	pr := w.openPR("feat", "main", "feat")
	base := fmt.Sprintf("%s/%d", prs, pr.ID)
	stored := func() *store.PullRequest {
		got, err := w.n.Store().(store.PullStore).PullRequestByID(t.Context(), pr.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Let the prepare job (which writes the preview merge, on purpose)
	// finish before counting objects.
	wait.For(t, "the merge preview", 45*time.Second, func() bool { return stored().MergeStatus == "CLEAN" })

	objects := func() int {
		out := w.server("cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
		return len(strings.Fields(out))
	}
	type status struct {
		CanMerge   bool     `json:"canMerge"`
		Conflicted bool     `json:"conflicted"`
		Conflicts  []string `json:"conflicts"`
		Vetoes     []struct {
			Summary string `json:"summaryMessage"`
		} `json:"vetoes"`
	}
	get := func(strategy string) status {
		t.Helper()
		var st status
		path := base + "/merge"
		if strategy != "" {
			path += "?strategyId=" + strategy
		}
		w.must(200, w.admin, "GET", path, nil, &st)
		return st
	}
	summaries := func(st status) string {
		var s []string
		for _, v := range st.Vetoes {
			s = append(s, v.Summary)
		}
		return strings.Join(s, ",")
	}

	// settled waits for the rescope and prepare jobs of the last push
	// (they write preview merges, on purpose), so that what the GETs
	// after it write, if anything, is all that changes.
	settled := func(status string) {
		t.Helper()
		main := w.server("rev-parse", "refs/heads/main")
		feat := w.server("rev-parse", "refs/heads/feat")
		wait.For(t, "the rescoped merge status", 45*time.Second, func() bool {
			pr := stored()
			return pr.ToSHA == main && pr.FromSHA == feat && pr.MergeStatus == status
		})
	}
	// noWrites runs the GETs of fn and fails if the repository gained an
	// object or kept a scratch directory.
	noWrites := func(what string, fn func()) {
		t.Helper()
		before := objects()
		fn()
		if after := objects(); after != before {
			t.Errorf("%s: the repository went from %d to %d objects", what, before, after)
		}
		entries, err := os.ReadDir(filepath.Join(w.bare, "objects"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "tmp_objdir-dryrun-") {
				t.Errorf("%s: scratch object directory %s left behind", what, e.Name())
			}
		}
	}

	noWrites("fast-forwardable", func() {
		for _, strategy := range []string{"", "no-ff", "ff", "ff-only", "squash", "squash-ff-only", "rebase-no-ff"} {
			if st := get(strategy); !st.CanMerge || st.Conflicted {
				t.Fatalf("%q on a fast-forwardable branch: %+v", strategy, st)
			}
		}
	})

	// The target moves: a clean merge for ff and rebase, no longer a
	// fast-forward, and the answers are about the new target commit even
	// though the old pair's outcome is remembered.
	w.branch("main", "main", map[string]string{"other.txt": "other\n"})
	settled("CLEAN")
	noWrites("target moved", func() {
		for _, tc := range []struct {
			strategy string
			can      bool
			vetoes   string
		}{
			{"no-ff", true, ""},
			{"ff-only", false, "Fast-forward not possible"},
			{"squash-ff-only", false, "Fast-forward not possible"},
			{"rebase-no-ff", true, ""},
		} {
			if st := get(tc.strategy); st.CanMerge != tc.can || summaries(st) != tc.vetoes {
				t.Errorf("%s after the target moved: %+v, want can=%v vetoes %q", tc.strategy, st, tc.can, tc.vetoes)
			}
		}
	})

	// And now it conflicts, under every strategy that merges. The GET
	// before the jobs catch up computes it (the row still describes the
	// old commits); the ones after read it.
	w.branch("feat", "feat", map[string]string{"README": "theirs\n"})
	w.branch("main", "main", map[string]string{"README": "ours\n"})
	for _, strategy := range []string{"no-ff", "squash", "rebase-no-ff"} {
		st := get(strategy)
		if st.CanMerge || !st.Conflicted || len(st.Conflicts) != 1 || st.Conflicts[0] != "README" {
			t.Errorf("%s with a conflict: %+v", strategy, st)
		}
	}
	settled("CONFLICTED")
	noWrites("conflicted", func() {
		for _, strategy := range []string{"no-ff", "ff", "squash", "rebase-no-ff"} {
			if st := get(strategy); st.CanMerge || !st.Conflicted {
				t.Errorf("%s with a conflict, settled: %+v", strategy, st)
			}
		}
	})

	// Merge checks are read live: an approval requirement shows up at
	// once, on a merge outcome that is remembered.
	w.must(200, w.admin, "POST", "/rest/api/1.0/projects/PRJ/repos/app/settings/pull-requests", map[string]any{
		"checks": map[string]any{"minApprovals": 1}}, nil)
	if st := get("no-ff"); summaries(st) != "Not enough approvals,Merge conflicts" {
		t.Errorf("with an approval required: %+v", st)
	}
	w.must(200, w.bob, "POST", base+"/approve", nil, nil)
	if st := get("no-ff"); summaries(st) != "Merge conflicts" {
		t.Errorf("after the approval: %+v", st)
	}
}
