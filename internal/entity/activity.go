package entity

import (
	"encoding/json"

	"github.com/sluice-scm/sluice/internal/store"
)

// Comment actions of a COMMENTED activity, as Bitbucket names them. A
// reply is REPLIED where the stream recorded ADDED.
const (
	CommentAdded   = "ADDED"
	CommentEdited  = "EDITED"
	CommentDeleted = "DELETED"
	CommentReplied = "REPLIED"
)

// MinimalCommit is a commit named by its id alone.
type MinimalCommit struct {
	ID        string `json:"id"`
	DisplayID string `json:"displayId"`
}

// Activity is one entry of a pull request's activity stream in
// Bitbucket's shape: what the action needs beside id, createdDate, user
// and action. A COMMENTED entry carries the comment as it is now (with its
// replies), commentAction, and commentAnchor for an inline comment;
// APPROVED, UNAPPROVED and REVIEWED carry the participant; MERGED the
// merge commit; RESCOPED the source's new and previous commits. Detail is
// Sluice's own record of the entry (a reason, a strategy), left for
// clients that read it before this shape existed.
type Activity struct {
	ID               int64          `json:"id"`
	CreatedDate      int64          `json:"createdDate"`
	User             *User          `json:"user,omitempty"`
	Action           string         `json:"action"`
	CommentAction    string         `json:"commentAction,omitempty"`
	Comment          *Comment       `json:"comment,omitempty"`
	CommentAnchor    *Anchor        `json:"commentAnchor,omitempty"`
	Participant      *Participant   `json:"participant,omitempty"`
	Commit           *MinimalCommit `json:"commit,omitempty"`
	FromHash         string         `json:"fromHash,omitempty"`
	PreviousFromHash string         `json:"previousFromHash,omitempty"`
	Detail           map[string]any `json:"detail,omitempty"`
}

// ActivityContext is what an activity refers to, looked up by the caller:
// the acting user (nil for the system), the comment of a COMMENTED entry
// (nil when it is gone) with the anchor of its thread, and the acting
// participant of a review entry.
type ActivityContext struct {
	User        *store.User
	Comment     *Comment
	Anchor      *Anchor
	Participant *Participant
}

// ActivityCommentID is the comment a recorded activity is about: its own
// comment id, or for a deletion the id its detail remembers.
func ActivityCommentID(a *store.PullActivity) int64 {
	if a.CommentID != 0 {
		return a.CommentID
	}
	var d struct {
		CommentID int64 `json:"commentId"`
	}
	if a.Detail != "" {
		_ = json.Unmarshal([]byte(a.Detail), &d)
	}
	return d.CommentID
}

// Activity renders a with what ac holds.
func (r *Renderer) Activity(a *store.PullActivity, ac ActivityContext) Activity {
	out := Activity{ID: a.ID, CreatedDate: Millis(a.CreatedAt), Action: a.Action}
	if ac.User != nil {
		u := r.User(ac.User)
		out.User = &u
	}
	if a.Detail != "" {
		_ = json.Unmarshal([]byte(a.Detail), &out.Detail)
	}
	str := func(k string) string { s, _ := out.Detail[k].(string); return s }
	switch a.Action {
	case "COMMENTED":
		out.CommentAction = str("commentAction")
		if out.CommentAction == "" {
			out.CommentAction = CommentAdded
		}
		out.Comment = ac.Comment
		if out.Comment == nil {
			// Deleted since: the id is all that is left to show.
			out.Comment = &Comment{ID: ActivityCommentID(a), Comments: []Comment{}}
			if out.User != nil {
				out.Comment.Author = *out.User
			}
		}
		if out.CommentAction == CommentAdded && out.Comment.ParentID != 0 {
			out.CommentAction = CommentReplied
		}
		out.CommentAnchor = ac.Anchor
	case "APPROVED", "UNAPPROVED", "REVIEWED":
		out.Participant = ac.Participant
	case "MERGED":
		if id := str("commit"); id != "" {
			out.Commit = &MinimalCommit{ID: id, DisplayID: id[:min(11, len(id))]}
		}
	case "RESCOPED":
		out.FromHash, out.PreviousFromHash = str("fromHash"), str("previousFromHash")
	}
	return out
}
