package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
)

// Pull requests, in Bitbucket's shape. Every handler first loads the
// target repository with repoFor, so a caller who cannot read it gets the
// same 404 (or 401) on every pull request path as on a missing one; the
// service in internal/pull does the work.

const pullsBase = repository + "/pull-requests"

func (s *server) pullRoutes() []route {
	ver := qreq("version", "the version of the pull request the caller read")
	verOpt := q("version", "the version of the pull request the caller read, unless the JSON body has it")
	return []route{
		{Method: "GET", Pattern: pullsBase, Summary: "List pull requests", Paged: true,
			Query: pullListParams(), handle: (*call).listPulls},
		{Method: "POST", Pattern: pullsBase, Summary: "Open a pull request", Success: 201,
			Body: "{title, description, fromRef: {id, repository: {slug, project: {key}}}, toRef: {id}, reviewers: [{user: {name}}]}", handle: (*call).createPull},
		{Method: "GET", Pattern: pullsBase + "/{id}", Summary: "Get a pull request", handle: (*call).getPull},
		{Method: "DELETE", Pattern: pullsBase + "/{id}", Summary: "Delete a pull request and its refs (author or REPO_ADMIN); version in the JSON body or the query",
			Body: "{version}", Success: 204, handle: (*call).deletePull},
		{Method: "PUT", Pattern: pullsBase + "/{id}", Summary: "Update title, description, target or reviewers (author or REPO_WRITE)",
			Body: "{version, title, description, toRef: {id}, reviewers}", handle: (*call).updatePull},
		{Method: "GET", Pattern: pullsBase + "/{id}/changes", Summary: "Files changed, with line counts (from the precomputed diff)", Paged: true,
			handle: (*call).pullChanges},
		{Method: "GET", Pattern: pullsBase + "/{id}/diff", Summary: "The whole diff (bounded; 'truncated' when cut)",
			Query:  []param{q("contextLines", "lines of context around each change (default 3; other numbers are computed on request)")},
			handle: (*call).pullDiff},
		{Method: "GET", Pattern: pullsBase + "/{id}/diff/{path...}", Summary: "One file's diff",
			Query: []param{q("whitespace", "ignore-all to ignore whitespace changes"),
				q("contextLines", "lines of context around each change (default 3)")}, handle: (*call).pullDiff},
		{Method: "GET", Pattern: pullsBase + "/{id}/merge", Summary: "Whether the pull request can be merged, with every failed check and the conflicts",
			Query: []param{q("strategyId", "merge strategy to test; default: the repository's")}, handle: (*call).canMerge},
		{Method: "POST", Pattern: pullsBase + "/{id}/merge", Summary: "Merge (REPO_WRITE); version in the JSON body or the query",
			Query: []param{verOpt}, Body: "{version, strategyId, message, autoSubject, deleteSourceBranch}", handle: (*call).mergePull},
		{Method: "POST", Pattern: pullsBase + "/{id}/approve", Summary: "Approve", handle: (*call).approve},
		{Method: "DELETE", Pattern: pullsBase + "/{id}/approve", Summary: "Withdraw an approval", handle: (*call).unapprove},
		{Method: "GET", Pattern: pullsBase + "/{id}/participants", Summary: "List participants", Paged: true, handle: (*call).listParticipants},
		{Method: "PUT", Pattern: pullsBase + "/{id}/participants/{userSlug}", Summary: "Set one's own review status",
			Body: "{status: APPROVED|NEEDS_WORK|UNAPPROVED}", handle: (*call).setParticipant},
		{Method: "POST", Pattern: pullsBase + "/{id}/decline", Summary: "Decline (author or REPO_WRITE); version in the JSON body or the query",
			Query: []param{verOpt}, Body: "{version}", handle: (*call).declinePull},
		{Method: "POST", Pattern: pullsBase + "/{id}/reopen", Summary: "Reopen (author or REPO_WRITE); version in the JSON body or the query",
			Query: []param{verOpt}, Body: "{version}", handle: (*call).reopenPull},
		{Method: "GET", Pattern: pullsBase + "/{id}/comments", Summary: "List comments", Paged: true,
			Query: []param{q("path", "only inline comments on this file")}, handle: (*call).listComments},
		{Method: "POST", Pattern: pullsBase + "/{id}/comments", Summary: "Comment, reply (parent) or comment on a line (anchor)", Success: 201,
			Body: "{text, parent: {id}, severity, anchor: {path, line, lineType, fileType}}", handle: (*call).addComment},
		{Method: "GET", Pattern: pullsBase + "/{id}/comments/{commentId}", Summary: "Get a comment", handle: (*call).getComment},
		{Method: "PUT", Pattern: pullsBase + "/{id}/comments/{commentId}", Summary: "Edit a comment or resolve a task",
			Body: "{version, text, severity, state}", handle: (*call).updateComment},
		{Method: "DELETE", Pattern: pullsBase + "/{id}/comments/{commentId}", Summary: "Delete a comment", Success: 204,
			Query: []param{ver}, handle: (*call).deleteComment},
		{Method: "GET", Pattern: pullsBase + "/{id}/tasks", Summary: "List tasks (BLOCKER comments)", Paged: true, handle: (*call).listTasks},
		{Method: "GET", Pattern: pullsBase + "/{id}/activities", Summary: "Activity, newest first", Paged: true, handle: (*call).listActivities},
	}
}

