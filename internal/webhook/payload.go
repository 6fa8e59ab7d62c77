package webhook

import (
	"context"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/store"
)

// dateLayout is Bitbucket's payload date: "2017-09-19T09:58:11+1000".
const dateLayout = "2006-01-02T15:04:05-0700"

func now() string { return time.Now().UTC().Format(dateLayout) }

// envelope is what every event has. Actor is left out when nobody acted
// (a pull request declined because its branch was deleted).
type envelope struct {
	EventKey string       `json:"eventKey"`
	Date     string       `json:"date"`
	Actor    *entity.User `json:"actor,omitempty"`
}

// RefChange is one ref move of a repo:refs_changed event.
type RefChange struct {
	Ref      entity.MinimalRef `json:"ref"`
	RefID    string            `json:"refId"`
	FromHash string            `json:"fromHash"`
	ToHash   string            `json:"toHash"`
	Type     string            `json:"type"` // ADD, UPDATE or DELETE
}

// RefsChangedPayload is repo:refs_changed.
type RefsChangedPayload struct {
	envelope
	Repository entity.Repository `json:"repository"`
	Changes    []RefChange       `json:"changes"`
}

// RepoModifiedPayload is repo:modified: the repository before and after.
type RepoModifiedPayload struct {
	envelope
	Old entity.Repository `json:"old"`
	New entity.Repository `json:"new"`
}

// RepoForkedPayload is repo:forked: the fork, whose origin is the parent.
type RepoForkedPayload struct {
	envelope
	Repository entity.Repository `json:"repository"`
}

// PullRequestPayload is every pr:* event; the fields after PullRequest
// belong to some events only and are left out of the others.
type PullRequestPayload struct {
	envelope
	PullRequest entity.PullRequest `json:"pullRequest"`
	// pr:from_ref_updated and pr:to_ref_updated.
	PreviousFromHash string `json:"previousFromHash,omitempty"`
	PreviousToHash   string `json:"previousToHash,omitempty"`
	// pr:modified.
	PreviousTitle       *string     `json:"previousTitle,omitempty"`
	PreviousDescription *string     `json:"previousDescription,omitempty"`
	PreviousTarget      *entity.Ref `json:"previousTarget,omitempty"`
	// pr:reviewer:updated: both lists, empty or not, as Bitbucket sends.
	AddedReviewers   *[]entity.User `json:"addedReviewers,omitempty"`
	RemovedReviewers *[]entity.User `json:"removedReviewers,omitempty"`
	// pr:reviewer:approved, unapproved and needs_work.
	Participant    *entity.Participant `json:"participant,omitempty"`
	PreviousStatus string              `json:"previousStatus,omitempty"`
	// pr:comment:added, edited and deleted.
	Comment         *entity.Comment `json:"comment,omitempty"`
	CommentParentID int64           `json:"commentParentId,omitempty"`
	PreviousComment *string         `json:"previousComment,omitempty"`
}

// PullEvent is something that happened to a pull request, as its service
// tells it. Key is the event; the rest beyond PR is what that event
// carries (see PullRequestPayload).
type PullEvent struct {
	Key   string
	Actor *auth.Principal
	// PR is the pull request after the event.
	PR *store.PullRequest
	// MergeCommit is the commit pr:merged made (pullRequest.properties.mergeCommit).
	MergeCommit string

	PreviousFromHash, PreviousToHash string
	// Modified: what changed, nil when it did not.
	PreviousTitle, PreviousDescription *string
	PreviousTarget                     *entity.Ref

	AddedReviewers, RemovedReviewers []int64

	Participant    *store.Participant
	PreviousStatus string

	Comment         *store.PullComment
	PreviousComment *string
}

// PullRequest announces a pull request event to the repository's webhooks.
func (s *Service) PullRequest(ctx context.Context, ev PullEvent) {
	s.record(ctx, ev.PR.RepoID, ev.Key, func(ctx context.Context) (any, error) { return s.pullPayload(ctx, ev) })
}

// users renders users by id, reading each once.
type users struct {
	s     *Service
	ent   *entity.Renderer
	cache map[int64]*store.User
}

