package web

import (
	"html/template"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Pull request pages, through the pull request service (internal/pull)
// exactly as the REST API uses it: the service does the checks that are
// about pull requests (who may review, merge checks, versions); this file
// checks repository access first with the same levels as the API (read to
// see, comment and review; write to merge; the author or a writer to
// decline).

// pullsEnabled reports whether the node runs the pull request service.
func (s *server) pullsEnabled() bool { return s.Pulls != nil }

func (s *server) pullRoutes(get, post func(string, handler)) {
	const r = "/projects/{key}/repos/{slug}/pull-requests"
	get(r, (*call).pulls)
	get(r+"/new", (*call).newPull)
	post(r, (*call).createPull)
	get(r+"/{n}", (*call).pullOverview)
	get(r+"/{n}/diff", (*call).pullDiff)
	post(r+"/{n}/comments", (*call).addPullComment)
	post(r+"/{n}/comments/{id}/task", (*call).setTaskState)
	post(r+"/{n}/review", (*call).reviewPull)
	post(r+"/{n}/merge", (*call).mergePull)
	post(r+"/{n}/decline", (*call).declinePull)
	post("/notifications/read", (*call).markNotificationsRead)
}

func pullURL(r *store.Repository, n int64) string {
	return repoURL(r) + "/pull-requests/" + strconv.FormatInt(n, 10)
}

// pullRef loads pull request {n} of the {key}/{slug} repository after
// checking a on the repository.
func (c *call) pullRef(a auth.Action) (*store.Project, *store.Repository, *store.PullRequest, error) {
	if c.s.Pulls == nil {
		return nil, nil, nil, notFound()
	}
	proj, r, err := c.repo(a)
	if err != nil {
		return nil, nil, nil, err
	}
	n, err := strconv.ParseInt(c.r.PathValue("n"), 10, 64)
	if err != nil || n <= 0 {
		return nil, nil, nil, notFound()
	}
	pr, err := c.s.Pulls.Get(c.ctx, r.ID, n)
	if err != nil {
		return nil, nil, nil, hide(err)
	}
	return proj, r, pr, nil
}

// users resolves user ids for display, once per id per request.
type users struct {
	c    *call
	byID map[int64]*store.User
}

func (c *call) users() *users { return &users{c: c, byID: map[int64]*store.User{}} }

func (u *users) get(id int64) *store.User {
	if x, ok := u.byID[id]; ok {
		return x
	}
	x, err := u.c.s.Store.UserByID(u.c.ctx, id)
	if err != nil {
		x = &store.User{ID: id, Name: "deleted-user", DisplayName: "Deleted user"}
	}
	u.byID[id] = x
	return x
}

// prItem is a pull request in a listing.
type prItem struct {
	URL, Title, Repo, Author, State string
	Number                          int64
	From, To                        string
}

func (c *call) prItem(r *store.Repository, pr *store.PullRequest, us *users) prItem {
	return prItem{URL: pullURL(r, pr.Number), Title: pr.Title, Repo: r.ProjectKey + "/" + r.Slug,
		Author: us.get(pr.AuthorID).DisplayName, State: pr.State, Number: pr.Number,
		From: strings.TrimPrefix(pr.FromRef, "refs/heads/"), To: strings.TrimPrefix(pr.ToRef, "refs/heads/")}
}

type pullsData struct {
	repoView
	State string
	Items []prItem
	Pager pager
}

func (c *call) pulls() error {
	if c.s.Pulls == nil {
		return notFound()
	}
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	state := strings.ToUpper(c.query("state"))
	switch state {
	case "":
		state = store.PullOpen
	case store.PullOpen, store.PullMerged, store.PullDeclined, "ALL":
	default:
		return problem.New(problem.Invalid, "unknown state %q", state)
	}
	start := c.start()
	prs, err := c.s.Pulls.List(c.ctx, store.PullFilter{RepoID: r.ID, State: state}, store.Page{Start: start, Limit: pageSize + 1})
	if err != nil {
		return err
	}
	more := len(prs) > pageSize
	if more {
		prs = prs[:pageSize]
	}
	us := c.users()
	d := pullsData{repoView: c.repoView(proj, r, "pulls"), State: state,
		Pager: newPager(repoURL(r)+"/pull-requests?state="+state, start, pageSize, more)}
	for i := range prs {
		d.Items = append(d.Items, c.prItem(r, &prs[i], us))
	}
	return c.ok("pulls", r.Name+": pull requests", d)
}

type newPullData struct {
	repoView
	Branches []repo.Ref
	From, To string
	Commits  []repo.Commit
	Files    []diffFile
	Cut      bool
	Split    bool
	Preview  bool
}

// newPull shows the form; with both branches chosen it previews the
// commits and the diff before anything is created.
func (c *call) newPull() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	if c.s.Pulls == nil {
		return notFound()
	}
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	branches, _, err := c.s.Repos.Refs(c.ctx, r.ID, "heads", "", 0, 200)
	if err != nil {
		return err
	}
	d := newPullData{repoView: c.repoView(proj, r, "pulls"), Branches: branches,
		From: c.query("from"), To: c.query("to")}
	if d.To == "" {
		d.To = r.DefaultBranch
	}
	if d.From != "" && d.To != "" && d.From != d.To {
		from, err := c.revision(r, "refs/heads/"+strings.TrimPrefix(d.From, "refs/heads/"))
		if err != nil {
			return err
		}
		to, err := c.revision(r, "refs/heads/"+strings.TrimPrefix(d.To, "refs/heads/"))
		if err != nil {
			return err
		}
		if d.Commits, err = c.s.Repos.Compare(c.ctx, r.ID, to, from, 0, 50); err != nil {
			return err
		}
		text, cut, err := c.s.Repos.Diff(c.ctx, r.ID, to, from, "", maxDiffBytes)
		if err != nil {
			return err
		}
		var linesCut bool
		d.Files, linesCut = parseDiff(text, maxDiffLines)
		if err := c.markTooLarge(r.ID, to, from, d.Files); err != nil {
			return err
		}
		d.Cut, d.Preview = cut || linesCut, true
	}
	return c.ok("pull_new", r.Name+": new pull request", d)
}

