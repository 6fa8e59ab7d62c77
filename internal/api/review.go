package api

import (
	"net/http"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Review tooling (issue 15, item 6): the resources code review tools
// read beside the pull request itself. The files and single tag routes
// (files.go) need only the repository; the rest need pull requests and
// are left out with them.

func (s *server) reviewRoutes() []route {
	rs := s.fileRoutes()
	if s.Pulls == nil {
		return rs
	}
	blockerBody := "{text, anchor: {path, line, lineType, fileType}}"
	return append(rs, []route{
		{Method: "GET", Pattern: pullsBase + "/{id}/activities", Summary: "Activity, newest first", Paged: true, handle: (*call).listActivities},
		{Method: "GET", Pattern: pullsBase + "/{id}/commits", Summary: "The commits a pull request brings, newest first", Paged: true,
			handle: (*call).pullCommits},
		{Method: "GET", Pattern: repository + "/commits/{commitId}/changes", Summary: "The files a commit changes", Paged: true,
			Query: []param{q("since", "list the changes since this commit instead of the first parent")}, handle: (*call).commitChanges},
		{Method: "GET", Pattern: repository + "/commits/{commitId}/pull-requests", Summary: "Pull requests of this repository whose source contains a commit",
			Paged: true, handle: (*call).commitPulls},
		{Method: "GET", Pattern: pullsBase + "/{id}/blocker-comments", Summary: "List tasks (BLOCKER comments), Bitbucket 8's resource", Paged: true,
			Query: []param{q("state", "OPEN or RESOLVED; default: both")}, handle: (*call).listBlockers},
		{Method: "POST", Pattern: pullsBase + "/{id}/blocker-comments", Summary: "Add a task (a BLOCKER comment)", Success: 201,
			Body: blockerBody, handle: (*call).addBlocker},
		{Method: "GET", Pattern: pullsBase + "/{id}/blocker-comments/{commentId}", Summary: "Get a task", handle: (*call).getBlocker},
		{Method: "PUT", Pattern: pullsBase + "/{id}/blocker-comments/{commentId}", Summary: "Edit or resolve a task",
			Body: "{version, text, state: OPEN|RESOLVED}", handle: (*call).updateBlocker},
		{Method: "DELETE", Pattern: pullsBase + "/{id}/blocker-comments/{commentId}", Summary: "Delete a task", Success: 204,
			Query: []param{qreq("version", "the version of the task the caller read")}, handle: (*call).deleteBlocker},
	}...)
}

// listActivities renders the stream through entity.Activity: a
// COMMENTED entry carries its comment as it is now, with its replies,
// and the anchor of its thread.
func (c *call) listActivities() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	acts, err := c.s.Pulls.Activities(c.ctx, pr, probe(pg))
	if err != nil {
		return err
	}
	var comments map[int64]*commentJSON
	var anchors map[int64]*anchorJSON
	var parts map[int64]*participantJSON
	users := map[int64]*store.User{}
	for _, a := range acts {
		switch {
		case a.Action == "COMMENTED" && comments == nil:
			all, err := c.s.Pulls.Comments(c.ctx, pr)
			if err != nil {
				return err
			}
			comments, anchors = map[int64]*commentJSON{}, map[int64]*anchorJSON{}
			for _, t := range c.threads(all, func(*store.PullComment) bool { return true }) {
				indexThread(t, t.Anchor, comments, anchors)
			}
		case (a.Action == "APPROVED" || a.Action == "UNAPPROVED" || a.Action == "REVIEWED") && parts == nil:
			ps, err := c.s.Pulls.Participants(c.ctx, pr)
			if err != nil {
				return err
			}
			parts = map[int64]*participantJSON{}
			for i := range ps {
				pj := c.participantJSON(&ps[i])
				parts[ps[i].UserID] = &pj
			}
		}
	}
	ent := c.s.entities()
	return c.json(mapPage(newPage(acts, pg), func(a store.PullActivity) entity.Activity {
		var ac entity.ActivityContext
		if a.UserID != 0 {
			ac.User = c.userByID(a.UserID, users)
		}
		if id := entity.ActivityCommentID(&a); id != 0 && comments != nil {
			ac.Comment, ac.Anchor = comments[id], anchors[id]
		}
		if parts != nil {
			ac.Participant = parts[a.UserID]
		}
		return ent.Activity(&a, ac)
	}))
}

