package api

import (
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// The pull request list takes Bitbucket's filters. Each one Sluice
// accepts changes the answer; a value it cannot use is a 400 naming the
// parameter, because ignoring it would hand the client pull requests it
// did not ask for (Renovate, for one, decides which branches it owns from
// role.1=AUTHOR&username.1=<itself>). Parameters Bitbucket has and that
// only shape the rendering (withAttributes, withProperties, avatarSize)
// are ignored as Bitbucket ignores what it does not know.
//
// State, direction OUTGOING and a single author are selected by the
// store; the rest is checked per row over bounded batches (filteredPage),
// so a page stays full however many rows the filters drop.

func pullListParams() []param {
	return []param{
		q("state", "OPEN (default), MERGED, DECLINED or ALL"),
		q("order", "NEWEST (default) or OLDEST"),
		q("direction", "INCOMING (default: pull requests into this repository) or OUTGOING (from it, into any repository)"),
		q("at", "only pull requests into (INCOMING) or from (OUTGOING) this branch, refs/heads/… or its short name"),
		q("filterText", "only pull requests whose title or description contains this text, ignoring case"),
		q("role.1", "AUTHOR, REVIEWER or PARTICIPANT: the role of username.1 (role.2 goes with username.2, …)"),
		q("username.1", "only pull requests this user takes part in (in role.1 when given); every numbered user must match"),
		q("approved.1", "true or false: whether username.1 approved"),
	}
}

// participantFilter is one numbered group: username.N with role.N and
// approved.N.
type participantFilter struct {
	n        string
	userID   int64 // 0: no such user, which nothing matches
	role     string
	approved *bool
}

type pullListFilter struct {
	store        store.PullFilter
	outgoing     bool
	at           string
	text         string
	participants []participantFilter
}

var participantParam = regexp.MustCompile(`^(role|username|approved)\.([0-9]{1,3})$`)

// maxParticipantFilters bounds the numbered groups; each costs a lookup.
const maxParticipantFilters = 10

func (c *call) parsePullListFilter(r *store.Repository) (pullListFilter, bool, error) {
	f := pullListFilter{store: store.PullFilter{RepoID: r.ID}}
	f.store.State = strings.ToUpper(c.query("state"))
	if f.store.State == "" {
		f.store.State = store.PullOpen
	}
	switch f.store.State {
	case store.PullOpen, store.PullMerged, store.PullDeclined, "ALL":
	default:
		return f, false, problem.New(problem.Invalid, "query parameter state must be OPEN, MERGED, DECLINED or ALL, not %s", quoteShort(c.query("state")))
	}
	switch o := strings.ToUpper(c.query("order")); o {
	case "", "NEWEST":
	case "OLDEST":
		f.store.Oldest = true
	default:
		return f, false, problem.New(problem.Invalid, "query parameter order must be NEWEST or OLDEST, not %s", quoteShort(c.query("order")))
	}
	switch d := strings.ToUpper(c.query("direction")); d {
	case "", "INCOMING":
	case "OUTGOING":
		f.outgoing = true
		f.store.RepoID, f.store.FromRepoID = 0, r.ID
	default:
		return f, false, problem.New(problem.Invalid, "query parameter direction must be INCOMING or OUTGOING, not %s", quoteShort(c.query("direction")))
	}
	if at := c.query("at"); at != "" {
		ref, err := branchRef("query parameter at", at)
		if err != nil {
			return f, false, err
		}
		f.at = ref
	}
	f.text = strings.ToLower(c.query("filterText"))
	if len(f.text) > 255 {
		return f, false, problem.New(problem.Invalid, "query parameter filterText must be at most 255 bytes long")
	}

	groups := map[string]*participantFilter{}
	for key, vals := range c.r.URL.Query() {
		m := participantParam.FindStringSubmatch(key)
		if m == nil {
			continue
		}
		g := groups[m[2]]
		if g == nil {
			if len(groups) == maxParticipantFilters {
				return f, false, problem.New(problem.Invalid, "at most %d numbered participant filters", maxParticipantFilters)
			}
			g = &participantFilter{n: m[2]}
			groups[m[2]] = g
		}
		v := vals[0]
		switch m[1] {
		case "role":
			g.role = strings.ToUpper(v)
			if g.role != store.RoleAuthor && g.role != store.RoleReviewer && g.role != store.RoleParticipant {
				return f, false, problem.New(problem.Invalid, "query parameter %s must be AUTHOR, REVIEWER or PARTICIPANT, not %s", key, quoteShort(v))
			}
		case "approved":
			var b bool
			switch strings.ToLower(v) {
			case "true":
				b = true
			case "false":
			default:
				return f, false, problem.New(problem.Invalid, "query parameter %s must be true or false, not %s", key, quoteShort(v))
			}
			g.approved = &b
		}
	}
	keys := make([]string, 0, len(groups))
	for n := range groups {
		keys = append(keys, n)
	}
	slices.Sort(keys)
	none := false // a named user who does not exist takes part in nothing
	for _, n := range keys {
		g := groups[n]
		name := c.query("username." + n)
		if name == "" {
			return f, false, problem.New(problem.Invalid, "query parameter username.%s is required with role.%s or approved.%s", n, n, n)
		}
		u, err := c.s.Store.UserByName(c.ctx, name)
		switch {
		case problem.Is(err, problem.NotFound):
			none = true
		case err != nil:
			return f, false, err
		default:
			g.userID = u.ID
			if g.role == store.RoleAuthor && f.store.AuthorID == 0 {
				f.store.AuthorID = u.ID // the common case, selected by the store
			}
		}
		f.participants = append(f.participants, *g)
	}
	return f, none, nil
}

// keep reports whether pr passes the filters the store did not apply.
func (c *call) keepPull(f *pullListFilter, pr *store.PullRequest) (bool, error) {
	if f.at != "" {
		ref := pr.ToRef
		if f.outgoing {
			ref = pr.FromRef
		}
		if ref != f.at {
			return false, nil
		}
	}
	if f.text != "" && !strings.Contains(strings.ToLower(pr.Title), f.text) &&
		!strings.Contains(strings.ToLower(pr.Description), f.text) {
		return false, nil
	}
	if len(f.participants) == 0 {
		return true, nil
	}
	parts, err := c.s.Pulls.Participants(c.ctx, pr)
	if err != nil {
		return false, err
	}
	for _, want := range f.participants {
		i := slices.IndexFunc(parts, func(p store.Participant) bool {
			return p.UserID == want.userID && (want.role == "" || p.Role == want.role) &&
				(want.approved == nil || *want.approved == (p.Status == store.StatusApproved))
		})
		if i < 0 {
			return false, nil
		}
	}
	return true, nil
}

func (c *call) listPulls() error {
	proj, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	f, none, err := c.parsePullListFilter(r)
	if err != nil {
		return err
	}
	if none {
		return c.json(newPage[pullJSON](nil, pg))
	}
	// OUTGOING reaches into target repositories, each of which the
	// caller must be able to read for its pull requests to be listed.
	targets := map[int64]*targetRepo{r.ID: {proj: proj, repo: r}}
	page, err := filteredPage(pg,
		func(p store.Page) ([]store.PullRequest, error) { return c.s.Pulls.List(c.ctx, f.store, p) },
		func(pr *store.PullRequest) (bool, error) {
			t, err := c.targetOf(targets, pr.RepoID)
			if err != nil || t == nil {
				return false, err
			}
			return c.keepPull(&f, pr)
		})
	if err != nil {
		return err
	}
	out := pageJSON[pullJSON]{Size: page.Size, Limit: page.Limit, Start: page.Start, IsLastPage: page.IsLastPage,
		NextPageStart: page.NextPageStart, Values: []pullJSON{}}
	for i := range page.Values {
		t := targets[page.Values[i].RepoID]
		pj, err := c.pullJSON(t.proj, t.repo, &page.Values[i], true)
		if err != nil {
			return err
		}
		out.Values = append(out.Values, pj)
	}
	return c.json(out)
}

type targetRepo struct {
	proj *store.Project
	repo *store.Repository
}

// targetOf loads a pull request's target repository once per listing;
// nil when the caller may not read it (or it is gone).
func (c *call) targetOf(cache map[int64]*targetRepo, id int64) (*targetRepo, error) {
	if t, ok := cache[id]; ok {
		return t, nil
	}
	cache[id] = nil
	r, err := c.s.Store.RepoByID(c.ctx, id)
	if problem.Is(err, problem.NotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := c.s.Store.ProjectByID(c.ctx, r.ProjectID)
	if problem.Is(err, problem.NotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ok, err := c.canSee(auth.Resource{Repo: r, Project: p}); !ok || err != nil {
		return nil, err
	}
	cache[id] = &targetRepo{proj: p, repo: r}
	return cache[id], nil
}
