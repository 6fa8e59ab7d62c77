package entity

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/store"
)

// PullRef is one side of a pull request: a branch and its repository.
type PullRef struct {
	ID           string      `json:"id"`
	DisplayID    string      `json:"displayId"`
	LatestCommit string      `json:"latestCommit"`
	Type         string      `json:"type"`
	Repository   *Repository `json:"repository,omitempty"`
}

// Participant is a pull request's author, a reviewer or a participant.
type Participant struct {
	User     User   `json:"user"`
	Role     string `json:"role"`
	Approved bool   `json:"approved"`
	Status   string `json:"status"`
}

// PullRequest is Bitbucket's pull request.
type PullRequest struct {
	ID              int64          `json:"id"`
	Version         int64          `json:"version"`
	Title           string         `json:"title"`
	Description     string         `json:"description,omitempty"`
	DescriptionHTML string         `json:"descriptionHtml,omitempty"`
	State           string         `json:"state"`
	Open            bool           `json:"open"`
	Closed          bool           `json:"closed"`
	CreatedDate     int64          `json:"createdDate"`
	UpdatedDate     int64          `json:"updatedDate"`
	ClosedDate      int64          `json:"closedDate,omitempty"`
	FromRef         PullRef        `json:"fromRef"`
	ToRef           PullRef        `json:"toRef"`
	Locked          bool           `json:"locked"`
	Author          *Participant   `json:"author,omitempty"`
	Reviewers       []Participant  `json:"reviewers"`
	Participants    []Participant  `json:"participants"`
	Properties      map[string]any `json:"properties"`
	Links           Links          `json:"links"`
}

// PullRequest renders pr into the repository to (which holds it). from is
// the source repository: to itself, or a fork of it; nil means to. The
// participants are added with AddParticipant.
func (r *Renderer) PullRequest(pr *store.PullRequest, to *Repository, from *Repository) PullRequest {
	if from == nil {
		from = to
	}
	out := PullRequest{
		ID: pr.Number, Version: pr.Version, Title: pr.Title, Description: pr.Description,
		State: pr.State, Open: pr.State == store.PullOpen, Closed: pr.State != store.PullOpen,
		CreatedDate: Millis(pr.CreatedAt), UpdatedDate: Millis(pr.UpdatedAt),
		Reviewers: []Participant{}, Participants: []Participant{},
		Properties: map[string]any{"mergeResult": map[string]any{"outcome": pr.MergeStatus, "current": true}},
		FromRef:    PullRef{ID: pr.FromRef, DisplayID: strings.TrimPrefix(pr.FromRef, "refs/heads/"), LatestCommit: pr.FromSHA, Type: Branch, Repository: from},
		ToRef:      PullRef{ID: pr.ToRef, DisplayID: strings.TrimPrefix(pr.ToRef, "refs/heads/"), LatestCommit: pr.ToSHA, Type: Branch, Repository: to},
	}
	if r.Markdown != nil {
		out.DescriptionHTML = r.Markdown(pr.Description)
	}
	if to != nil {
		out.Links = Links{Self: r.link("/projects/" + escape(to.Project.Key) + "/repos/" + escape(to.Slug) +
			"/pull-requests/" + strconv.FormatInt(pr.Number, 10))}
	}
	if pr.ClosedAt != nil {
		out.ClosedDate = Millis(*pr.ClosedAt)
	}
	if pr.MergeStatus == "CONFLICTED" {
		out.Properties["mergeResult"] = map[string]any{"outcome": "CONFLICTED", "current": true, "conflicts": strings.Split(pr.Conflicts, "\n")}
	}
	return out
}

// Participant renders pt, whose user is u.
func (r *Renderer) Participant(pt *store.Participant, u *store.User) Participant {
	return Participant{User: r.User(u), Role: pt.Role, Status: pt.Status, Approved: pt.Status == store.StatusApproved}
}

// AddParticipant files p under author, reviewers or participants by its
// role.
func (pr *PullRequest) AddParticipant(p Participant) {
	switch p.Role {
	case store.RoleAuthor:
		pr.Author = &p
	case store.RoleReviewer:
		pr.Reviewers = append(pr.Reviewers, p)
	default:
		pr.Participants = append(pr.Participants, p)
	}
}

// Anchor places an inline comment in a file of the diff.
type Anchor struct {
	Path     string `json:"path"`
	Line     int    `json:"line,omitempty"`
	LineType string `json:"lineType,omitempty"`
	FileType string `json:"fileType,omitempty"`
	FromHash string `json:"fromHash,omitempty"`
	ToHash   string `json:"toHash,omitempty"`
	Orphaned bool   `json:"orphaned"`
}

// Comment is Bitbucket's comment; Comments holds its replies.
type Comment struct {
	ID          int64     `json:"id"`
	Version     int64     `json:"version"`
	Text        string    `json:"text"`
	HTML        string    `json:"html,omitempty"`
	Author      User      `json:"author"`
	CreatedDate int64     `json:"createdDate"`
	UpdatedDate int64     `json:"updatedDate"`
	Severity    string    `json:"severity"`
	State       string    `json:"state"`
	Anchor      *Anchor   `json:"anchor,omitempty"`
	ParentID    int64     `json:"parentId,omitempty"`
	Comments    []Comment `json:"comments"`
}

// Comment renders cm, written by author, without its replies.
func (r *Renderer) Comment(cm *store.PullComment, author *store.User) Comment {
	out := Comment{ID: cm.ID, Version: cm.Version, Text: cm.Text,
		Author: r.User(author), CreatedDate: Millis(cm.Created), UpdatedDate: Millis(cm.Updated),
		Severity: cm.Severity, State: cm.State, ParentID: cm.ParentID, Comments: []Comment{}}
	if r.Markdown != nil {
		out.HTML = r.Markdown(cm.Text)
	}
	if cm.Path != "" {
		out.Anchor = &Anchor{Path: cm.Path, Line: cm.Line, LineType: cm.LineType, FileType: cm.FileType,
			FromHash: cm.FromSHA, ToHash: cm.ToSHA, Orphaned: cm.Outdated}
	}
	return out
}

func escape(s string) string { return url.PathEscape(s) }