// pullRef reads the {id} pull request of a repository the caller may act
// on with a.
func (c *call) pullRef(a auth.Action) (*store.Project, *store.Repository, *store.PullRequest, error) {
	proj, r, err := c.repoFor(a)
	if err != nil {
		return nil, nil, nil, err
	}
	n, err := strconv.ParseInt(c.path("id"), 10, 64)
	if err != nil || n <= 0 {
		return nil, nil, nil, problem.New(problem.NotFound, "pull request not found")
	}
	pr, err := c.s.Pulls.Get(c.ctx, r.ID, n)
	if err != nil {
		return nil, nil, nil, err
	}
	return proj, r, pr, nil
}

// pullEditor reads the pull request for an edit that its author may make
// with read access and anyone else only with write access.
func (c *call) pullEditor() (*store.Project, *store.Repository, *store.PullRequest, error) {
	proj, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.p.UserID == 0 || c.p.UserID != pr.AuthorID {
		if err := c.authorize(auth.Resource{Repo: r, Project: proj}, auth.Write); err != nil {
			return nil, nil, nil, err
		}
	}
	return proj, r, pr, nil
}

func (c *call) userByID(id int64, cache map[int64]*store.User) *store.User {
	if u, ok := cache[id]; ok {
		return u
	}
	u, err := c.s.Store.UserByID(c.ctx, id)
	if err != nil {
		u = entity.DeletedUser(id)
	}
	cache[id] = u
	return u
}

func (c *call) pullJSON(proj *store.Project, target *store.Repository, pr *store.PullRequest, withParticipants bool) (pullJSON, error) {
	users := map[int64]*store.User{}
	ent := c.s.entities()
	tj := ent.Repository(target, proj)
	fj := &tj
	if pr.FromRepoID != pr.RepoID {
		if fr, err := c.s.Store.RepoByID(c.ctx, pr.FromRepoID); err == nil {
			r := ent.Repository(fr, nil)
			fj = &r
		}
	}
	out := ent.PullRequest(pr, &tj, fj)
	if !withParticipants {
		return out, nil
	}
	parts, err := c.s.Pulls.Participants(c.ctx, pr)
	if err != nil {
		return out, err
	}
	for i := range parts {
		out.AddParticipant(ent.Participant(&parts[i], c.userByID(parts[i].UserID, users)))
	}
	return out, nil
}

type refInput struct {
	ID         string `json:"id"`
	Repository *struct {
		Slug    string `json:"slug"`
		Project struct {
			Key string `json:"key"`
		} `json:"project"`
	} `json:"repository"`
}

type userRefInput struct {
	User struct {
		Name string `json:"name"`
	} `json:"user"`
}