// reviewerIDs resolves names to users who can read the repository.
func (c *call) reviewerIDs(proj *store.Project, r *store.Repository, names string) ([]int64, error) {
	var ids []int64
	for _, name := range strings.FieldsFunc(names, func(r rune) bool { return r == ',' || r == ' ' }) {
		u, err := c.s.Store.UserByName(c.ctx, name)
		if problem.Is(err, problem.NotFound) {
			return nil, problem.New(problem.Invalid, "reviewer %q does not exist", name)
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
	if err := c.requireUser(); err != nil {
		return err
	}
	if c.s.Pulls == nil {
		return notFound()
	}
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	reviewers, err := c.reviewerIDs(proj, r, c.form("reviewers"))
	if err != nil {
		return err
	}
	pr, err := c.s.Pulls.Create(c.ctx, c.p, r, pull.CreateRequest{Title: c.form("title"), Description: c.r.PostFormValue("description"),
		FromRepo: r, FromRef: c.form("from"), ToRef: c.form("to"), Reviewers: reviewers})
	if err != nil {
		return err
	}
	return c.redirect(pullURL(r, pr.Number))
}

// participantView is a reviewer or participant for display.
type participantView struct {
	Name, Role, Status string
}

// commentView is a comment with its replies, for display.
type commentView struct {
	C        store.PullComment
	Author   string
	HTML     template.HTML
	Replies  []*commentView
	Task     bool
	Resolved bool
}

type pullData struct {
	repoView
	PR           *store.PullRequest
	Description  template.HTML
	Author       string
	Participants []participantView
	Merge        *pull.MergeStatus
	MergeErr     string
	Strategies   []string
	Comments     []*commentView // general comments
	Inline       map[string][]*commentView
	Activity     []activityView
	Files        []diffFile
	DiffCut      bool
	Split        bool
	Tab          string
	CanMerge     bool
	CanDecline   bool
	IsAuthor     bool
	MyStatus     string
	CommentAt    string // "path|TYPE|line|FILETYPE": the line whose comment form is open
	CommentOn    string // anchor id of that line
	OpenTasks    int
}

type activityView struct {
	Who, Action string
	At          string
	When        string
}

// loadPull gathers what the overview and diff tabs share.
func (c *call) loadPull(tab string) (*pullData, error) {
	proj, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return nil, err
	}
	v := c.repoView(proj, r, "pulls")
	us := c.users()
	d := &pullData{repoView: v, PR: pr, Description: renderMarkdown([]byte(pr.Description)),
		Author: us.get(pr.AuthorID).DisplayName, Tab: tab, Inline: map[string][]*commentView{},
		IsAuthor: c.user != nil && c.user.ID == pr.AuthorID}
	parts, err := c.s.Pulls.Participants(c.ctx, pr)
	if err != nil {
		return nil, err
	}
	for _, pt := range parts {
		d.Participants = append(d.Participants, participantView{Name: us.get(pt.UserID).DisplayName, Role: pt.Role, Status: pt.Status})
		if c.user != nil && pt.UserID == c.user.ID {
			d.MyStatus = pt.Status
		}
	}
	comments, err := c.s.Pulls.Comments(c.ctx, pr)
	if err != nil {
		return nil, err
	}
	byID := map[int64]*commentView{}
	for i := range comments {
		cm := comments[i]
		cv := &commentView{C: cm, Author: us.get(cm.AuthorID).DisplayName, HTML: renderMarkdown([]byte(cm.Text)),
			Task: cm.Severity == pull.SeverityBlocker, Resolved: cm.State == pull.TaskResolved}
		byID[cm.ID] = cv
		if cv.Task && !cv.Resolved {
			d.OpenTasks++
		}
	}
	// Comments come oldest first, so a parent is always seen before its
	// replies.
	for i := range comments {
		cv := byID[comments[i].ID]
		switch {
		case cv.C.ParentID != 0 && byID[cv.C.ParentID] != nil:
			byID[cv.C.ParentID].Replies = append(byID[cv.C.ParentID].Replies, cv)
		case cv.C.Path != "":
			key := inlineKey(cv.C.Path, cv.C.FileType, cv.C.Line)
			d.Inline[key] = append(d.Inline[key], cv)
		default:
			d.Comments = append(d.Comments, cv)
		}
	}
	res := auth.Resource{Repo: r, Project: proj}
	d.CanMerge = pr.State == store.PullOpen && c.can(res, auth.Write)
	d.CanDecline = pr.State == store.PullOpen && (d.IsAuthor || d.CanMerge)
	return d, nil
}

// inlineKey names a line of the diff for inline comments: the file, the
// side (FROM: old, TO: new) and the line number on that side.
func inlineKey(path, fileType string, line int) string {
	return path + "|" + fileType + "|" + strconv.Itoa(line)
}

func (c *call) pullOverview() error {
	d, err := c.loadPull("overview")
	if err != nil {
		return err
	}
	if d.PR.State == store.PullOpen {
		st, err := c.s.Pulls.GetSettings(c.ctx, d.Repo.ID)
		if err != nil {
			return err
		}
		d.Strategies = st.Strategies
		if len(d.Strategies) == 0 {
			d.Strategies = pull.AllStrategies
		}
		ms, err := c.s.Pulls.CanMerge(c.ctx, c.p, d.Repo, d.PR, "")
		switch {
		case err == nil:
			d.Merge = ms
		case problem.KindOf(err) == problem.Internal:
			return err
		default:
			d.MergeErr = problem.Message(err)
		}
	}
	acts, err := c.s.Pulls.Activities(c.ctx, d.PR, store.Page{Limit: 50})
	if err != nil {
		return err
	}
	us := c.users()
	for _, a := range acts {
		d.Activity = append(d.Activity, activityView{Who: us.get(a.UserID).DisplayName,
			Action: strings.ToLower(strings.ReplaceAll(a.Action, "_", " ")), At: a.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), When: ago(a.CreatedAt)})
	}
	return c.ok("pull", d.PR.Title, d)
}

