package web

import (
	"strings"
	"unicode"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// The helpers here are the only way handlers reach a project or a
// repository: each looks the resource up and asks auth.Authorize in one
// step. A missing resource and one the caller may not read both become the
// same 404 page (notFound), whoever asks.

// hide turns "you may not read this" into "not found".
func hide(err error) error {
	switch problem.KindOf(err) {
	case problem.NotFound, problem.Unauthenticated:
		return notFound()
	}
	return err
}

func (c *call) authorize(res auth.Resource, a auth.Action) error {
	return c.s.Auth.Authorize(c.ctx, c.p, res, a)
}

// project loads the {key} project and checks a on it.
func (c *call) project(a auth.Action) (*store.Project, error) {
	key := c.r.PathValue("key")
	if key == "" || len(key) > 128 {
		return nil, notFound()
	}
	proj, err := c.s.Store.ProjectByKey(c.ctx, key)
	if err != nil {
		return nil, hide(err)
	}
	if err := c.authorize(auth.Resource{Project: proj}, auth.Read); err != nil {
		return nil, hide(err)
	}
	if a != auth.Read {
		if err := c.authorize(auth.Resource{Project: proj}, a); err != nil {
			return nil, hide(err)
		}
	}
	return proj, nil
}

// repo loads the {key}/{slug} repository and checks a on it. Read is
// checked first, so a caller who cannot read gets the 404 page and one who
// can read but not change gets "not allowed".
func (c *call) repo(a auth.Action) (*store.Project, *store.Repository, error) {
	key, slug := c.r.PathValue("key"), c.r.PathValue("slug")
	if key == "" || slug == "" || len(key) > 128 || len(slug) > 128 {
		return nil, nil, notFound()
	}
	proj, err := c.s.Store.ProjectByKey(c.ctx, key)
	if err != nil {
		return nil, nil, hide(err)
	}
	r, err := c.s.Store.RepoBySlug(c.ctx, proj.Key, slug)
	if err != nil {
		return nil, nil, hide(err)
	}
	res := auth.Resource{Repo: r, Project: proj}
	if err := c.authorize(res, auth.Read); err != nil {
		return nil, nil, hide(err)
	}
	if a != auth.Read {
		if err := c.authorize(res, a); err != nil {
			return nil, nil, hide(err)
		}
	}
	return proj, r, nil
}

// actor is the caller as the accounts service knows it.
func (c *call) actor() accounts.Actor { return accounts.As(c.p) }

// canSee reports whether the caller may read res, for filtering listings.
func (c *call) canSee(res auth.Resource) (bool, error) {
	err := c.authorize(res, auth.Read)
	switch problem.KindOf(err) {
	case problem.NotFound, problem.Unauthenticated, problem.Forbidden:
		return false, nil
	}
	return err == nil, err
}

// can reports whether the caller may do a on res, for showing buttons.
func (c *call) can(res auth.Resource, a auth.Action) bool {
	return !c.p.IsAnonymous() && c.authorize(res, a) == nil
}

// revision resolves a revision named in a URL to a commit id the
// repository may serve: it must exist and, when named by id, be reachable
// from the repository's own refs (a deleted branch's commits linger, and a
// fork can read its origin's objects; neither may be shown by id).
func (c *call) revision(r *store.Repository, rev string) (string, error) {
	if rev == "" {
		rev = "refs/heads/" + r.DefaultBranch
	}
	if len(rev) > 1024 || strings.HasPrefix(rev, "-") || strings.ContainsFunc(rev, unicode.IsControl) {
		return "", notFound()
	}
	sha, err := c.s.Repos.ResolveCommit(c.ctx, r.ID, rev)
	if err != nil {
		if problem.Is(err, problem.Invalid) {
			return "", notFound()
		}
		return "", hide(err)
	}
	if isHexish(rev) {
		ok, err := c.s.Repos.IsReachable(c.ctx, r.ID, sha)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", notFound()
		}
	}
	return sha, nil
}

func isHexish(s string) bool {
	if len(s) < 4 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// filterBatch is how many rows a filtered listing reads per store query.
const filterBatch = 100

// visiblePage returns the page [start, start+limit) of the rows fetch
// yields that keep accepts, and whether more follow. It reads in batches
// and stops once the page (and one more row) is found, so it costs the
// rows skipped plus one page, never the whole table.
func visiblePage[T any](start, limit int, fetch func(store.Page) ([]T, error), keep func(*T) (bool, error)) ([]T, bool, error) {
	var out []T
	seen := 0
	for offset := 0; ; offset += filterBatch {
		rows, err := fetch(store.Page{Start: offset, Limit: filterBatch})
		if err != nil {
			return nil, false, err
		}
		for i := range rows {
			ok, err := keep(&rows[i])
			if err != nil {
				return nil, false, err
			}
			if !ok {
				continue
			}
			if seen >= start {
				if len(out) == limit {
					return out, true, nil
				}
				out = append(out, rows[i])
			}
			seen++
		}
		if len(rows) < filterBatch {
			return out, false, nil
		}
	}
}
