package pull

import (
	"context"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/markup"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

func nowUTC() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Comment severities and task states, as Bitbucket names them. A BLOCKER
// comment is a task: while OPEN it fails the "no open tasks" check.
const (
	SeverityNormal  = "NORMAL"
	SeverityBlocker = "BLOCKER"
	TaskOpen        = "OPEN"
	TaskResolved    = "RESOLVED"
)

// Anchor places an inline comment on a line of a file of the diff.
type Anchor struct {
	Path     string
	Line     int
	LineType string // ADDED, REMOVED or CONTEXT
	FileType string // FROM or TO
}

// CommentInput is a new comment.
type CommentInput struct {
	Text     string
	ParentID int64
	Severity string
	Anchor   *Anchor
}

// AddComment adds a general or inline comment, or a reply.
func (s *Service) AddComment(ctx context.Context, p *auth.Principal, pr *store.PullRequest, in CommentInput) (*store.PullComment, error) {
	if actorID(p) == 0 {
		return nil, problem.New(problem.Forbidden, "only a user can comment")
	}
	if err := checkText("comment text", in.Text, maxText, true); err != nil {
		return nil, err
	}
	c := &store.PullComment{PRID: pr.ID, AuthorID: p.UserID, Text: in.Text, Severity: SeverityNormal, State: TaskOpen}
	switch in.Severity {
	case "", SeverityNormal:
	case SeverityBlocker:
		c.Severity = SeverityBlocker
	default:
		return nil, problem.New(problem.Invalid, "invalid severity %q (NORMAL or BLOCKER)", in.Severity)
	}
	if in.ParentID != 0 {
		parent, err := s.ps.CommentByID(ctx, pr.ID, in.ParentID)
		if err != nil {
			return nil, err
		}
		c.ParentID = parent.ID
	}
	if a := in.Anchor; a != nil && in.ParentID == 0 {
		if err := checkAnchor(a); err != nil {
			return nil, err
		}
		c.Path, c.Line, c.LineType, c.FileType = a.Path, a.Line, a.LineType, a.FileType
		c.FromSHA, c.ToSHA = pr.BaseSHA, pr.FromSHA
	}
	if err := s.ps.CreateComment(ctx, c); err != nil {
		return nil, err
	}
	s.activity(ctx, pr.ID, p.UserID, "COMMENTED", c.ID, map[string]string{"commentAction": "ADDED"})
	s.announce(ctx, pr, webhook.PRCommentAdded, p, webhook.PullEvent{Comment: c})
	s.notify(notify.Event{Kind: store.NotifyComment, PRID: pr.ID, ActorID: p.UserID, CommentID: c.ID})
	return c, nil
}

func checkAnchor(a *Anchor) error {
	if err := checkText("anchor path", a.Path, 4096, true); err != nil {
		return err
	}
	if a.Line < 0 {
		return problem.New(problem.Invalid, "anchor line must not be negative")
	}
	if a.Line > 0 {
		switch a.LineType {
		case "ADDED", "REMOVED", "CONTEXT":
		default:
			return problem.New(problem.Invalid, "invalid lineType %q (ADDED, REMOVED or CONTEXT)", a.LineType)
		}
	}
	switch a.FileType {
	case "":
		// Bitbucket's rule: removed lines live on the FROM side.
		a.FileType = "TO"
		if a.LineType == "REMOVED" {
			a.FileType = "FROM"
		}
	case "FROM", "TO":
	default:
		return problem.New(problem.Invalid, "invalid fileType %q (FROM or TO)", a.FileType)
	}
	return nil
}

// Comment reads one comment.
func (s *Service) Comment(ctx context.Context, pr *store.PullRequest, id int64) (*store.PullComment, error) {
	return s.ps.CommentByID(ctx, pr.ID, id)
}

// Comments lists every comment of a pull request, oldest first.
func (s *Service) Comments(ctx context.Context, pr *store.PullRequest) ([]store.PullComment, error) {
	return s.ps.ListComments(ctx, pr.ID)
}

// CommentUpdate changes a comment; nil fields stay.
type CommentUpdate struct {
	Version  int64
	Text     *string
	Severity *string
	State    *string
}

// UpdateComment edits a comment (its author only) or changes a task's
// state (anyone who may comment).
func (s *Service) UpdateComment(ctx context.Context, p *auth.Principal, pr *store.PullRequest, id int64, up CommentUpdate) (*store.PullComment, error) {
	c, err := s.ps.CommentByID(ctx, pr.ID, id)
	if err != nil {
		return nil, err
	}
	previous := c.Text
	if up.Text != nil && *up.Text != c.Text {
		if actorID(p) != c.AuthorID {
			return nil, problem.New(problem.Forbidden, "only the author can edit a comment")
		}
		if err := checkText("comment text", *up.Text, maxText, true); err != nil {
			return nil, err
		}
		c.Text = *up.Text
	}
	if up.Severity != nil {
		if *up.Severity != SeverityNormal && *up.Severity != SeverityBlocker {
			return nil, problem.New(problem.Invalid, "invalid severity %q (NORMAL or BLOCKER)", *up.Severity)
		}
		c.Severity = *up.Severity
	}
	if up.State != nil {
		if *up.State != TaskOpen && *up.State != TaskResolved {
			return nil, problem.New(problem.Invalid, "invalid state %q (OPEN or RESOLVED)", *up.State)
		}
		c.State = *up.State
	}
	if err := s.ps.UpdateComment(ctx, c, up.Version); err != nil {
		return nil, err
	}
	s.activity(ctx, pr.ID, actorID(p), "COMMENTED", c.ID, map[string]string{"commentAction": "EDITED"})
	s.announce(ctx, pr, webhook.PRCommentEdited, p, webhook.PullEvent{Comment: c, PreviousComment: &previous})
	return c, nil
}

// DeleteComment removes a comment without replies (its author only).
func (s *Service) DeleteComment(ctx context.Context, p *auth.Principal, pr *store.PullRequest, id, version int64) error {
	c, err := s.ps.CommentByID(ctx, pr.ID, id)
	if err != nil {
		return err
	}
	if actorID(p) != c.AuthorID {
		return problem.New(problem.Forbidden, "only the author can delete a comment")
	}
	all, err := s.ps.ListComments(ctx, pr.ID)
	if err != nil {
		return err
	}
	for _, x := range all {
		if x.ParentID == id {
			return problem.New(problem.Conflict, "a comment with replies cannot be deleted")
		}
	}
	if err := s.ps.DeleteComment(ctx, pr.ID, id, version); err != nil {
		return err
	}
	s.activity(ctx, pr.ID, actorID(p), "COMMENTED", 0, map[string]any{"commentAction": "DELETED", "commentId": id})
	s.announce(ctx, pr, webhook.PRCommentDeleted, p, webhook.PullEvent{Comment: c})
	return nil
}

// RenderMarkdown returns safe HTML for Markdown text, for the html and
// descriptionHtml fields: markup.HTML, the pipeline the web UI uses too.
func RenderMarkdown(text string) string { return markup.HTML(text) }