// reviewerIDs resolves reviewer names to users who can read the
// repository.
func (c *call) reviewerIDs(proj *store.Project, r *store.Repository, in []userRefInput) ([]int64, error) {
	var ids []int64
	for _, rv := range in {
		u, err := c.s.Store.UserByName(c.ctx, rv.User.Name)
		if problem.Is(err, problem.NotFound) {
			return nil, problem.New(problem.Invalid, "reviewer %q does not exist", rv.User.Name)
		}
		if err != nil {
			return nil, err
		}
		if err := c.s.Auth.Authorize(c.ctx, &auth.Principal{UserID: u.ID, Name: u.Name}, auth.Resource{Repo: r, Project: proj}, auth.Read); err != nil {
			return nil, problem.New(problem.Invalid, "reviewer %q cannot read this repository", u.Name)
		}
		ids = append(ids, u.ID)
	}
	return ids, nil
}

func (c *call) createPull() error {
	proj, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	var in struct {
		Title       string         `json:"title"`
		Description string         `json:"description"`
		FromRef     refInput       `json:"fromRef"`
		ToRef       refInput       `json:"toRef"`
		Reviewers   []userRefInput `json:"reviewers"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	from := r
	if fr := in.FromRef.Repository; fr != nil && fr.Slug != "" &&
		!(strings.EqualFold(fr.Project.Key, proj.Key) && strings.EqualFold(fr.Slug, r.Slug)) {
		fp, err := c.s.Store.ProjectByKey(c.ctx, fr.Project.Key)
		if err != nil {
			return c.hiddenIfMissing(err)
		}
		fromRepo, err := c.s.Store.RepoBySlug(c.ctx, fp.Key, fr.Slug)
		if err != nil {
			return c.hiddenIfMissing(err)
		}
		if err := c.authorize(auth.Resource{Repo: fromRepo, Project: fp}, auth.Read); err != nil {
			return err
		}
		from = fromRepo
	}
	reviewers, err := c.reviewerIDs(proj, r, in.Reviewers)
	if err != nil {
		return err
	}
	pr, err := c.s.Pulls.Create(c.ctx, c.p, r, pull.CreateRequest{Title: in.Title, Description: in.Description,
		FromRepo: from, FromRef: in.FromRef.ID, ToRef: in.ToRef.ID, Reviewers: reviewers})
	if err != nil {
		return err
	}
	pj, err := c.pullJSON(proj, r, pr, true)
	if err != nil {
		return err
	}
	return c.jsonStatus(http.StatusCreated, pj)
}

func (c *call) hiddenIfMissing(err error) error {
	if problem.Is(err, problem.NotFound) {
		return c.hidden(msgRepoNotFound)
	}
	return err
}

func (c *call) getPull() error {
	proj, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pj, err := c.pullJSON(proj, r, pr, true)
	if err != nil {
		return err
	}
	return c.json(pj)
}

func (c *call) updatePull() error {
	proj, r, pr, err := c.pullEditor()
	if err != nil {
		return err
	}
	var in struct {
		Version     *int64          `json:"version"`
		Title       *string         `json:"title"`
		Description *string         `json:"description"`
		ToRef       *refInput       `json:"toRef"`
		Reviewers   *[]userRefInput `json:"reviewers"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	if in.Version == nil {
		return problem.New(problem.Invalid, "version is required")
	}
	req := pull.UpdateRequest{Version: *in.Version, Title: in.Title, Description: in.Description}
	if in.ToRef != nil && in.ToRef.ID != "" {
		req.ToRef = &in.ToRef.ID
	}
	if in.Reviewers != nil {
		ids, err := c.reviewerIDs(proj, r, *in.Reviewers)
		if err != nil {
			return err
		}
		req.Reviewers = &ids
	}
	upd, err := c.s.Pulls.Update(c.ctx, c.p, pr, req)
	if err != nil {
		return err
	}
	pj, err := c.pullJSON(proj, r, upd, true)
	if err != nil {
		return err
	}
	return c.json(pj)
}

func (c *call) pullChanges() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	// The values come rendered from the diff cache; only the page around
	// them is written per request.
	values, truncated, err := c.s.Pulls.ChangesJSON(c.ctx, pr)
	if err != nil {
		return err
	}
	return c.rawJSON(rawPage(slicePage(values, pg), func(b *bytes.Buffer) {
		b.WriteString(`,"fromHash":`)
		writeJSONString(b, pr.BaseSHA)
		b.WriteString(`,"toHash":`)
		writeJSONString(b, pr.FromSHA)
		b.WriteString(`,"truncated":`)
		b.WriteString(strconv.FormatBool(truncated))
	}))
}