func (c *call) pullDiff() error {
	d, err := c.loadPull("diff")
	if err != nil {
		return err
	}
	raw, cut, err := c.s.Pulls.RawDiff(c.ctx, d.PR)
	if err != nil {
		return err
	}
	var linesCut bool
	d.Files, linesCut = parseDiff(raw, maxDiffLines)
	if err := c.markTooLarge(d.PR.RepoID, d.PR.BaseSHA, d.PR.FromSHA, d.Files); err != nil {
		return err
	}
	d.DiffCut = cut || linesCut
	d.Split = c.query("view") == "split"
	if at := c.query("comment"); at != "" && c.signedIn() && len(at) < 4096 {
		d.CommentAt = at
		if f := strings.Split(at, "|"); len(f) == 4 {
			for _, file := range d.Files {
				if file.Path() == f[0] {
					side := "-L"
					if f[3] == "FROM" {
						side = "-O"
					}
					d.CommentOn = file.Anchor + side + f[2]
				}
			}
		}
	}
	return c.ok("pull_diff", d.PR.Title+": diff", d)
}

func (c *call) addPullComment() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	in := pull.CommentInput{Text: c.r.PostFormValue("text")}
	if c.form("task") == "on" {
		in.Severity = pull.SeverityBlocker
	}
	if p := c.form("parent"); p != "" {
		if in.ParentID, err = strconv.ParseInt(p, 10, 64); err != nil {
			return problem.New(problem.Invalid, "invalid parent comment")
		}
	}
	back := pullURL(r, pr.Number)
	if path := c.r.PostFormValue("path"); path != "" {
		line, err := strconv.Atoi(c.form("line"))
		if err != nil || line <= 0 {
			return problem.New(problem.Invalid, "invalid line")
		}
		in.Anchor = &pull.Anchor{Path: path, Line: line, LineType: c.form("line_type"), FileType: c.form("file_type")}
	}
	if c.form("back") == "diff" {
		back += "/diff"
	}
	cm, err := c.s.Pulls.AddComment(c.ctx, c.p, pr, in)
	if err != nil {
		return err
	}
	return c.redirect(back + "#comment-" + strconv.FormatInt(cm.ID, 10))
}

