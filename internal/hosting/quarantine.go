package hosting

import (
	"errors"
	"sync"
	"syscall"
	"time"
)

// Quarantines of aborted pushes.
//
// A receive-pack killed mid-push (its client gone, the git timeout) can
// leave its quarantine directory behind, up to the size of the pack.
// Housekeeping removes such leftovers only after an hour, since a
// quarantine names no owner. Here the owner is known: the directories that
// appeared while this receive-pack ran are its own, provided no other
// receive-pack of the repository ran meanwhile in this process and exactly
// one appeared. So after a receive-pack that failed, that one directory is
// removed at once, unless something was written in it after git exited (a
// push on another node sharing the repository, still alive). Anything less
// certain is left to housekeeping.

// pushTracker counts the receive-packs running per repository.
type pushTracker struct {
	mu    sync.Mutex
	repos map[int64]*repoPushes
}

type repoPushes struct {
	running int
	starts  uint64
}

// quarantineGuard is one receive-pack's view of the quarantines.
type quarantineGuard struct {
	s      *Service
	repoID int64
	before map[string]bool
	alone  bool
	starts uint64
	pgid   int // git's process group, once it has exited
}

// groupExitWait bounds how long done waits for the children of a failed
// receive-pack (index-pack, hooks) to die: they got gitcmd's SIGTERM with
// it, and SIGKILL follows after gitcmd's grace period.
const groupExitWait = 15 * time.Second

// guardQuarantine is called before receive-pack starts; the returned
// guard's done is called after it exits.
func (s *Service) guardQuarantine(repoID int64) *quarantineGuard {
	g := &quarantineGuard{s: s, repoID: repoID}
	p := &s.pushes
	p.mu.Lock()
	if p.repos == nil {
		p.repos = map[int64]*repoPushes{}
	}
	rp := p.repos[repoID]
	if rp == nil {
		rp = &repoPushes{}
		p.repos[repoID] = rp
	}
	g.alone = rp.running == 0
	rp.running++
	rp.starts++
	g.starts = rp.starts
	p.mu.Unlock()
	if s.d.Repos != nil {
		before, err := s.d.Repos.QuarantineDirs(repoID)
		if err == nil {
			g.before = before
		} else {
			g.alone = false
		}
	}
	return g
}

// done records the end of the receive-pack and, when it failed, removes
// the quarantine it left (see the comment at the top of this file).
func (g *quarantineGuard) done(failed bool) {
	if failed && g.pgid > 0 {
		// index-pack may outlive receive-pack by a moment and still be
		// writing (or cleaning up) inside the quarantine.
		for deadline := time.Now().Add(groupExitWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if err := syscall.Kill(-g.pgid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
		}
	}
	exited := time.Now()
	p := &g.s.pushes
	p.mu.Lock()
	rp := p.repos[g.repoID]
	alone := g.alone && rp.starts == g.starts
	if rp.running--; rp.running == 0 {
		delete(p.repos, g.repoID)
	}
	p.mu.Unlock()
	if !failed || !alone || g.before == nil {
		return
	}
	after, err := g.s.d.Repos.QuarantineDirs(g.repoID)
	if err != nil {
		return
	}
	var fresh []string
	for name := range after {
		if !g.before[name] {
			fresh = append(fresh, name)
		}
	}
	if len(fresh) != 1 {
		return
	}
	removed, err := g.s.d.Repos.RemoveAbortedQuarantine(g.repoID, fresh[0], exited)
	if err != nil {
		g.s.logger.Warn("remove aborted push's quarantine", "repo_id", g.repoID, "dir", fresh[0], "err", err)
		return
	}
	if removed {
		g.s.logger.Info("removed aborted push's quarantine", "repo_id", g.repoID, "dir", fresh[0])
	}
}