func (c *call) pullDiff() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	o := pull.DiffOptions{Path: c.path("path")}
	switch strings.ToLower(strings.ReplaceAll(c.query("whitespace"), "_", "-")) {
	case "", "show":
	case "ignore-all":
		o.IgnoreWhitespace = true
	default:
		return problem.New(problem.Invalid, "whitespace must be show or ignore-all")
	}
	// contextLines as Bitbucket reads it: -1 (or none) is the default of
	// three lines; larger numbers are capped at pull.MaxContextLines.
	if v := c.query("contextLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return problem.New(problem.Invalid, "contextLines must be a number of lines, or -1 for the default")
		}
		if n >= 0 {
			o.ContextLines, o.CustomContext = n, true
		}
	}
	body, etag, err := c.s.Pulls.DiffJSON(c.ctx, pr, o)
	if err != nil {
		return err
	}
	h := c.w.Header()
	h.Set("ETag", etag)
	// no-cache (revalidate every time), not no-store: the tag makes a
	// revalidation of an unchanged diff a 304 with no body.
	h.Set("Cache-Control", "private, no-cache")
	if match := c.r.Header.Get("If-None-Match"); match != "" && etagMatches(match, etag) {
		c.w.WriteHeader(http.StatusNotModified)
		return nil
	}
	h.Set("Content-Type", "application/json;charset=UTF-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(body) // a client gone away is not our error
	return nil
}

// etagMatches reads an If-None-Match list ("*", or tags separated by
// commas, weak or strong: a weak comparison is right for GET).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

func (c *call) canMerge() error {
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	st, err := c.s.Pulls.CanMerge(c.ctx, c.p, r, pr, c.query("strategyId"))
	if err != nil {
		return err
	}
	return c.json(st)
}

// versionParam reads the required ?version=.
func (c *call) versionParam() (int64, error) {
	v, err := strconv.ParseInt(c.query("version"), 10, 64)
	if err != nil || v < 0 {
		return 0, problem.New(problem.Invalid, "query parameter version is required and must be a non-negative integer")
	}
	return v, nil
}

// versionOf is the version a merge, decline or reopen names: the JSON
// body's, which Bitbucket also reads there, else the query's.
func (c *call) versionOf(body *int64) (int64, error) {
	if body == nil {
		return c.versionParam()
	}
	if *body < 0 {
		return 0, problem.New(problem.Invalid, "version must be a non-negative integer")
	}
	return *body, nil
}

func (c *call) mergePull() error {
	proj, r, pr, err := c.pullRef(auth.Write)
	if err != nil {
		return err
	}
	var in struct {
		Version            *int64 `json:"version"`
		StrategyID         string `json:"strategyId"`
		Message            string `json:"message"`
		DeleteSourceBranch bool   `json:"deleteSourceBranch"`
	}
	if err := c.decode(&in, true); err != nil {
		return err
	}
	v, err := c.versionOf(in.Version)
	if err != nil {
		return err
	}
	merged, err := c.s.Pulls.Merge(c.ctx, c.p, r, pr, pull.MergeOptions{Version: v, Strategy: in.StrategyID, Message: in.Message,
		DeleteSource: in.DeleteSourceBranch})
	var ve *pull.VetoError
	if errors.As(err, &ve) {
		// Bitbucket's refusal: the error lists every veto.
		return c.jsonStatus(http.StatusConflict, map[string]any{"errors": []map[string]any{{
			"context": nil, "message": problem.Message(err), "exceptionName": "MergeVetoedException",
			"conflicted": len(ve.Conflicts) > 0, "conflicts": ve.Conflicts, "vetoes": ve.Vetoes}}})
	}
	if err != nil {
		return err
	}
	pj, err := c.pullJSON(proj, r, merged, true)
	if err != nil {
		return err
	}
	pj.Properties["mergeCommit"] = map[string]string{"id": merged.MergeSHA}
	return c.json(pj)
}

