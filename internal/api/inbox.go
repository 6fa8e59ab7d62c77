package api

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// The signed-in user's notification inbox (internal/pull writes it from a
// job: review requested, comments on their pull requests, merged,
// declined). Only ever the caller's own: there is no user parameter.

const inboxBase = "/rest/sluice/1.0/inbox"

func (s *server) inboxRoutes() []route {
	return []route{
		{Method: "GET", Pattern: inboxBase, Summary: "Your notifications, newest first, with the unread count", Paged: true,
			Query: []param{q("unread", "true: only unread ones")}, handle: (*call).listInbox},
		{Method: "POST", Pattern: inboxBase + "/read", Summary: "Mark notifications read (all of them when ids is empty)",
			Body: "{ids: [1, 2]}", handle: (*call).markInboxRead},
	}
}

type notificationJSON struct {
	ID          int64     `json:"id"`
	Kind        string    `json:"kind"`
	Title       string    `json:"title"`
	Body        string    `json:"body,omitempty"`
	Link        string    `json:"link"`
	Read        bool      `json:"read"`
	CreatedDate int64     `json:"createdDate"`
	Actor       *userJSON `json:"actor,omitempty"`
}

// inboxUser is the caller's user id; the inbox is a signed-in user's.
func (c *call) inboxUser() (int64, error) {
	if err := c.global(auth.Read); err != nil {
		return 0, err
	}
	if c.p.UserID == 0 {
		return 0, problem.New(problem.Forbidden, "only a user has an inbox")
	}
	return c.p.UserID, nil
}

func (c *call) listInbox() error {
	uid, err := c.inboxUser()
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	unreadOnly := false
	switch c.query("unread") {
	case "", "false":
	case "true":
		unreadOnly = true
	default:
		return problem.New(problem.Invalid, "unread must be true or false")
	}
	rows, err := c.s.Notify.Inbox(c.ctx, uid, unreadOnly, probe(pg))
	if err != nil {
		return err
	}
	unread, err := c.s.Notify.UnreadCount(c.ctx, uid)
	if err != nil {
		return err
	}
	users := map[int64]*store.User{}
	page := mapPage(newPage(rows, pg), func(n store.Notification) notificationJSON {
		out := notificationJSON{ID: n.ID, Kind: n.Kind, Title: n.Title, Body: n.Body, Link: c.s.BaseURL + n.Link,
			Read: n.ReadAt != nil, CreatedDate: millis(n.CreatedAt)}
		if n.ActorID != 0 {
			u := c.s.userJSON(c.userByID(n.ActorID, users))
			out.Actor = &u
		}
		return out
	})
	return c.json(struct {
		pageJSON[notificationJSON]
		Unread int `json:"unread"`
	}{page, unread})
}

func (c *call) markInboxRead() error {
	uid, err := c.inboxUser()
	if err != nil {
		return err
	}
	var in struct {
		IDs []int64 `json:"ids"`
	}
	if err := c.decode(&in, true); err != nil {
		return err
	}
	n, err := c.s.Notify.MarkRead(c.ctx, uid, in.IDs)
	if err != nil {
		return err
	}
	return c.json(struct {
		Marked int64 `json:"marked"`
	}{n})
}
