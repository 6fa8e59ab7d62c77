package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// outageGrace lets a node keep serving reads to the callers it served a
// moment ago while the database is unreachable (auth.outage_grace). It
// remembers two things, each with the time it was last confirmed by the
// database:
//
//   - successful authentications: an HMAC of the credential (under a
//     per-process random key, as verifiedCache does) → the principal. The
//     secret itself is never kept;
//   - repository read authorizations: principal + repository → the
//     repository row, so that the repository can be found by name without
//     the database.
//
// It is consulted only when the store answers problem.Unavailable, never
// instead of the store: while the database answers, a revoked grant or a
// disabled user takes effect on the next request, as the package doc
// promises. During an outage nothing can be revoked anyway (the admin
// writes to the same database), and the grace bounds how long a decision
// made before the outage is trusted.
type outageGrace struct {
	ttl time.Duration // 0 disables the grace

	mu     sync.Mutex
	key    [32]byte
	logins map[[32]byte]graceLogin
	reads  map[graceReadKey]graceRead
}

type graceLogin struct {
	p  Principal
	at time.Time
}

type graceReadKey struct {
	who     string // principalKey
	project string // lower-cased project key
	slug    string // lower-cased slug
}

type graceRead struct {
	repo store.Repository
	at   time.Time
}

// graceMax bounds each map; a node that saw more distinct callers or
// repositories within the grace forgets the newest rather than grow
// without limit (the same bound as verifiedCache).
const graceMax = 10000

func newOutageGrace(ttl time.Duration) *outageGrace {
	g := &outageGrace{
		ttl:    ttl,
		logins: make(map[[32]byte]graceLogin),
		reads:  make(map[graceReadKey]graceRead),
	}
	if _, err := rand.Read(g.key[:]); err != nil {
		panic("auth: no randomness for the outage grace: " + err.Error())
	}
	return g
}

// SetOutageGrace sets how long, during a database outage, a caller
// authenticated and authorized to read a repository before the outage may
// go on reading it (clones and fetches the pack cache can answer). 0, the
// default, disables the grace. It is meant to be called once, by app,
// before the service is used.
func (s *Service) SetOutageGrace(d time.Duration) {
	if d < 0 {
		d = 0
	}
	s.grace = newOutageGrace(d)
}

// OutageGrace returns the grace set by SetOutageGrace.
func (s *Service) OutageGrace() time.Duration { return s.grace.ttl }

// credential returns the map key of a credential: parts joined with NUL,
// under the per-process HMAC key.
func (g *outageGrace) credential(method string, parts ...[]byte) [32]byte {
	m := hmac.New(sha256.New, g.key[:])
	m.Write([]byte(method))
	for _, p := range parts {
		m.Write([]byte{0})
		m.Write(p)
	}
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}

// rememberLogin records that the credential id authenticated p at now.
func (g *outageGrace) rememberLogin(id [32]byte, p *Principal, now time.Time) {
	if g.ttl == 0 || p == nil || p.IsAnonymous() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.logins[id]; !ok && len(g.logins) >= graceMax {
		pruneGrace(g.logins, now, g.ttl, func(e graceLogin) time.Time { return e.at })
		if len(g.logins) >= graceMax {
			return
		}
	}
	g.logins[id] = graceLogin{p: *p, at: now}
}

// login returns the principal the credential id authenticated within the
// grace, if any.
func (g *outageGrace) login(id [32]byte, now time.Time) (*Principal, bool) {
	if g.ttl == 0 {
		return nil, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.logins[id]
	if !ok || now.Sub(e.at) > g.ttl {
		return nil, false
	}
	p := e.p
	return &p, true
}

func graceRepoKey(p *Principal, projectKey, slug string) graceReadKey {
	return graceReadKey{who: principalKey(p), project: strings.ToLower(projectKey), slug: strings.ToLower(slug)}
}

// principalKey names everything that makes up p's identity and reach, so
// that two principals share authorizations only if Authorize could not
// tell them apart.
func principalKey(p *Principal) string {
	rt := ""
	if g := p.ResourceToken; g != nil {
		rt = fmt.Sprintf("%d/%d/%d/%s/%s", g.ID, g.ProjectID, g.RepoID, g.ProjectScope, g.RepoScope)
	}
	return fmt.Sprintf("u%d t%d k%d/%d s%s r%s", p.UserID, p.TokenID, p.AccessKeyID, p.AccessKeyRepoID, p.Scope, rt)
}

// rememberRead records that p was allowed to read repo at now.
func (g *outageGrace) rememberRead(p *Principal, repo *store.Repository, now time.Time) {
	if g.ttl == 0 || p.IsAnonymous() || repo == nil || repo.ProjectKey == "" {
		return
	}
	k := graceRepoKey(p, repo.ProjectKey, repo.Slug)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.reads[k]; !ok && len(g.reads) >= graceMax {
		pruneGrace(g.reads, now, g.ttl, func(e graceRead) time.Time { return e.at })
		if len(g.reads) >= graceMax {
			return
		}
	}
	g.reads[k] = graceRead{repo: *repo, at: now}
}

func pruneGrace[K comparable, V any](m map[K]V, now time.Time, ttl time.Duration, at func(V) time.Time) {
	for k, v := range m {
		if now.Sub(at(v)) > ttl {
			delete(m, k)
		}
	}
}

// OutageRead returns the repository projectKey/slug when p was allowed to
// read it within the outage grace. Callers use it only when the store
// answered problem.Unavailable, and only for reads.
func (s *Service) OutageRead(p *Principal, projectKey, slug string) (*store.Repository, bool) {
	g := s.grace
	if g.ttl == 0 || p.IsAnonymous() {
		return nil, false
	}
	now := s.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.reads[graceRepoKey(p, projectKey, slug)]
	if !ok || now.Sub(e.at) > g.ttl {
		return nil, false
	}
	r := e.repo
	return &r, true
}

// withGrace finishes an authentication: a success is remembered under id;
// an Unavailable store is answered from the grace when id authenticated
// recently. Every other outcome passes through.
func (s *Service) withGrace(method string, id [32]byte, p *Principal, err error) (*Principal, error) {
	g := s.grace
	if g.ttl == 0 {
		return p, err
	}
	now := s.now()
	if err == nil {
		g.rememberLogin(id, p, now)
		return p, nil
	}
	if !problem.Is(err, problem.Unavailable) {
		return p, err
	}
	if gp, ok := g.login(id, now); ok {
		s.logger.Info("authenticated from the outage grace", "method", method, "principal", gp.String())
		return gp, nil
	}
	return p, err
}
