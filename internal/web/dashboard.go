package web

import (
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// The dashboard's pull request and notification parts.
//
// "My open pull requests" and "reviews waiting for me" come from one
// query each across all repositories (pull.Service.Authored and ToReview,
// store/pulldash.go), which narrow to the repositories the user may read
// in SQL; each row still passes auth.Authorize here, so were the two ever
// to disagree the dashboard would show less, never more. The inbox is the
// pull request service's notifications (review requested, comments,
// merges, declines), with a "mark all read" form; a notification about a
// repository the user can no longer read is left out, as the notify job
// leaves out such recipients.

// dashboardPRs bounds each pull request list of the dashboard.
const dashboardPRs = 20

// dashboardInbox bounds the notifications shown.
const dashboardInbox = 10

// dashboardPulls is the dashboard's pull request part.
type dashboardPulls struct {
	Mine, Reviewing []prItem
	Inbox           []inboxItem
	Unread          int
}

// inboxItem is one notification.
type inboxItem struct {
	Title, Body, Link, Kind, Actor string
	Unread                         bool
	N                              store.Notification
}

func (c *call) dashboardPulls() (*dashboardPulls, error) {
	if c.s.Pulls == nil || c.user == nil {
		return nil, nil
	}
	out := &dashboardPulls{}
	us := c.users()
	visible := func(list []store.DashboardPull, err error) ([]prItem, error) {
		if err != nil {
			return nil, err
		}
		var items []prItem
		for i := range list {
			dp := &list[i]
			ok, err := c.canSee(auth.Resource{Repo: &dp.Repo})
			if err != nil {
				return nil, err
			}
			if ok {
				items = append(items, c.prItem(&dp.Repo, &dp.PullRequest, us))
			}
		}
		return items, nil
	}
	var err error
	if out.Mine, err = visible(c.s.Pulls.Authored(c.ctx, c.user.ID, dashboardPRs)); err != nil {
		return nil, err
	}
	if out.Reviewing, err = visible(c.s.Pulls.ToReview(c.ctx, c.user.ID, dashboardPRs)); err != nil {
		return nil, err
	}
	notes, err := c.s.Notify.Inbox(c.ctx, c.user.ID, false, store.Page{Limit: dashboardInbox})
	if err != nil {
		return nil, err
	}
	// A notification names its pull request's title: one about a
	// repository the user can no longer read is not shown.
	readable := map[int64]bool{}
	for _, n := range notes {
		ok, seen := readable[n.RepoID]
		if !seen {
			r, err := c.s.Store.RepoByID(c.ctx, n.RepoID)
			switch {
			case problem.KindOf(err) == problem.NotFound:
			case err != nil:
				return nil, err
			default:
				if ok, err = c.canSee(auth.Resource{Repo: r}); err != nil {
					return nil, err
				}
			}
			readable[n.RepoID] = ok
		}
		if !ok {
			continue
		}
		it := inboxItem{Title: n.Title, Body: n.Body, Kind: n.Kind, Unread: n.ReadAt == nil, N: n}
		// Links are paths the service wrote ("/projects/…"); anything
		// else is not made a link.
		if len(n.Link) > 1 && n.Link[0] == '/' && n.Link[1] != '/' && n.Link[1] != '\\' {
			it.Link = n.Link
		}
		if n.ActorID != 0 {
			it.Actor = us.get(n.ActorID).DisplayName
		}
		out.Inbox = append(out.Inbox, it)
	}
	if out.Unread, err = c.s.Notify.UnreadCount(c.ctx, c.user.ID); err != nil {
		return nil, err
	}
	return out, nil
}

// markNotificationsRead is the dashboard's "mark all read" form.
func (c *call) markNotificationsRead() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	if c.s.Pulls == nil {
		return notFound()
	}
	if _, err := c.s.Notify.MarkRead(c.ctx, c.user.ID, nil); err != nil {
		return err
	}
	return c.redirect("/")
}
