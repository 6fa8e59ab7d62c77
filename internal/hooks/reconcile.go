package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Reconciliation: what became of a ref transaction nobody will finish.
//
// A transaction is recorded in "prepared", while git holds the lock of
// every ref it names, and ended in "committed" or "aborted". Three things
// leave one pending: git is killed in between (the request's done then
// finds it open), the database is away when "committed" runs (the ref
// moved, the record did not), or the node dies (with its git, or between
// git's rename and the record). A pending transaction keeps the pack cache
// off for its repository, and a ref that moved without its committed phase
// reached nobody: no rescope, no webhook, no cache event.
//
// The record keeps the hook's "old new ref" lines, so the refs on disk say
// what happened, once no git of the transaction can still run:
//
//   - a ref at new moved: the transaction committed;
//   - a ref at old did not move; its lock file, if git left one holding
//     new, is the dead git's and is removed (repo.RemoveDeadRefLock), so
//     the branch takes pushes again at once instead of after an hour;
//   - a ref elsewhere moved, and something later moved it again; it is
//     announced all the same, because listeners are idempotent and
//     announcing twice is harmless where announcing never is not.
//
// A transaction with a moved ref is committed: the OnRefsChanged and the
// OnPushed listeners run (cache invalidation and the cluster event,
// rescope, webhooks, housekeeping) before the record ends, so each moved
// ref is announced at least once even if the reconciler dies half-way;
// the record's end bumps the generation and turns the cache back on.
//
// Who reconciles what: a transaction of this process once its git has
// exited (at done, or later in the background when the database was
// away); one recorded by an earlier run of this node at once (a node runs
// one process: its restart proves the old one dead); one of another node
// when that node's process is gone (ProcessLive: restarted, deregistered,
// or no heartbeat for the registry's GoneAfter) and the transaction is
// older than AbandonAfter, which outlasts the hook client's timeout, so a
// node that is merely paused cannot have a git still inside its hook. Of
// several live nodes, the one holding the transaction's lease
// (store.ClaimRefTxn) does it; when it dies, the lease runs out and another
// takes over.
//
// Reconcile (every pending transaction) and ReconcileRepo (one
// repository's) are the API; the background loop and the start of a node
// call the first, the integrity check the second.

// DefaultAbandonAfter is Config.AbandonAfter's default: the hook client's
// timeout (60 s) and a margin for clock skew between nodes, since a
// transaction's age is read against its recorder's clock.
const DefaultAbandonAfter = 70 * time.Second

// RefDisk reads and repairs refs on disk (repo.Manager implements it).
type RefDisk interface {
	// ReadRef returns the object id ref points at, "" when it does not
	// exist.
	ReadRef(repoID int64, ref string) (string, error)
	// RemoveDeadRefLock removes ref's lock if it holds want, the value a
	// dead git was about to write; it reports whether it did.
	RemoveDeadRefLock(repoID int64, ref, want string) (bool, error)
	// RemoveDeadLeftovers removes the ref locks and push quarantines last
	// modified before cutoff, except the locks of the refs in keep, and
	// returns what it removed (see leftovers.go).
	RemoveDeadLeftovers(repoID int64, cutoff time.Time, keep map[string]bool) ([]string, error)
}

// orphan is a transaction of this process whose git has exited but whose
// end could not be recorded, with the request it belonged to.
type orphan struct {
	txn store.RefTxn
	req Request
}

// Reconcile reconciles every pending transaction no live process will
// finish (see the comment above). Call it at start, before serving.
func (s *Server) Reconcile(ctx context.Context) error {
	return s.reconcilePass(ctx, 0)
}

// ReconcileRepo is Reconcile for one repository's transactions.
func (s *Server) ReconcileRepo(ctx context.Context, repoID int64) error {
	if repoID <= 0 {
		return problem.New(problem.Invalid, "invalid repository id %d", repoID)
	}
	return s.reconcilePass(ctx, repoID)
}

func (s *Server) reconcileLoop(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.soon:
			// A dead run's leftovers waited for a live run's margin
			// (see leftovers.go): look again once it has passed
			// rather than a whole period later.
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(clockMargin + clockMargin/4):
			}
		}
		ctx, cancel := context.WithTimeout(s.ctx, max(every, 10*time.Second))
		err := s.reconcilePass(ctx, 0)
		cancel()
		switch {
		case err != nil && s.ctx.Err() == nil:
			// An outage fails every pass; say so once, and when it ends.
			if !failing {
				s.logger.Warn("reconcile ref transactions; retrying", "err", err)
			}
			failing = true
		case err == nil && failing:
			s.logger.Info("reconcile ref transactions recovered")
			failing = false
		}
	}
}

