package app

import (
	"sync"
	"time"
)

// recentSet remembers ids for a while: "this node queued housekeeping for
// repository N less than ttl ago". It forgets lazily, so it holds at most
// the ids added within ttl plus those added since the last sweep.
type recentSet struct {
	ttl time.Duration

	mu    sync.Mutex
	added map[int64]time.Time
	swept time.Time
}

func newRecentSet(ttl time.Duration) *recentSet {
	return &recentSet{ttl: ttl, added: map[int64]time.Time{}}
}

// has reports whether id was added less than ttl before now.
func (r *recentSet) has(id int64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.added[id]
	return ok && now.Sub(t) < r.ttl && !now.Before(t)
}

// add records id at now and, at most once per ttl, drops expired ids.
func (r *recentSet) add(id int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added[id] = now
	if now.Sub(r.swept) < r.ttl {
		return
	}
	r.swept = now
	for k, t := range r.added {
		if now.Sub(t) >= r.ttl {
			delete(r.added, k)
		}
	}
}
