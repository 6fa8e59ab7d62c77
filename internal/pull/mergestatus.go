package pull

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Merge status: "would these commits merge under this strategy?", the
// part of CanMerge that needs git. Every view of an open pull request
// asks it (the web overview, GET …/merge), so it must be cheap and must
// not write into the repository.
//
// The answer depends on the source commit, the target commit and the
// strategy, nothing else (not on who asks, nor on the merge checks, which
// CanMerge evaluates live from the database). It is therefore looked up,
// in order:
//
//  1. in this node's memory, keyed by (source, target, strategy);
//  2. in the pull request's row, for the strategies whose outcome is the
//     plain three-way merge (no-ff, ff, squash): the prepare job records
//     merge_status for exactly the row's (from_sha, to_sha), and rescope
//     resets it to UNKNOWN when either moves, so a CLEAN or CONFLICTED
//     there is about the commits it names;
//  3. computed by a dry run, shared by concurrent callers (singleflight),
//     then kept in memory and, for the three-way strategies and when the
//     commits are the row's, recorded in the row like the job does, so
//     other nodes reuse it.
//
// A dry run writes nothing to the repository. ff-only and squash-ff-only
// only ask merge-base --is-ancestor. The three-way strategies run
// merge-tree --write-tree, which writes trees and merged blobs but no
// commit; rebase must write the synthetic and replayed commits its
// replay is made of (git 2.39 has no merge-tree --merge-base). All of
// these writes go to a scratch object directory (scratchODB): the
// repository's objects are read through GIT_ALTERNATE_OBJECT_DIRECTORIES,
// new objects land in a temporary directory that is removed when the dry
// run ends, so a GET leaves no object behind, not even an unreferenced
// tree. The scratch directory lives under objects/ with the tmp_objdir-
// prefix git uses for push quarantines, so housekeeping's stale
// quarantine sweep removes one left by a crash.

// mergeOutcome is what a dry run found: vetoes of the merge itself
// (conflicts, "fast-forward not possible", "rebase not possible") and the
// conflicted files. Both are nil for a clean merge. Never mutated once
// stored.
type mergeOutcome struct {
	vetoes    []Veto
	conflicts []string
}

// outcomeCacheSize bounds the remembered outcomes. An entry is a few
// hundred bytes; 4096 covers every open pull request of a busy node
// several times over (Bitbucket's Small profile has ~35,000 open pull
// requests across 6,200 repositories, of which only the viewed ones
// matter), for about a megabyte.
const outcomeCacheSize = 4096

// outcomeCache remembers outcomes by (source, target, strategy). The key
// names commits, so an entry never goes stale; eviction is first in,
// first out.
type outcomeCache struct {
	mu    sync.Mutex
	items map[string]*mergeOutcome
	order []string
}

func (c *outcomeCache) get(key string) *mergeOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.items[key]
}

func (c *outcomeCache) put(key string, o *mergeOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items == nil {
		c.items = map[string]*mergeOutcome{}
	}
	if _, ok := c.items[key]; ok {
		return
	}
	if len(c.order) >= outcomeCacheSize {
		delete(c.items, c.order[0])
		c.order = c.order[1:]
	}
	c.items[key] = o
	c.order = append(c.order, key)
}

func outcomeKey(from, to, strategy string) string {
	return from + ":" + to + ":" + strategy
}

// threeWay reports whether strategy's outcome is the three-way merge of
// the target and the source: ff falls back to it, and when the target is
// an ancestor of the source the three-way merge is clean too.
func threeWay(strategy string) bool {
	return strategy == NoFF || strategy == FF || strategy == Squash
}

// Merge status values stored on the pull request row.
const (
	mergeClean      = "CLEAN"
	mergeConflicted = "CONFLICTED"
)

// noHistory is the conflict recorded for branches without a merge base.
const noHistory = "(no common history)"

func conflictVeto(conflicts []string) Veto {
	return Veto{"Merge conflicts", "merge conflicts in " + strings.Join(conflicts, ", ")}
}

// outcomeFromRow reads the outcome the prepare job (or an earlier dry
// run) stored on the row.
func outcomeFromRow(pr *store.PullRequest) *mergeOutcome {
	switch pr.MergeStatus {
	case mergeClean:
		return &mergeOutcome{}
	case mergeConflicted:
		conflicts := strings.Split(strings.TrimSpace(pr.Conflicts), "\n")
		if len(conflicts) == 1 && conflicts[0] == "" {
			conflicts = []string{"(unknown)"}
		}
		return &mergeOutcome{conflicts: conflicts, vetoes: []Veto{conflictVeto(conflicts)}}
	}
	return nil
}