// indexThread files every comment of thread t by id, with the anchor of
// the thread's first comment: a reply is about the same line.
func indexThread(t commentJSON, anchor *anchorJSON, comments map[int64]*commentJSON, anchors map[int64]*anchorJSON) {
	comments[t.ID], anchors[t.ID] = &t, anchor
	for _, r := range t.Comments {
		indexThread(r, anchor, comments, anchors)
	}
}

// pullCommits lists what the pull request brings to its target: the
// commits of its source not in its target, as the pull request last saw
// them.
func (c *call) pullCommits() error {
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	commits, err := c.s.Repos.Compare(c.ctx, r.ID, pr.ToSHA, pr.FromSHA, pg.Start, gitProbe(pg))
	if err != nil {
		return err
	}
	return c.json(mapPage(gitPage(commits, pg), commitOf))
}

// changeJSON is Bitbucket's change: one file of a commit.
type changeJSON struct {
	ContentID        string    `json:"contentId,omitempty"`
	FromContentID    string    `json:"fromContentId,omitempty"`
	Path             pathJSON  `json:"path"`
	SrcPath          *pathJSON `json:"srcPath,omitempty"`
	Executable       bool      `json:"executable"`
	SrcExecutable    bool      `json:"srcExecutable"`
	PercentUnchanged int       `json:"percentUnchanged"`
	Type             string    `json:"type"`
	NodeType         string    `json:"nodeType"`
	Properties       struct {
		GitChangeType string `json:"gitChangeType"`
	} `json:"properties"`
}

type changesPage struct {
	pageJSON[changeJSON]
	FromHash string `json:"fromHash"`
	ToHash   string `json:"toHash"`
}

// commitChanges pages the files a commit changes against its first
// parent (or since).
func (c *call) commitChanges() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	sha, err := c.resolveRev(r, "commitId", c.path("commitId"))
	if err != nil {
		return err
	}
	since := ""
	if s := c.query("since"); s != "" {
		if since, err = c.resolveRev(r, "since", s); err != nil {
			return err
		}
	}
	changes, more, err := c.s.Repos.Changes(c.ctx, r.ID, since, sha, pg.Start+pg.Limit)
	if err != nil {
		return err
	}
	rows := changes[min(pg.Start, len(changes)):]
	if more {
		// One row past the page says another page exists.
		rows = append(rows, repo.Change{})
	}
	out := changesPage{pageJSON: mapPage(newPage(rows, pg), func(ch repo.Change) changeJSON {
		cj := changeJSON{ContentID: ch.ContentID, FromContentID: ch.FromID, Path: pathOf(ch.Path), Executable: ch.Executable,
			SrcExecutable: ch.SrcExec, PercentUnchanged: -1, Type: ch.Type, NodeType: "FILE"}
		if ch.Submodule {
			cj.NodeType = "SUBMODULE"
		}
		if ch.SrcPath != "" {
			sp := pathOf(ch.SrcPath)
			cj.SrcPath = &sp
		}
		cj.Properties.GitChangeType = ch.Type
		return cj
	}), ToHash: sha, FromHash: since}
	return c.json(out)
}

