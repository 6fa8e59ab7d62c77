package hosting

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// During a database outage a node keeps answering clones and fetches that
// its pack cache holds, to the principals auth's outage grace vouches for
// (auth.outage_grace): the repository row and the read authorization come
// from the grace, the answer from a cache entry whose refs are still the
// ones on disk (packcache checks). Nothing else runs: a push, an archive or
// a request the cache does not hold gets Unavailable, and git is never
// started, so a node cut off from the database neither writes nor serves
// what it cannot check.

// errOutage is what an operation the outage leaves no way to serve gets.
func errOutage() error {
	return &problem.Error{Kind: problem.Unavailable, Message: "temporarily unavailable: the database is unreachable; only cached clones and fetches are served", RetryAfter: 30}
}

// outageRepo answers a resolve whose store read failed with err: from the
// outage grace when err is Unavailable, a is Read and the grace knows p
// read projectKey/slug recently; with err otherwise.
func (s *Service) outageRepo(p *auth.Principal, projectKey, slug string, a auth.Action, err error) (*store.Repository, bool, error) {
	if !problem.Is(err, problem.Unavailable) || a != auth.Read || s.d.Auth == nil {
		return nil, false, err
	}
	r, ok := s.d.Auth.OutageRead(p, projectKey, slug)
	if !ok {
		return nil, false, err
	}
	s.logger.Info("repository resolved from the outage grace", "principal", principalName(p), "repo_id", r.ID)
	return r, true, nil
}