func (c *call) review(status string) error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pt, err := c.s.Pulls.SetStatus(c.ctx, c.p, pr, status)
	if err != nil {
		return err
	}
	return c.json(c.participantJSON(pt))
}

func (c *call) participantJSON(pt *store.Participant) participantJSON {
	return c.s.entities().Participant(pt, c.userByID(pt.UserID, map[int64]*store.User{}))
}

func (c *call) approve() error   { return c.review(store.StatusApproved) }
func (c *call) unapprove() error { return c.review(store.StatusUnapproved) }

func (c *call) setParticipant() error {
	if c.p.IsAnonymous() || !strings.EqualFold(userSlug(c.p.Name), c.path("userSlug")) {
		// Reading the pull request first keeps hidden repositories hidden.
		if _, _, _, err := c.pullRef(auth.Read); err != nil {
			return err
		}
		return problem.New(problem.Forbidden, "you can only set your own review status")
	}
	var in struct {
		Status string `json:"status"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	return c.review(in.Status)
}

func (c *call) listParticipants() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	parts, err := c.s.Pulls.Participants(c.ctx, pr)
	if err != nil {
		return err
	}
	return c.json(mapPage(slicePage(parts, pg), func(pt store.Participant) participantJSON { return c.participantJSON(&pt) }))
}

// deletePull is Bitbucket's DELETE of a pull request, whose version
// travels in the JSON body ({"version": N}); the query is accepted too.
func (c *call) deletePull() error {
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	var in struct {
		Version *json.Number `json:"version"`
	}
	if err := c.decode(&in, true); err != nil {
		return err
	}
	var v int64
	if in.Version != nil {
		if v, err = in.Version.Int64(); err != nil || v < 0 {
			return problem.New(problem.Invalid, "version must be a non-negative integer")
		}
	} else if v, err = c.versionParam(); err != nil {
		return err
	}
	if err := c.s.Pulls.Delete(c.ctx, c.p, r, pr, v); err != nil {
		return err
	}
	return c.noContent()
}

func (c *call) declinePull() error { return c.closeOrReopen(false) }
func (c *call) reopenPull() error  { return c.closeOrReopen(true) }

func (c *call) closeOrReopen(reopen bool) error {
	proj, r, pr, err := c.pullEditor()
	if err != nil {
		return err
	}
	var in struct {
		Version *int64 `json:"version"`
	}
	if err := c.decode(&in, true); err != nil {
		return err
	}
	v, err := c.versionOf(in.Version)
	if err != nil {
		return err
	}
	var upd *store.PullRequest
	if reopen {
		upd, err = c.s.Pulls.Reopen(c.ctx, c.p, pr, v)
	} else {
		upd, err = c.s.Pulls.Decline(c.ctx, c.p, pr, v)
	}
	if err != nil {
		return err
	}
	pj, err := c.pullJSON(proj, r, upd, true)
	if err != nil {
		return err
	}
	return c.json(pj)
}

func (c *call) commentJSON(cm *store.PullComment, users map[int64]*store.User) commentJSON {
	return c.s.entities().Comment(cm, c.userByID(cm.AuthorID, users))
}

// threads nests replies under their parents and returns the top-level
// comments, oldest first.
func (c *call) threads(all []store.PullComment, keep func(*store.PullComment) bool) []commentJSON {
	users := map[int64]*store.User{}
	byID := map[int64]*commentJSON{}
	nodes := make([]commentJSON, len(all))
	for i := range all {
		nodes[i] = c.commentJSON(&all[i], users)
	}
	// Children first (ids grow, so a reply's id is above its parent's).
	for i := len(all) - 1; i >= 0; i-- {
		byID[all[i].ID] = &nodes[i]
	}
	for i := len(all) - 1; i >= 0; i-- {
		if p := all[i].ParentID; p != 0 {
			if parent := byID[p]; parent != nil {
				parent.Comments = append([]commentJSON{nodes[i]}, parent.Comments...)
			}
		}
	}
	var out []commentJSON
	for i := range all {
		if all[i].ParentID == 0 && keep(&all[i]) {
			out = append(out, nodes[i])
		}
	}
	return out
}

func (c *call) listComments() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	all, err := c.s.Pulls.Comments(c.ctx, pr)
	if err != nil {
		return err
	}
	path := c.query("path")
	return c.json(slicePage(c.threads(all, func(cm *store.PullComment) bool { return path == "" || cm.Path == path }), pg))
}

func (c *call) listTasks() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	all, err := c.s.Pulls.Comments(c.ctx, pr)
	if err != nil {
		return err
	}
	users := map[int64]*store.User{}
	var tasks []commentJSON
	for i := range all {
		if all[i].Severity == pull.SeverityBlocker {
			tasks = append(tasks, c.commentJSON(&all[i], users))
		}
	}
	return c.json(slicePage(tasks, pg))
}

func (c *call) addComment() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	var in struct {
		Text     string `json:"text"`
		Severity string `json:"severity"`
		Parent   *struct {
			ID int64 `json:"id"`
		} `json:"parent"`
		Anchor *anchorJSON `json:"anchor"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	ci := pull.CommentInput{Text: in.Text, Severity: in.Severity}
	if in.Parent != nil {
		ci.ParentID = in.Parent.ID
	}
	if in.Anchor != nil {
		ci.Anchor = &pull.Anchor{Path: in.Anchor.Path, Line: in.Anchor.Line, LineType: in.Anchor.LineType, FileType: in.Anchor.FileType}
	}
	cm, err := c.s.Pulls.AddComment(c.ctx, c.p, pr, ci)
	if err != nil {
		return err
	}
	return c.jsonStatus(http.StatusCreated, c.commentJSON(cm, map[int64]*store.User{}))
}

func (c *call) commentID() (int64, error) {
	id, err := strconv.ParseInt(c.path("commentId"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "comment not found")
	}
	return id, nil
}

func (c *call) getComment() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	id, err := c.commentID()
	if err != nil {
		return err
	}
	all, err := c.s.Pulls.Comments(c.ctx, pr)
	if err != nil {
		return err
	}
	for _, t := range c.threads(all, func(*store.PullComment) bool { return true }) {
		if found := findComment(t, id); found != nil {
			return c.json(found)
		}
	}
	return problem.New(problem.NotFound, "comment not found")
}

