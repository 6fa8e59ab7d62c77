package api

import (
	"net/url"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

// The JSON documents below use Bitbucket Data Center's field names, so a
// client written for Bitbucket reads them unchanged.

type linkJSON struct {
	Href string `json:"href"`
	Name string `json:"name,omitempty"`
}

type linksJSON struct {
	Clone []linkJSON `json:"clone,omitempty"`
	Self  []linkJSON `json:"self"`
}

type projectJSON struct {
	Key         string    `json:"key"`
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Public      bool      `json:"public"`
	Type        string    `json:"type"`
	Links       linksJSON `json:"links"`
}

type repoJSON struct {
	Slug          string      `json:"slug"`
	ID            int64       `json:"id"`
	Name          string      `json:"name"`
	Description   string      `json:"description,omitempty"`
	HierarchyID   string      `json:"hierarchyId,omitempty"`
	ScmID         string      `json:"scmId"`
	State         string      `json:"state"`
	StatusMessage string      `json:"statusMessage"`
	Forkable      bool        `json:"forkable"`
	Project       projectJSON `json:"project"`
	Public        bool        `json:"public"`
	DefaultBranch string      `json:"defaultBranch,omitempty"`
	Origin        *repoJSON   `json:"origin,omitempty"`
	Links         linksJSON   `json:"links"`
}

type userJSON struct {
	Name         string    `json:"name"`
	EmailAddress string    `json:"emailAddress,omitempty"`
	ID           int64     `json:"id"`
	DisplayName  string    `json:"displayName"`
	Active       bool      `json:"active"`
	Slug         string    `json:"slug"`
	Type         string    `json:"type"`
	Links        linksJSON `json:"links"`
}

type groupJSON struct {
	Name      string `json:"name"`
	Deletable bool   `json:"deletable"`
}

func (s *server) link(path string) []linkJSON {
	return []linkJSON{{Href: s.BaseURL + path}}
}

func (s *server) projectJSON(p *store.Project) projectJSON {
	return projectJSON{
		Key: p.Key, ID: p.ID, Name: p.Name, Description: p.Description, Public: p.Public, Type: "NORMAL",
		Links: linksJSON{Self: s.link("/projects/" + url.PathEscape(p.Key))},
	}
}

// repoJSON renders r. proj may be nil when only r.ProjectKey is known
// (listings across projects); the project is then read, since Bitbucket
// clients expect the full project object.
func (s *server) repoJSON(r *store.Repository, proj *store.Project) repoJSON {
	if proj == nil || proj.ID != r.ProjectID {
		proj = &store.Project{ID: r.ProjectID, Key: r.ProjectKey, Name: r.ProjectKey}
	}
	// Bitbucket shows the project key in lower case in clone URLs.
	path := "/" + strings.ToLower(url.PathEscape(r.ProjectKey)) + "/" + url.PathEscape(r.Slug) + ".git"
	clone := []linkJSON{{Href: s.BaseURL + "/scm" + path, Name: "http"}}
	if s.SSHBaseURL != "" {
		clone = append(clone, linkJSON{Href: s.SSHBaseURL + path, Name: "ssh"})
	}
	return repoJSON{
		Slug: r.Slug, ID: r.ID, Name: r.Name, Description: r.Description,
		ScmID: "git", State: "AVAILABLE", StatusMessage: "Available", Forkable: true,
		Project: s.projectJSON(proj), Public: r.Public, DefaultBranch: r.DefaultBranch,
		Links: linksJSON{
			Clone: clone,
			Self:  s.link("/projects/" + url.PathEscape(r.ProjectKey) + "/repos/" + url.PathEscape(r.Slug) + "/browse"),
		},
	}
}

// userSlug is a user's URL name. Names are unique case-insensitively and
// hold only URL-safe characters (store.ValidateUserName), so the folded
// name is the slug, as in Bitbucket.
func userSlug(name string) string { return strings.ToLower(name) }

func (s *server) userJSON(u *store.User) userJSON {
	return userJSON{
		Name: u.Name, EmailAddress: u.Email, ID: u.ID, DisplayName: displayName(u), Active: u.Active,
		Slug: userSlug(u.Name), Type: "NORMAL",
		Links: linksJSON{Self: s.link("/users/" + url.PathEscape(userSlug(u.Name)))},
	}
}

func displayName(u *store.User) string {
	if u.DisplayName != "" {
		return u.DisplayName
	}
	return u.Name
}

// millis is Bitbucket's timestamp: milliseconds since the epoch.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