// mergeOutcome is the outcome of merging pr's source into target commit
// to under strategy; see the top of this file for where it comes from.
func (s *Service) mergeOutcome(ctx context.Context, pr *store.PullRequest, to, strategy string) (*mergeOutcome, error) {
	key := outcomeKey(pr.FromSHA, to, strategy)
	if o := s.outcomes.get(key); o != nil {
		s.metrics.mergeStatus.WithLabelValues("memory").Inc()
		return o, nil
	}
	if threeWay(strategy) && to == pr.ToSHA {
		if o := outcomeFromRow(pr); o != nil {
			s.metrics.mergeStatus.WithLabelValues("stored").Inc()
			s.outcomes.put(key, o)
			return o, nil
		}
	}
	o, joined, err := s.dryRuns.do(ctx, key, func(ctx context.Context) (*mergeOutcome, error) {
		o, err := s.dryRun(ctx, pr, to, strategy)
		if err != nil {
			return nil, err
		}
		s.outcomes.put(key, o)
		if threeWay(strategy) && to == pr.ToSHA {
			status, conflicts := mergeClean, ""
			if len(o.conflicts) > 0 {
				status, conflicts = mergeConflicted, strings.Join(o.conflicts, "\n")
			}
			// A cache write: losing it costs the next node a dry run.
			if err := s.ps.SetMergeStatus(ctx, pr.ID, pr.FromSHA, to, status, conflicts); err != nil {
				s.logger.Warn("record merge status", "pr_id", pr.ID, "err", err)
			}
		}
		return o, nil
	})
	if err != nil {
		return nil, err
	}
	source := "computed"
	if joined {
		source = "joined"
	}
	s.metrics.mergeStatus.WithLabelValues(source).Inc()
	return o, nil
}

// dryRun works out whether pr's source merges into to under strategy,
// writing only into a scratch object directory.
func (s *Service) dryRun(ctx context.Context, pr *store.PullRequest, to, strategy string) (*mergeOutcome, error) {
	dir := s.repos.Path(pr.RepoID)
	from := pr.FromSHA
	switch strategy {
	case FFOnly, SquashFFOnly:
		ok, err := s.isAncestor(ctx, dir, to, from, nil)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &mergeOutcome{vetoes: []Veto{notFastForward(strategy)}}, nil
		}
		return &mergeOutcome{}, nil
	}
	env, cleanup, err := scratchODB(dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var conflicts []string
	if threeWay(strategy) {
		_, conflicts, err = s.mergeTree(ctx, dir, env, to, from)
	} else {
		_, err = s.rebase(ctx, dir, env, to, from, identity{name: "Sluice", email: "sluice@localhost"})
	}
	var ve *VetoError
	switch {
	case problem.Is(err, problem.Conflict) && threeWay(strategy):
		// merge-tree refuses unrelated histories.
		conflicts = []string{noHistory}
	case errors.As(err, &ve):
		return &mergeOutcome{vetoes: ve.Vetoes, conflicts: ve.Conflicts}, nil
	case err != nil:
		return nil, err
	}
	if len(conflicts) > 0 {
		return &mergeOutcome{conflicts: conflicts, vetoes: []Veto{conflictVeto(conflicts)}}, nil
	}
	return &mergeOutcome{}, nil
}

// scratchODB makes a temporary object directory under dir's objects and
// returns the environment that sends a git command's new objects there
// while it reads the repository's (and, for a fork, its parent's) through
// the alternates chain, and the function that removes it.
func scratchODB(dir string) ([]string, func(), error) {
	objects := filepath.Join(dir, "objects")
	tmp, err := os.MkdirTemp(objects, "tmp_objdir-dryrun-")
	if err != nil {
		return nil, nil, fmt.Errorf("scratch object directory: %w", err)
	}
	env := []string{"GIT_OBJECT_DIRECTORY=" + tmp, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Clean(objects)}
	return env, func() { os.RemoveAll(tmp) }, nil
}

// notFastForward is the veto of the fast-forward-only strategies.
func notFastForward(strategy string) Veto {
	return Veto{"Fast-forward not possible",
		fmt.Sprintf("strategy %s needs the source branch to contain the target branch; rebase the source branch first", strategy)}
}
