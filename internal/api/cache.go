package api

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/packcache"
)

// PackCache is what the SCM cache admin endpoints show and change;
// *packcache.Cache implements it.
type PackCache interface {
	Stats() packcache.Stats
	// ClearRepo removes a repository's entries and returns how many
	// entries and bytes went.
	ClearRepo(repoID int64) (entries int, bytes int64)
}

// cacheRoutes are the SCM cache admin endpoints; none without a cache.
func (s *server) cacheRoutes() []route {
	if s.PackCache == nil {
		return nil
	}
	return []route{
		{Method: "GET", Pattern: sluiceAdminBase + "/cache", Summary: "SCM cache state and counters of this node (ADMIN)",
			handle: (*call).cacheStats},
		{Method: "DELETE", Pattern: sluiceAdminBase + "/cache/repos/{key}/{slug}", Summary: "Remove a repository's SCM cache entries on this node (ADMIN)",
			handle: (*call).clearRepoCache},
	}
}

func (c *call) cacheStats() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	return c.json(c.s.PackCache.Stats())
}

// clearRepoCache is rarely needed (the cache is never stale), but it frees
// a large repository's space at once and is what an operator reaches for
// when in doubt. It clears this node only: each node has its own cache.
func (c *call) clearRepoCache() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	n, bytes := c.s.PackCache.ClearRepo(r.ID)
	return c.json(struct {
		RemovedEntries int   `json:"removedEntries"`
		RemovedBytes   int64 `json:"removedBytes"`
	}{n, bytes})
}