func (u *users) row(ctx context.Context, id int64) *store.User {
	if x, ok := u.cache[id]; ok {
		return x
	}
	x, err := u.s.st.UserByID(ctx, id)
	if err != nil {
		x = entity.DeletedUser(id)
	}
	u.cache[id] = x
	return x
}

func (u *users) user(ctx context.Context, id int64) entity.User { return u.ent.User(u.row(ctx, id)) }

// actor renders the principal who acted: its user, or for an access key
// (no user) a user object bearing the key's name.
func (u *users) actor(ctx context.Context, p *auth.Principal) *entity.User {
	if p == nil || p.Anonymous {
		return nil
	}
	if p.UserID != 0 {
		a := u.user(ctx, p.UserID)
		return &a
	}
	return &entity.User{Name: p.Name, DisplayName: p.Name, Slug: entity.UserSlug(p.Name), Type: "SERVICE", Active: true}
}

// repository renders a repository with its project and, for a fork, its
// origin.
func (s *Service) repository(ctx context.Context, ent *entity.Renderer, id int64) (entity.Repository, error) {
	r, err := s.st.RepoByID(ctx, id)
	if err != nil {
		return entity.Repository{}, err
	}
	return s.renderRepo(ctx, ent, r), nil
}

func (s *Service) renderRepo(ctx context.Context, ent *entity.Renderer, r *store.Repository) entity.Repository {
	proj, err := s.st.ProjectByID(ctx, r.ProjectID)
	if err != nil {
		proj = nil // rendered from the key
	}
	out := ent.Repository(r, proj)
	if r.ForkOf != 0 {
		if o, err := s.st.RepoByID(ctx, r.ForkOf); err == nil {
			op, err := s.st.ProjectByID(ctx, o.ProjectID)
			if err != nil {
				op = nil
			}
			origin := ent.Repository(o, op)
			out.Origin = &origin
		}
	}
	return out
}

func (s *Service) pullPayload(ctx context.Context, ev PullEvent) (any, error) {
	ent := s.entities()
	us := &users{s: s, ent: ent, cache: map[int64]*store.User{}}
	pr := ev.PR
	to, err := s.repository(ctx, ent, pr.RepoID)
	if err != nil {
		return nil, err
	}
	from := &to
	if pr.FromRepoID != pr.RepoID {
		f, err := s.repository(ctx, ent, pr.FromRepoID)
		if err != nil {
			return nil, err
		}
		from = &f
	}
	pj := ent.PullRequest(pr, &to, from)
	parts, err := s.st.Participants(ctx, pr.ID)
	if err != nil && ev.Key != PRDeleted {
		return nil, err
	}
	if len(parts) == 0 && pr.AuthorID != 0 {
		// A deleted pull request's rows are gone; its author is not.
		parts = []store.Participant{{UserID: pr.AuthorID, Role: store.RoleAuthor, Status: store.StatusUnapproved}}
	}
	for i := range parts {
		pj.AddParticipant(ent.Participant(&parts[i], us.row(ctx, parts[i].UserID)))
	}
	if ev.MergeCommit != "" {
		pj.Properties["mergeCommit"] = map[string]string{"id": ev.MergeCommit, "displayId": shortHash(ev.MergeCommit)}
	}
	out := PullRequestPayload{
		envelope:         envelope{EventKey: ev.Key, Date: now(), Actor: us.actor(ctx, ev.Actor)},
		PullRequest:      pj,
		PreviousFromHash: ev.PreviousFromHash, PreviousToHash: ev.PreviousToHash,
		PreviousTitle: ev.PreviousTitle, PreviousDescription: ev.PreviousDescription, PreviousTarget: ev.PreviousTarget,
		PreviousStatus: ev.PreviousStatus, PreviousComment: ev.PreviousComment,
	}
	if ev.Key == PRReviewerUpdated {
		added, removed := []entity.User{}, []entity.User{}
		for _, id := range ev.AddedReviewers {
			added = append(added, us.user(ctx, id))
		}
		for _, id := range ev.RemovedReviewers {
			removed = append(removed, us.user(ctx, id))
		}
		out.AddedReviewers, out.RemovedReviewers = &added, &removed
	}
	if pt := ev.Participant; pt != nil {
		p := ent.Participant(pt, us.row(ctx, pt.UserID))
		out.Participant = &p
	}
	if c := ev.Comment; c != nil {
		cj := ent.Comment(c, us.row(ctx, c.AuthorID))
		out.Comment = &cj
		out.CommentParentID = c.ParentID
	}
	return out, nil
}

