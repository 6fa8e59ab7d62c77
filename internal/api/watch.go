package api

import "github.com/sluice-scm/sluice/internal/auth"

// Watching a pull request (issue 15 item 6): Bitbucket's
// POST/DELETE …/pull-requests/{id}/watch, for the signed-in user. A
// watcher hears of the pull request's comments, merge and decline
// (internal/notify). Anyone who may read the repository may watch; others
// get the same 404 as for a missing pull request.

func (s *server) watchRoutes() []route {
	return []route{
		{Method: "POST", Pattern: pullsBase + "/{id}/watch", Summary: "Watch the pull request (the signed-in user)", Success: 204,
			handle: (*call).watchPull},
		{Method: "DELETE", Pattern: pullsBase + "/{id}/watch", Summary: "Stop watching the pull request", Success: 204,
			handle: (*call).unwatchPull},
	}
}

func (c *call) watchPull() error   { return c.setWatch(true) }
func (c *call) unwatchPull() error { return c.setWatch(false) }

func (c *call) setWatch(on bool) error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	if on {
		err = c.s.Pulls.Watch(c.ctx, pr, c.p.UserID)
	} else {
		err = c.s.Pulls.Unwatch(c.ctx, pr, c.p.UserID)
	}
	if err != nil {
		return err
	}
	return c.noContent()
}
