package packcache

import (
	"context"
	"io"
	"os"

	"github.com/sluice-scm/sluice/internal/problem"
)

// errOutageMiss answers what the cache cannot serve while the database is
// out: git must not run then (the refs generation that keys the answer is
// unknown, and nothing produced then could be checked), so the client is
// asked to come back.
func errOutageMiss() error {
	return &problem.Error{Kind: problem.Unavailable, Message: "temporarily unavailable: the database is unreachable and this request is not in the cache", RetryAfter: 30}
}

// refsDigest is e's repository's refs digest now, or "" when there is no
// digest function, e does not depend on refs, or the files cannot be read.
func (c *Cache) refsDigest(e *entry) string {
	if c.cfg.RefsDigest == nil || e.gen < 0 {
		return ""
	}
	d, err := c.cfg.RefsDigest(e.repoID)
	if err != nil {
		c.logger.Warn("read refs digest", "repo_id", e.repoID, "err", err)
		return ""
	}
	return d
}

// serveOutage answers lk while the refs generation cannot be read: from
// the newest entry for the same request, only if the refs on disk still
// digest to what that entry was produced from, and otherwise with
// Unavailable. It never produces an entry and never declines, so the
// caller never runs git for it.
func (c *Cache) serveOutage(ctx context.Context, lk *lookup, w io.Writer) (bool, error) {
	c.mu.Lock()
	e := c.byRequest[lk.reqKey]
	var victims []*entry
	if e != nil && (c.entries[e.key] != e || e.elem == nil) {
		delete(c.byRequest, lk.reqKey)
		e = nil
	}
	if e != nil && c.now().Sub(e.created) > c.cfg.TTL {
		victims = append(victims, c.removeLocked(e, "ttl"))
		e = nil
	}
	var f *os.File
	if e != nil {
		var err error
		if f, err = os.Open(e.path); err != nil {
			victims = append(victims, c.removeLocked(e, "corrupt"))
			e = nil
		} else {
			c.lru.MoveToFront(e.elem)
			e.lastAccess = c.now()
		}
	}
	c.mu.Unlock()
	c.dispose(victims)
	if e == nil {
		c.misses.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "miss").Inc()
		return true, errOutageMiss()
	}
	// Read after the entry was chosen: a push that lands on disk before
	// this read is seen, and one that lands after it is one the client
	// could not have been told about before asking.
	if now := c.refsDigest(e); now == "" || now != e.refs {
		f.Close()
		c.logger.Info("cache entry not served during outage: refs changed on disk", "repo_id", e.repoID)
		c.drop(e, "refs_changed")
		c.misses.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "miss").Inc()
		return true, errOutageMiss()
	}
	handled, err := c.serveReady(ctx, lk, e, f, w)
	if !handled {
		// A damaged entry: git must not answer instead.
		return true, errOutageMiss()
	}
	return true, err
}