func (c *call) setTaskState() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	id, err := c.pathID()
	if err != nil {
		return err
	}
	version, _ := strconv.ParseInt(c.form("version"), 10, 64)
	state := pull.TaskResolved
	if c.form("state") == pull.TaskOpen {
		state = pull.TaskOpen
	}
	sev := pull.SeverityBlocker
	if _, err := c.s.Pulls.UpdateComment(c.ctx, c.p, pr, id, pull.CommentUpdate{Version: version, State: &state, Severity: &sev}); err != nil {
		return err
	}
	back := pullURL(r, pr.Number)
	if c.form("back") == "diff" {
		back += "/diff"
	}
	return c.redirect(back + "#comment-" + strconv.FormatInt(id, 10))
}

func (c *call) reviewPull() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	_, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	if _, err := c.s.Pulls.SetStatus(c.ctx, c.p, pr, c.form("status")); err != nil {
		return err
	}
	return c.redirect(pullURL(r, pr.Number))
}

func (c *call) mergePull() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	_, r, pr, err := c.pullRef(auth.Write)
	if err != nil {
		return err
	}
	version, err := strconv.ParseInt(c.form("version"), 10, 64)
	if err != nil {
		return problem.New(problem.Invalid, "the form lacks the pull request's version; reload the page")
	}
	if _, err := c.s.Pulls.Merge(c.ctx, c.p, r, pr, pull.MergeOptions{Version: version, Strategy: c.form("strategy"),
		Message: c.r.PostFormValue("message"), DeleteSource: c.form("delete_source") == "on"}); err != nil {
		return err
	}
	return c.flash(pullURL(r, pr.Number), "merged")
}