func findComment(t commentJSON, id int64) *commentJSON {
	if t.ID == id {
		return &t
	}
	for _, r := range t.Comments {
		if f := findComment(r, id); f != nil {
			return f
		}
	}
	return nil
}

func (c *call) updateComment() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	id, err := c.commentID()
	if err != nil {
		return err
	}
	var in struct {
		Version  *int64  `json:"version"`
		Text     *string `json:"text"`
		Severity *string `json:"severity"`
		State    *string `json:"state"`
	}
	if err := c.decode(&in, false); err != nil {
		return err
	}
	if in.Version == nil {
		return problem.New(problem.Invalid, "version is required")
	}
	cm, err := c.s.Pulls.UpdateComment(c.ctx, c.p, pr, id, pull.CommentUpdate{Version: *in.Version, Text: in.Text, Severity: in.Severity, State: in.State})
	if err != nil {
		return err
	}
	return c.json(c.commentJSON(cm, map[int64]*store.User{}))
}

func (c *call) deleteComment() error {
	_, _, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	id, err := c.commentID()
	if err != nil {
		return err
	}
	v, err := c.versionParam()
	if err != nil {
		return err
	}
	if err := c.s.Pulls.DeleteComment(c.ctx, c.p, pr, id, v); err != nil {
		return err
	}
	return c.noContent()
}
