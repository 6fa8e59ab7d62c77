package packcache

import (
	"errors"
	"fmt"
	"time"
)

// Abandoned producers.
//
// A producer runs for its entry, not for the client that started it, so
// that a client hanging up never breaks the others following it. Left
// alone, that also means a producer nobody follows any more runs to the
// end: a clone of an undeltifiable repository whose client gave up kept a
// pack-objects busy for 19 minutes, for nobody. So when the last client
// following a running producer leaves:
//
//   - a response nobody asked for before (its key was not sighted within
//     the TTL, and no second client joined this production) is unlikely to
//     be asked for again before its refs move: the producer is stopped and
//     the entry discarded at once;
//   - any other may finish, within a budget: it is stopped once it has run
//     Config.AbandonedTimeout without a client, or once the response grows
//     past Config.AbandonedMaxBytes (at once if it is past that already).
//
// A client that joins in the meantime stops the clock. A stopped producer's
// entry leaves the index before git is told to stop, so a request arriving
// then starts a production of its own rather than following one that is
// about to fail. Stops are counted in
// sluice_packcache_abandoned_total{reason}: unrequested, time or bytes.

// errAbandoned is the producer's error when it was stopped for nobody.
var errAbandoned = errors.New("cache producer abandoned: no client is waiting for it")

// joinLocked counts a client following e.
func (c *Cache) joinLocked(e *entry) {
	e.followers++
	e.joins++
	e.orphaned.Store(false)
	if e.orphanTimer != nil {
		e.orphanTimer.Stop()
		e.orphanTimer = nil
	}
}

// leave is called when a client following e is done with it, and applies
// the bounds above when it was the last.
func (c *Cache) leave(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.followers--
	if e.followers > 0 || e.produced || e.cancel == nil {
		return
	}
	switch {
	case !e.requestedBefore && e.joins < 2:
		c.abandonLocked(e, "unrequested")
	case e.size() > c.cfg.AbandonedMaxBytes:
		c.abandonLocked(e, "bytes")
	default:
		e.orphanMax = c.cfg.AbandonedMaxBytes
		e.overBudget = func() { c.abandon(e, "bytes") }
		e.orphaned.Store(true)
		e.orphanTimer = time.AfterFunc(c.cfg.AbandonedTimeout, func() { c.abandon(e, "time") })
	}
}

// abandon stops e's producer if still nobody follows it.
func (c *Cache) abandon(e *entry, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.followers > 0 || e.produced {
		return
	}
	c.abandonLocked(e, reason)
}

func (c *Cache) abandonLocked(e *entry, reason string) {
	e.mu.Lock()
	already := e.abandoned != nil
	if !already {
		e.abandoned = fmt.Errorf("%w (%s)", errAbandoned, reason)
	}
	e.mu.Unlock()
	if already {
		return
	}
	e.orphaned.Store(false)
	if e.orphanTimer != nil {
		e.orphanTimer.Stop()
		e.orphanTimer = nil
	}
	if c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	e.cancel()
	c.m.abandoned.WithLabelValues(reason).Inc()
	c.logger.Info("cache producer stopped: no client is waiting for it", "repo_id", e.repoID,
		"reason", reason, "bytes", e.size())
}