// reconcilePass reconciles the abandoned transactions of repoID (0: all).
func (s *Server) reconcilePass(ctx context.Context, repoID int64) error {
	txns, err := s.st.PendingRefTxns(ctx, "")
	if err != nil {
		return fmt.Errorf("list pending ref transactions: %w", err)
	}
	// One registry look-up per process start per pass.
	live := map[string]bool{}
	// keep: per repository, the refs of transactions no process proven
	// dead holds, whose locks may be a live git's.
	keep := map[int64]map[string]bool{}
	var errs []error
	for _, t := range txns {
		if repoID != 0 && t.RepoID != repoID {
			continue
		}
		req, ok, err := s.abandoned(ctx, t, live)
		if err != nil {
			errs = append(errs, err)
		}
		if err != nil || !ok {
			updates, _ := ParseUpdates([]byte(t.Updates))
			for _, u := range updates {
				if keep[t.RepoID] == nil {
					keep[t.RepoID] = map[string]bool{}
				}
				keep[t.RepoID][u.Ref] = true
			}
			continue
		}
		if _, err := s.reconcileTxn(ctx, t, req); err != nil {
			errs = append(errs, fmt.Errorf("ref transaction %d: %w", t.ID, err))
			continue
		}
		s.mu.Lock()
		delete(s.orphans, t.ID)
		s.mu.Unlock()
	}
	s.mu.Lock()
	// An orphan whose record is gone was ended by someone else.
	pending := make(map[int64]bool, len(txns))
	for _, t := range txns {
		pending[t.ID] = true
	}
	for id := range s.orphans {
		if !pending[id] && repoID == 0 {
			delete(s.orphans, id)
		}
	}
	s.mu.Unlock()
	if err := s.reconcileRuns(ctx, repoID, keep, live); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// abandoned decides whether t is this reconciler's to finish, and with
// which request its listeners hear of it.
func (s *Server) abandoned(ctx context.Context, t store.RefTxn, live map[string]bool) (Request, bool, error) {
	system := Request{RepoID: t.RepoID, System: true, Transport: "reconcile"}
	if t.Instance == s.cfg.Instance {
		// Ours: only once its git has exited; the others are in flight.
		s.mu.Lock()
		o, ok := s.orphans[t.ID]
		s.mu.Unlock()
		return o.req, ok, nil
	}
	if t.NodeID == s.cfg.NodeID {
		return system, true, nil // an earlier run of this node
	}
	if s.cfg.ProcessLive == nil || time.Since(t.CreatedAt) < s.cfg.AbandonAfter {
		return Request{}, false, nil
	}
	key := t.NodeID + "\x00" + t.Instance
	alive, ok := live[key]
	if !ok {
		var err error
		if alive, err = s.cfg.ProcessLive(ctx, t.NodeID, t.Instance); err != nil {
			return Request{}, false, fmt.Errorf("is node %q alive: %w", t.NodeID, err)
		}
		live[key] = alive
	}
	return system, !alive, nil
}

// reconcileTxn decides t's outcome from the refs on disk, removes the
// ref locks its dead git left, announces its moved refs and ends it. It
// reports whether t committed. No git of t may still run.
func (s *Server) reconcileTxn(ctx context.Context, t store.RefTxn, req Request) (bool, error) {
	ok, err := s.st.ClaimRefTxn(ctx, t.ID, s.cfg.Instance, s.cfg.AbandonAfter)
	if err != nil {
		return false, fmt.Errorf("claim: %w", err)
	}
	if !ok {
		return false, nil // another reconciler has it, or it ended
	}
	log := s.logger.With("repo_id", t.RepoID, "txn_id", t.ID, "node_id", t.NodeID, "created_at", t.CreatedAt)
	updates, err := ParseUpdates([]byte(t.Updates))
	if err != nil {
		// Nothing to compare with: end it and let every reader recompute.
		log.Error("malformed ref transaction record; ending it as not committed", "err", err)
		updates = nil
	}
	var moved []RefUpdate
	if s.cfg.Refs == nil {
		// Blind: the refs may have moved.
		moved = updates
	}
	for _, u := range updates {
		if s.cfg.Refs == nil || !strings.HasPrefix(u.Ref, "refs/") {
			// HEAD lines echo the branch it points at, judged by name.
			continue
		}
		cur, err := s.cfg.Refs.ReadRef(t.RepoID, u.Ref)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", u.Ref, err)
		}
		old, want := unzero(u.Old), unzero(u.New)
		if cur == old && old != want {
			removed, err := s.cfg.Refs.RemoveDeadRefLock(t.RepoID, u.Ref, u.New)
			if err != nil {
				return false, fmt.Errorf("remove dead lock of %s: %w", u.Ref, err)
			}
			if removed {
				s.metrics.deadLocks.Inc()
				log.Warn("removed a ref lock left by a dead git", "ref", u.Ref)
			}
			continue
		}
		if cur != want {
			log.Info("ref moved again since the transaction; announcing it", "ref", u.Ref)
		}
		moved = append(moved, u)
	}
	committed := len(moved) > 0 && s.cfg.Refs != nil
	if len(moved) > 0 {
		s.notifyRefsChanged(t.RepoID, moved)
		if committed {
			s.firePushed(req, moved)
		}
	}
	err = s.st.EndRefTxn(ctx, t.ID, committed)
	if problem.Is(err, problem.NotFound) {
		return committed, nil // ended meanwhile by its own node
	}
	if err != nil {
		return committed, fmt.Errorf("end: %w", err)
	}
	outcome := "aborted"
	if committed {
		outcome = "committed"
	}
	s.metrics.reconciled.WithLabelValues(outcome).Inc()
	log.Warn("reconciled a ref transaction no live process could finish", "outcome", outcome, "refs_moved", len(moved))
	return committed, nil
}

// unzero maps git's all-zero id (no such ref) to "", what RefDisk reads.
func unzero(oid string) string {
	if strings.Trim(oid, "0") == "" {
		return ""
	}
	return oid
}