// shortHash is Bitbucket's displayId of a commit: its first 11 characters.
func shortHash(sha string) string {
	if len(sha) > 11 {
		return sha[:11]
	}
	return sha
}

const zeroOID = "0000000000000000000000000000000000000000"

func isZero(oid string) bool { return strings.Trim(oid, "0") == "" }

// OnPushed is the hooks.Server listener (called when a request that moved
// refs ends: a push, a REST branch or tag change, a merge) that announces
// repo:refs_changed. Only branches and tags are announced, as Bitbucket
// does: not HEAD (git reports the symbolic ref moving with the branch it
// names), not the server's refs/pull-requests/*.
func (s *Service) OnPushed(req hooks.Request, updates []hooks.RefUpdate) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.RefsChanged(ctx, req.RepoID, req.Principal, updates)
}

// RefsChanged announces ref moves of a repository (repo:refs_changed).
func (s *Service) RefsChanged(ctx context.Context, repoID int64, actor *auth.Principal, updates []hooks.RefUpdate) {
	changes := make([]RefChange, 0, len(updates))
	for _, u := range updates {
		if !strings.HasPrefix(u.Ref, "refs/heads/") && !strings.HasPrefix(u.Ref, "refs/tags/") {
			continue
		}
		typ := "UPDATE"
		switch {
		case isZero(u.Old):
			typ = "ADD"
		case isZero(u.New):
			typ = "DELETE"
		}
		changes = append(changes, RefChange{Ref: entity.RefOf(u.Ref), RefID: u.Ref, FromHash: fullOID(u.Old), ToHash: fullOID(u.New), Type: typ})
	}
	if len(changes) == 0 {
		return
	}
	s.record(ctx, repoID, RefsChanged, func(ctx context.Context) (any, error) {
		ent := s.entities()
		repo, err := s.repository(ctx, ent, repoID)
		if err != nil {
			return nil, err
		}
		us := &users{s: s, ent: ent, cache: map[int64]*store.User{}}
		return RefsChangedPayload{envelope: envelope{EventKey: RefsChanged, Date: now(), Actor: us.actor(ctx, actor)},
			Repository: repo, Changes: changes}, nil
	})
}

// fullOID spells a missing side as Bitbucket does: forty zeros.
func fullOID(oid string) string {
	if isZero(oid) {
		return zeroOID
	}
	return oid
}

// RepositoryModified announces a change of a repository's name, slug,
// description, visibility or project (repo:modified).
func (s *Service) RepositoryModified(ctx context.Context, actor *auth.Principal, old, cur *store.Repository) {
	s.record(ctx, cur.ID, RepoModified, func(ctx context.Context) (any, error) {
		ent := s.entities()
		us := &users{s: s, ent: ent, cache: map[int64]*store.User{}}
		return RepoModifiedPayload{envelope: envelope{EventKey: RepoModified, Date: now(), Actor: us.actor(ctx, actor)},
			Old: s.renderRepo(ctx, ent, old), New: s.renderRepo(ctx, ent, cur)}, nil
	})
}

// RepositoryForked announces a new fork to its origin's webhooks
// (repo:forked): the payload's repository is the fork.
func (s *Service) RepositoryForked(ctx context.Context, actor *auth.Principal, fork *store.Repository) {
	if fork.ForkOf == 0 {
		return
	}
	s.record(ctx, fork.ForkOf, RepoForked, func(ctx context.Context) (any, error) {
		ent := s.entities()
		us := &users{s: s, ent: ent, cache: map[int64]*store.User{}}
		return RepoForkedPayload{envelope: envelope{EventKey: RepoForked, Date: now(), Actor: us.actor(ctx, actor)},
			Repository: s.renderRepo(ctx, ent, fork)}, nil
	})
}