func (c *call) declinePull() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	proj, r, pr, err := c.pullRef(auth.Read)
	if err != nil {
		return err
	}
	if c.user.ID != pr.AuthorID {
		if err := c.authorize(auth.Resource{Repo: r, Project: proj}, auth.Write); err != nil {
			return err
		}
	}
	version, _ := strconv.ParseInt(c.form("version"), 10, 64)
	if _, err := c.s.Pulls.Decline(c.ctx, c.p, pr, version); err != nil {
		return err
	}
	return c.redirect(pullURL(r, pr.Number))
}

// pullSettingsView is the pull request part of repository settings.
type pullSettingsView struct {
	Settings     *pull.Settings
	Strategies   []string
	Reviewers    []string
	Restrictions []store.BranchRestriction
	Webhooks     []store.Webhook
}

func (c *call) pullSettings(r *store.Repository) (*pullSettingsView, error) {
	if c.s.Pulls == nil {
		return nil, nil
	}
	st, err := c.s.Pulls.GetSettings(c.ctx, r.ID)
	if err != nil {
		return nil, err
	}
	v := &pullSettingsView{Settings: st, Strategies: pull.AllStrategies}
	us := c.users()
	for _, rule := range st.DefaultReviewers {
		names := make([]string, len(rule.Users))
		for i, id := range rule.Users {
			names[i] = us.get(id).Name
		}
		v.Reviewers = append(v.Reviewers, strings.Join(names, ", ")+" for "+orAny(rule.Source)+" → "+orAny(rule.Target))
	}
	if c.s.BranchPerms != nil {
		if v.Restrictions, err = c.s.BranchPerms.Restrictions(c.ctx, r.ID, 0); err != nil {
			return nil, err
		}
	}
	if v.Webhooks, err = c.s.Pulls.Webhooks(c.ctx, r.ID); err != nil {
		return nil, err
	}
	return v, nil
}

func orAny(glob string) string {
	if glob == "" {
		return "any branch"
	}
	return glob
}

// updatePullSettings saves merge strategies and merge checks.
func (c *call) updatePullSettings() error {
	if c.s.Pulls == nil {
		return notFound()
	}
	_, r, err := c.repo(auth.Admin)
	if err != nil {
		return err
	}
	st, err := c.s.Pulls.GetSettings(c.ctx, r.ID)
	if err != nil {
		return err
	}
	st.Strategies = nil
	for _, s := range pull.AllStrategies {
		if c.r.PostForm.Get("strategy_"+s) == "on" {
			st.Strategies = append(st.Strategies, s)
		}
	}
	st.DefaultStrategy = c.form("default_strategy")
	atoi := func(name string) (int, error) {
		v := c.form(name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			return 0, problem.New(problem.Invalid, "%s must be a number from 0 to 100", strings.ReplaceAll(name, "_", " "))
		}
		return n, nil
	}
	if st.Checks.MinApprovals, err = atoi("min_approvals"); err != nil {
		return err
	}
	if st.Checks.MinSuccessfulBuilds, err = atoi("min_builds"); err != nil {
		return err
	}
	st.Checks.NoNeedsWork = c.form("no_needs_work") == "on"
	st.Checks.NoOpenTasks = c.form("no_open_tasks") == "on"
	if err := c.s.Pulls.PutSettings(c.ctx, r.ID, st); err != nil {
		return err
	}
	c.s.logger.Info("pull request settings updated", "repo_id", r.ID, "user", c.user.Name)
	return c.flash(repoURL(r)+"/settings", "saved")
}

// pullQuery builds the ?comment= link that opens an inline comment form.
func commentLink(base, path, fileType string, line int, lineType, view string) string {
	q := url.Values{"comment": {path + "|" + lineType + "|" + strconv.Itoa(line) + "|" + fileType}}
	if view != "" {
		q.Set("view", view)
	}
	return base + "?" + q.Encode()
}
