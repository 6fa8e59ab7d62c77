package hooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

// Leftovers of git processes that died before they recorded anything.
//
// git takes a push's ref locks, and receives its pack into a quarantine
// (objects/tmp_objdir-incoming-*), before the prepared hook records a ref
// transaction; a pull request job's update-ref locks its ref the same way.
// A node killed in that window leaves a lock that no transaction names,
// which blocks the branch, or a quarantine as large as the pack, and
// housekeeping removes such files only once they are an hour old, since a
// file carries no owner.
//
// So the intent is recorded before git starts: Register writes a
// store.GitRun (repository, node, process instance, start time) and done
// deletes it, two short statements per push. When a run's instance is
// provably dead, by the rules the reconciler applies to ref transactions
// (an earlier process of this node: at once; another node's: once the run
// is AbandonAfter old and ProcessLive says its process is gone), its
// repository may hold leftovers, and the reconciler removes there
// (repo.RemoveDeadLeftovers) every ref lock and push quarantine last
// modified before the cutoff
//
//	min(when the dead process was dead at the latest,
//	    start of the oldest other run of the repository not proven dead − clockMargin)
//
// except the locks of refs a pending transaction of a process not proven
// dead names. The first bound is this process's start for an earlier
// process of this node, the moment of the pass otherwise. The second is
// what makes the removal safe against live gits: every git that may take a
// ref lock or make a quarantine in a Sluice repository is registered
// (the reference-transaction hook refuses an unregistered one, and a
// registration whose run could not be recorded is refused too), a git
// creates its files after its run started, so a file older than the
// oldest live run is no live git's. While a live run started before a
// dead file's time plus clockMargin (a long push on another node that
// started before the crash, or any push in flight right after it), the
// file waits for that run to end: the dead run's record stays, and the
// background reconciler tries again after clockMargin instead of a whole
// period later.
//
// What is left is narrow, and safe for refs: a release without git runs
// (a rolling upgrade) takes locks no run bounds, and two reconcilers
// cleaning the same repository may race on one lock (one removes it, a
// live git takes it again, the other removes that). Either way a live git
// loses its lock between taking it and renaming it into place: its rename
// then fails, unless yet another git took the lock meanwhile (then the
// first git's rename would install the other's value), so a single
// theft makes that push fail and moves no ref. clockMargin covers the
// clocks of the nodes (run start times) and of the file server (file
// times) disagreeing.

// clockMargin is how far apart the clocks of the nodes and of the shared
// filesystem's server may be, less the time git takes from its start to
// its first lock (tens of milliseconds at least). NTP keeps such clocks
// within milliseconds; a quarter second leaves a wide berth. It is also
// how long after a dead file's time a live run must have started not to
// hold its removal up: every push already in flight at the crash, or
// started within this margin after the dead git's last write, delays it
// until it ends.
const clockMargin = 250 * time.Millisecond

// recordRun writes r's git run; a failure leaves r unrecorded, and its
// hook calls are refused (see dispatch).
func (s *Server) recordRun(r *registration) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	id, err := s.st.BeginGitRun(ctx, r.req.RepoID, s.cfg.NodeID, s.cfg.Instance)
	if err != nil {
		s.logger.Warn("record git run; its hook calls will be refused", "repo_id", r.req.RepoID, "err", err)
		return
	}
	r.run = id
}

// endRun deletes r's git run; a failure is retried by the reconciler.
func (s *Server) endRun(r *registration) {
	if r.run == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.st.EndGitRun(ctx, r.run); err != nil {
		s.logger.Warn("end git run; the reconciler retries", "repo_id", r.req.RepoID, "run_id", r.run, "err", err)
		s.mu.Lock()
		s.endedRuns[r.run] = true
		s.mu.Unlock()
	}
}

