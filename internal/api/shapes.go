package api

import (
	"time"

	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
)

// The JSON documents below use Bitbucket Data Center's field names, so a
// client written for Bitbucket reads them unchanged. The entities are
// rendered by package entity, which webhook payloads share; the names
// here keep the handlers short.

type (
	linkJSON        = entity.Link
	linksJSON       = entity.Links
	projectJSON     = entity.Project
	repoJSON        = entity.Repository
	userJSON        = entity.User
	refJSON         = entity.Ref
	pullRefJSON     = entity.PullRef
	participantJSON = entity.Participant
	pullJSON        = entity.PullRequest
	anchorJSON      = entity.Anchor
	commentJSON     = entity.Comment
)

type groupJSON struct {
	Name      string `json:"name"`
	Deletable bool   `json:"deletable"`
}

// entities is the node's renderer. It is a few words, built per use so
// that it always carries the Deps the server was built with.
func (s *server) entities() *entity.Renderer {
	return &entity.Renderer{BaseURL: s.BaseURL, SSHBaseURL: s.SSHBaseURL, Markdown: pull.RenderMarkdown}
}

func (s *server) link(path string) []linkJSON {
	return []linkJSON{{Href: s.BaseURL + path}}
}

func (s *server) projectJSON(p *store.Project) projectJSON { return s.entities().Project(p) }

// repoJSON renders r; proj may be nil (see entity.Renderer.Repository).
func (s *server) repoJSON(r *store.Repository, proj *store.Project) repoJSON {
	return s.entities().Repository(r, proj)
}

func userSlug(name string) string { return entity.UserSlug(name) }

func (s *server) userJSON(u *store.User) userJSON { return s.entities().User(u) }

func displayName(u *store.User) string { return entity.DisplayName(u) }

// millis is Bitbucket's timestamp: milliseconds since the epoch.
func millis(t time.Time) int64 { return entity.Millis(t) }