// commitPulls pages the pull requests of this repository whose source
// contains the commit.
func (c *call) commitPulls() error {
	proj, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	sha, err := c.resolveRev(r, "commitId", c.path("commitId"))
	if err != nil {
		return err
	}
	nums, err := c.s.Repos.PullRequestsContaining(c.ctx, r.ID, sha)
	if err != nil {
		return err
	}
	page := slicePage(nums, pg)
	out := pageJSON[pullJSON]{Size: page.Size, Limit: page.Limit, Start: page.Start, IsLastPage: page.IsLastPage,
		NextPageStart: page.NextPageStart, Values: []pullJSON{}}
	for _, n := range page.Values {
		pr, err := c.s.Pulls.Get(c.ctx, r.ID, n)
		if problem.Is(err, problem.NotFound) {
			continue // deleted since its ref was read
		}
		if err != nil {
			return err
		}
		pj, err := c.pullJSON(proj, r, pr, true)
		if err != nil {
			return err
		}
		out.Values = append(out.Values, pj)
	}
	out.Size = len(out.Values)
	return c.json(out)
}

// Tasks as Bitbucket 8 serves them: BLOCKER comments under a resource of
// their own. They are the comments of …/comments, so each one also
// shows there and counts against the "no open tasks" merge check.

func (c *call) listBlockers() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	state := c.query("state")
	switch state {
	case "", pull.TaskOpen, pull.TaskResolved:
	default:
		return problem.New(problem.Invalid, "state must be OPEN or RESOLVED")
	}
	all, err := c.s.Pulls.Comments(c.ctx, pr)
	if err != nil {
		return err
	}
	users := map[int64]*store.User{}
	tasks := []commentJSON{}
	for i := range all {
		if all[i].Severity == pull.SeverityBlocker && (state == "" || all[i].State == state) {
			tasks = append(tasks, c.commentJSON(&all[i], users))
		}
	}
	return c.json(slicePage(tasks, pg))
}

func (c *call) addBlocker() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	var in struct {
		Text   string      `json:"text"`
		Anchor *anchorJSON `json:"anchor"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	ci := pull.CommentInput{Text: in.Text, Severity: pull.SeverityBlocker}
	if in.Anchor != nil {
		ci.Anchor = &pull.Anchor{Path: in.Anchor.Path, Line: in.Anchor.Line, LineType: in.Anchor.LineType, FileType: in.Anchor.FileType}
	}
	cm, err := c.s.Pulls.AddComment(c.ctx, c.p, pr, ci)
	if err != nil {
		return err
	}
	return c.jsonStatus(http.StatusCreated, c.commentJSON(cm, map[int64]*store.User{}))
}

// blocker reads the {commentId} task of a pull request the caller may
// read; a comment that is not a task is not found here.
func (c *call) blocker() (*store.PullRequest, *store.PullComment, error) {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return nil, nil, err
	}
	id, err := c.commentID()
	if err != nil {
		return nil, nil, err
	}
	cm, err := c.s.Pulls.Comment(c.ctx, pr, id)
	if err != nil {
		return nil, nil, err
	}
	if cm.Severity != pull.SeverityBlocker {
		return nil, nil, problem.New(problem.NotFound, "task not found")
	}
	return pr, cm, nil
}

func (c *call) getBlocker() error {
	_, cm, err := c.blocker()
	if err != nil {
		return err
	}
	return c.json(c.commentJSON(cm, map[int64]*store.User{}))
}

func (c *call) updateBlocker() error {
	pr, cm, err := c.blocker()
	if err != nil {
		return err
	}
	var in struct {
		Version *int64  `json:"version"`
		Text    *string `json:"text"`
		State   *string `json:"state"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	if in.Version == nil {
		return problem.New(problem.Invalid, "version is required")
	}
	upd, err := c.s.Pulls.UpdateComment(c.ctx, c.p, pr, cm.ID, pull.CommentUpdate{Version: *in.Version, Text: in.Text, State: in.State})
	if err != nil {
		return err
	}
	return c.json(c.commentJSON(upd, map[int64]*store.User{}))
}

func (c *call) deleteBlocker() error {
	pr, cm, err := c.blocker()
	if err != nil {
		return err
	}
	v, err := c.versionParam()
	if err != nil {
		return err
	}
	if err := c.s.Pulls.DeleteComment(c.ctx, c.p, pr, cm.ID, v); err != nil {
		return err
	}
	return c.noContent()
}