// reconcileRuns removes what dead git runs of repoID (0: every
// repository) left; keep holds, per repository, the refs named by
// pending transactions of processes not proven dead.
func (s *Server) reconcileRuns(ctx context.Context, repoID int64, keep map[int64]map[string]bool, live map[string]bool) error {
	runs, err := s.st.GitRuns(ctx)
	if err != nil {
		return fmt.Errorf("list git runs: %w", err)
	}
	now := time.Now()
	type repoRuns struct {
		dead       []store.GitRun
		deadBy     time.Time // the latest moment a dead process was dead
		oldestLive time.Time
	}
	repos := map[int64]*repoRuns{}
	var errs []error
	for _, g := range runs {
		if repoID != 0 && g.RepoID != repoID {
			continue
		}
		rr := repos[g.RepoID]
		if rr == nil {
			rr = &repoRuns{}
			repos[g.RepoID] = rr
		}
		state, deadBy, err := s.runState(ctx, g, live, now)
		if err != nil {
			errs = append(errs, err)
		}
		switch state {
		case runLive:
			if rr.oldestLive.IsZero() || g.StartedAt.Before(rr.oldestLive) {
				rr.oldestLive = g.StartedAt
			}
		case runDead:
			rr.dead = append(rr.dead, g)
			if deadBy.After(rr.deadBy) {
				rr.deadBy = deadBy
			}
		}
	}
	for id, rr := range repos {
		if len(rr.dead) == 0 {
			continue
		}
		cutoff, complete := rr.deadBy, true
		if !rr.oldestLive.IsZero() && rr.oldestLive.Add(-clockMargin).Before(cutoff) {
			cutoff, complete = rr.oldestLive.Add(-clockMargin), false
		}
		if s.cfg.Refs != nil {
			removed, err := s.cfg.Refs.RemoveDeadLeftovers(id, cutoff, keep[id])
			for _, p := range removed {
				kind := "lock"
				if strings.HasPrefix(p, "objects/") {
					kind = "quarantine"
				}
				s.metrics.leftovers.WithLabelValues(kind).Inc()
			}
			if len(removed) > 0 {
				s.logger.Warn("removed what dead git processes left", "repo_id", id, "removed", removed,
					"dead_runs", len(rr.dead), "complete", complete)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("repository %d: %w", id, err))
				continue
			}
		}
		if !complete {
			// A live run still bounds the cutoff: try again soon.
			select {
			case s.soon <- struct{}{}:
			default:
			}
			continue
		}
		for _, g := range rr.dead {
			if err := s.st.EndGitRun(ctx, g.ID); err != nil {
				errs = append(errs, fmt.Errorf("end dead git run %d: %w", g.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// What the reconciler knows of a git run's process.
const (
	runLive     = iota // may still run: its run bounds the cutoff
	runReplaced        // dead (its node runs another process), not ours to clean yet
	runDead            // dead, and ours to clean
)

// runState judges g's process and, when it is dead and ours to clean, by
// when it was dead at the latest. A run of this process whose end could
// not be recorded is ended here instead. A run whose node restarted since
// is dead but left to the restarted node for AbandonAfter; it no longer
// bounds anything, or one crash would hold up another's cleanup.
func (s *Server) runState(ctx context.Context, g store.GitRun, live map[string]bool, now time.Time) (int, time.Time, error) {
	if g.Instance == s.cfg.Instance {
		s.mu.Lock()
		ended := s.endedRuns[g.ID]
		s.mu.Unlock()
		if !ended {
			return runLive, time.Time{}, nil
		}
		if err := s.st.EndGitRun(ctx, g.ID); err != nil {
			return runLive, time.Time{}, fmt.Errorf("end git run %d: %w", g.ID, err)
		}
		s.mu.Lock()
		delete(s.endedRuns, g.ID)
		s.mu.Unlock()
		return runReplaced, time.Time{}, nil
	}
	if g.NodeID == s.cfg.NodeID {
		return runDead, s.started, nil // an earlier process of this node
	}
	if s.cfg.ProcessLive == nil {
		return runLive, time.Time{}, nil
	}
	ask := func(node, instance string) (bool, error) {
		key := node + "\x00" + instance
		alive, ok := live[key]
		if !ok {
			var err error
			if alive, err = s.cfg.ProcessLive(ctx, node, instance); err != nil {
				return true, fmt.Errorf("is node %q alive: %w", node, err)
			}
			live[key] = alive
		}
		return alive, nil
	}
	alive, err := ask(g.NodeID, g.Instance)
	if err != nil || alive {
		return runLive, time.Time{}, err
	}
	if now.Sub(g.StartedAt) >= s.cfg.AbandonAfter {
		return runDead, now, nil
	}
	// Gone without a heartbeat may be a paused process with git inside
	// a hook; live under another instance is a restart, which no
	// process of the old one survives.
	restarted, err := ask(g.NodeID, "")
	if err != nil || !restarted {
		return runLive, time.Time{}, err
	}
	return runReplaced, time.Time{}, nil
}

// removeDeadSockets removes, before this server listens, the hook sockets
// in dir that nobody listens on (a crashed process of this node left them;
// a clean Close removes its own), and the temporary socket directories of
// this user that hold only such sockets. A socket is judged by connecting
// to it: refused means no listener.
func removeDeadSockets(dir string) {
	if dir != "" {
		removeDeadSocketsIn(dir)
	}
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "sluice-hooks-") {
			continue
		}
		p := filepath.Join(tmp, e.Name())
		if fi, err := e.Info(); err != nil || !ownedByMe(fi) {
			continue
		}
		if n, dead := removeDeadSocketsIn(p); n > 0 && n == dead {
			os.Remove(p) // fails, harmlessly, if anything else is inside
		}
	}
}

// removeDeadSocketsIn removes dir's dead hook sockets and reports how many
// hook sockets it found and how many were dead.
func removeDeadSocketsIn(dir string) (found, dead int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 || !strings.HasPrefix(e.Name(), "hooks-") || !strings.HasSuffix(e.Name(), ".sock") {
			continue
		}
		found++
		p := filepath.Join(dir, e.Name())
		conn, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) && os.Remove(p) == nil {
			dead++
		}
	}
	return found, dead
}

func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
