// Package entity renders Sluice's domain objects (projects, repositories,
// users, refs, pull requests and comments) in Bitbucket Data Center's JSON
// shapes. It is the one rendering: the REST API answers with these values
// and webhook payloads embed the same ones, so a client that reads a
// repository from GET …/repos/{slug} reads it the same way from a
// repo:refs_changed event (Jenkins and the Bitbucket Server Integration
// plugin parse both with one model).
//
// It sits below every transport and service and reads nothing by
// itself: callers hand in the store rows they already hold, and a
// Renderer only adds what the node knows (its base URLs, the Markdown
// renderer). That keeps it free of lookups, so a page of fifty pull
// requests costs the queries its caller chose, and a payload rendered
// inside a job is the same as one rendered in a request.
package entity

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

// Renderer renders entities for one node.
type Renderer struct {
	// BaseURL is how users reach the node over HTTP, without a trailing
	// slash; it prefixes self and clone links.
	BaseURL string
	// SSHBaseURL prefixes SSH clone links; empty leaves them out.
	SSHBaseURL string
	// Markdown turns user Markdown into safe HTML for the html and
	// descriptionHtml fields; nil leaves those fields out.
	Markdown func(string) string
}

// Link is one hyperlink; Name tells clone links apart ("http", "ssh").
type Link struct {
	Href string `json:"href"`
	Name string `json:"name,omitempty"`
}

// Links is Bitbucket's links object.
type Links struct {
	Clone []Link `json:"clone,omitempty"`
	Self  []Link `json:"self"`
}

// Project is Bitbucket's project.
type Project struct {
	Key         string `json:"key"`
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Public      bool   `json:"public"`
	Type        string `json:"type"`
	Links       Links  `json:"links"`
}

// Repository is Bitbucket's repository; Origin is the parent of a fork.
type Repository struct {
	Slug          string      `json:"slug"`
	ID            int64       `json:"id"`
	Name          string      `json:"name"`
	Description   string      `json:"description,omitempty"`
	HierarchyID   string      `json:"hierarchyId,omitempty"`
	ScmID         string      `json:"scmId"`
	State         string      `json:"state"`
	StatusMessage string      `json:"statusMessage"`
	Forkable      bool        `json:"forkable"`
	Project       Project     `json:"project"`
	Public        bool        `json:"public"`
	DefaultBranch string      `json:"defaultBranch,omitempty"`
	Origin        *Repository `json:"origin,omitempty"`
	Links         Links       `json:"links"`
}

// User is Bitbucket's user.
type User struct {
	Name         string `json:"name"`
	EmailAddress string `json:"emailAddress,omitempty"`
	ID           int64  `json:"id"`
	DisplayName  string `json:"displayName"`
	Active       bool   `json:"active"`
	Slug         string `json:"slug"`
	Type         string `json:"type"`
	Links        Links  `json:"links"`
}

// Ref is a branch or tag. LatestChangeset is LatestCommit's older name,
// still read by some clients.
type Ref struct {
	ID              string `json:"id"`
	DisplayID       string `json:"displayId"`
	Type            string `json:"type"`
	LatestCommit    string `json:"latestCommit,omitempty"`
	LatestChangeset string `json:"latestChangeset,omitempty"`
	IsDefault       bool   `json:"isDefault"`
}

// MinimalRef names a ref without its commit, as a repo:refs_changed
// change does (its commits are the change's fromHash and toHash).
type MinimalRef struct {
	ID        string `json:"id"`
	DisplayID string `json:"displayId"`
	Type      string `json:"type"`
}

// Ref types, as Bitbucket names them.
const (
	Branch = "BRANCH"
	Tag    = "TAG"
)

func (r *Renderer) link(path string) []Link {
	return []Link{{Href: r.BaseURL + path}}
}

// Project renders p.
func (r *Renderer) Project(p *store.Project) Project {
	return Project{
		Key: p.Key, ID: p.ID, Name: p.Name, Description: p.Description, Public: p.Public, Type: "NORMAL",
		Links: Links{Self: r.link("/projects/" + url.PathEscape(p.Key))},
	}
}

// Repository renders repo. proj may be nil when only repo.ProjectKey is
// known (listings across projects); the project is then rendered from the
// key, since Bitbucket clients expect the full project object.
func (r *Renderer) Repository(repo *store.Repository, proj *store.Project) Repository {
	if proj == nil || proj.ID != repo.ProjectID {
		proj = &store.Project{ID: repo.ProjectID, Key: repo.ProjectKey, Name: repo.ProjectKey}
	}
	// Bitbucket shows the project key in lower case in clone URLs.
	path := "/" + strings.ToLower(url.PathEscape(repo.ProjectKey)) + "/" + url.PathEscape(repo.Slug) + ".git"
	clone := []Link{{Href: r.BaseURL + "/scm" + path, Name: "http"}}
	if r.SSHBaseURL != "" {
		clone = append(clone, Link{Href: r.SSHBaseURL + path, Name: "ssh"})
	}
	return Repository{
		Slug: repo.Slug, ID: repo.ID, Name: repo.Name, Description: repo.Description,
		ScmID: "git", State: "AVAILABLE", StatusMessage: "Available", Forkable: true,
		Project: r.Project(proj), Public: repo.Public, DefaultBranch: repo.DefaultBranch,
		Links: Links{
			Clone: clone,
			Self:  r.link(RepoPath(repo) + "/browse"),
		},
	}
}

// RepoPath is a repository's path below the base URL.
func RepoPath(repo *store.Repository) string {
	return "/projects/" + url.PathEscape(repo.ProjectKey) + "/repos/" + url.PathEscape(repo.Slug)
}

// UserSlug is a user's URL name. Names are unique case-insensitively and
// hold only URL-safe characters (store.ValidateUserName), so the folded
// name is the slug, as in Bitbucket.
func UserSlug(name string) string { return strings.ToLower(name) }

// User renders u.
func (r *Renderer) User(u *store.User) User {
	return User{
		Name: u.Name, EmailAddress: u.Email, ID: u.ID, DisplayName: DisplayName(u), Active: u.Active,
		Slug: UserSlug(u.Name), Type: "NORMAL",
		Links: Links{Self: r.link("/users/" + url.PathEscape(UserSlug(u.Name)))},
	}
}

// DisplayName is the name shown for u: its display name, else its name.
func DisplayName(u *store.User) string {
	if u.DisplayName != "" {
		return u.DisplayName
	}
	return u.Name
}

// DeletedUser stands in for a user row that is gone, so an old comment
// or pull request still renders with an author.
func DeletedUser(id int64) *store.User {
	return &store.User{ID: id, Name: "deleted-user-" + strconv.FormatInt(id, 10), DisplayName: "Deleted user"}
}

// RefOf names a full ref: refs/heads/x is the branch x, refs/tags/x the
// tag x. Anything else keeps its full name as displayId and is typed a
// branch, Bitbucket's type for refs that are not tags.
func RefOf(name string) MinimalRef {
	ref := MinimalRef{ID: name, DisplayID: name, Type: Branch}
	switch {
	case strings.HasPrefix(name, "refs/heads/"):
		ref.DisplayID = strings.TrimPrefix(name, "refs/heads/")
	case strings.HasPrefix(name, "refs/tags/"):
		ref.DisplayID, ref.Type = strings.TrimPrefix(name, "refs/tags/"), Tag
	}
	return ref
}

// Millis is Bitbucket's timestamp: milliseconds since the epoch (0 for
// the zero time).
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
