package web

import (
	"cmp"
	"context"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Listing page sizes. Small pages keep every listing cheap (each row of a
// filtered listing costs an authorization check).
const (
	pageSize       = 25
	treePageSize   = 500
	recentScan     = 500 // repositories the dashboard looks at for recent pushes
	recentShown    = 10
	refsPageSize   = 50
	commitPageSize = 30
)

// pager is the paging part of a listing page.
type pager struct {
	Start, Next, Prev int
	HasNext, HasPrev  bool
	Base              string // URL the start parameter is added to
}

func newPager(base string, start, size int, more bool) pager {
	p := pager{Start: start, HasNext: more, Next: start + size, HasPrev: start > 0, Prev: max(0, start-size), Base: base}
	return p
}

// URL is the base with start=n.
func (p pager) URL(n int) string {
	sep := "?"
	if strings.Contains(p.Base, "?") {
		sep = "&"
	}
	return p.Base + sep + "start=" + itoa(n)
}

// home is the dashboard for a signed-in user, the project list otherwise.
func (c *call) home() error {
	if !c.signedIn() {
		return c.projects()
	}
	return c.dashboard()
}

type dashboardData struct {
	Recent []store.Repository
	Pulls  *dashboardPulls
}

// recentRepos is the store query behind the dashboard (*store.DB has it;
// see store/dashboard.go for why visibility is decided in SQL).
type recentRepos interface {
	RecentlyPushedRepos(ctx context.Context, userID int64, limit int) ([]store.Repository, error)
}

func (c *call) dashboard() error {
	repos, err := c.recentlyPushed()
	if err != nil {
		return err
	}
	data := dashboardData{Recent: repos}
	if data.Pulls, err = c.dashboardPulls(); err != nil {
		return err
	}
	return c.ok("dashboard", "Dashboard", data)
}

// recentlyPushed lists the recentShown most recently pushed repositories
// the caller can read. The store narrows in SQL; each row is still checked
// with auth, the authority, so the page can only ever show less.
func (c *call) recentlyPushed() ([]store.Repository, error) {
	rs, ok := c.s.Store.(recentRepos)
	if !ok {
		// A store without the query (a test fake): a bounded scan.
		return c.recentlyPushedScan()
	}
	candidates, err := rs.RecentlyPushedRepos(c.ctx, c.p.UserID, recentShown)
	if err != nil {
		return nil, err
	}
	out := candidates[:0]
	for i := range candidates {
		ok, err := c.canSee(auth.Resource{Repo: &candidates[i]})
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, candidates[i])
		}
	}
	return out, nil
}

// recentlyPushedScan looks at a bounded number of visible repositories
// and sorts them by push time: correct for small stores only.
func (c *call) recentlyPushedScan() ([]store.Repository, error) {
	admin := c.s.Auth.IsAdmin(c.ctx, c.p)
	repos, _, err := visiblePage(0, recentScan,
		func(p store.Page) ([]store.Repository, error) { return c.s.Store.ListAllRepos(c.ctx, "", p) },
		func(r *store.Repository) (bool, error) {
			if admin {
				return true, nil
			}
			return c.canSee(auth.Resource{Repo: r})
		})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(repos, func(a, b store.Repository) int {
		return cmp.Or(b.PushedAt.Compare(a.PushedAt), b.CreatedAt.Compare(a.CreatedAt))
	})
	return repos[:min(len(repos), recentShown)], nil
}

type projectsData struct {
	Query      string
	Projects   []store.Project
	Pager      pager
	CanCreate  bool
	FormKey    string
	FormName   string
	FormPublic bool
}

func (c *call) projects() error {
	q := strings.TrimSpace(c.query("q"))
	if len(q) > 100 {
		q = q[:100]
	}
	start := c.start()
	admin := c.signedIn() && c.s.Auth.IsAdmin(c.ctx, c.p)
	list, more, err := visiblePage(start, pageSize,
		func(p store.Page) ([]store.Project, error) { return c.s.Store.ListProjects(c.ctx, q, p) },
		func(p *store.Project) (bool, error) {
			if admin {
				return true, nil
			}
			return c.canSee(auth.Resource{Project: p})
		})
	if err != nil {
		return err
	}
	base := "/projects"
	if q != "" {
		base += "?q=" + url.QueryEscape(q)
	}
	return c.ok("projects", "Projects", projectsData{
		Query: q, Projects: list, Pager: newPager(base, start, pageSize, more),
		CanCreate: c.signedIn() && c.s.Auth.CanCreateProject(c.ctx, c.p),
	})
}

func (c *call) createProject() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	p, err := c.s.Accounts.CreateProject(c.ctx, c.actor(), accounts.NewProject{
		Key: c.form("key"), Name: c.form("name"), Description: c.form("description"), Public: c.form("public") == "on",
	})
	if problem.Is(err, problem.Forbidden) {
		return problem.New(problem.Forbidden, "you may not create projects")
	}
	if err != nil {
		return err
	}
	return c.redirect(projectURL(p.Key))
}

type projectData struct {
	Project  *store.Project
	Repos    []store.Repository
	Pager    pager
	CanWrite bool
}

func (c *call) projectPage() error {
	key := c.r.PathValue("key")
	proj, err := c.s.Store.ProjectByKey(c.ctx, key)
	if err != nil {
		return hide(err)
	}
	// As in the REST API: reading the project shows all its repositories;
	// without that, the repositories one may read individually (granted
	// or public) are shown, and a project with none is not found.
	projErr := c.authorize(auth.Resource{Project: proj}, auth.Read)
	if projErr != nil && !problem.Is(projErr, problem.NotFound) && !problem.Is(projErr, problem.Unauthenticated) {
		return projErr
	}
	start := c.start()
	list, more, err := visiblePage(start, pageSize,
		func(p store.Page) ([]store.Repository, error) { return c.s.Store.ListRepos(c.ctx, proj.ID, p) },
		func(r *store.Repository) (bool, error) {
			if projErr == nil {
				return true, nil
			}
			return c.canSee(auth.Resource{Repo: r, Project: proj})
		})
	if err != nil {
		return err
	}
	if projErr != nil && len(list) == 0 {
		return notFound()
	}
	return c.ok("project", proj.Name, projectData{
		Project: proj, Repos: list, Pager: newPager(projectURL(proj.Key), start, pageSize, more),
		CanWrite: c.can(auth.Resource{Project: proj}, auth.Write),
	})
}

func (c *call) createRepo() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	proj, err := c.project(auth.Read)
	if err != nil {
		return err
	}
	r, err := c.s.Accounts.CreateRepository(c.ctx, c.actor(), proj, accounts.NewRepository{
		Name: c.form("name"), Description: c.form("description"), Public: c.form("public") == "on", DefaultBranch: c.form("branch"),
	})
	if err != nil {
		return err
	}
	return c.redirect(repoURL(r))
}

// repoView is what every repository page shows above its content.
type repoView struct {
	Project   *store.Project
	Repo      *store.Repository
	Tab       string
	At        string // the revision as the user named it ("" = default branch)
	AtLabel   string
	Commit    string // the resolved commit id
	CanWrite  bool
	CanAdmin  bool
	CloneHTTP string
	CloneSSH  string
	Pulls     bool
}

func (c *call) repoView(proj *store.Project, r *store.Repository, tab string) repoView {
	res := auth.Resource{Repo: r, Project: proj}
	v := repoView{Project: proj, Repo: r, Tab: tab, At: c.query("at"),
		CanWrite: c.can(res, auth.Write), CanAdmin: c.can(res, auth.Admin), Pulls: c.s.pullsEnabled()}
	v.AtLabel = strings.TrimPrefix(strings.TrimPrefix(v.At, "refs/heads/"), "refs/tags/")
	if v.AtLabel == "" {
		v.AtLabel = r.DefaultBranch
	} else if isHexish(v.AtLabel) && len(v.AtLabel) > 11 {
		v.AtLabel = v.AtLabel[:11]
	}
	base := c.s.BaseURL
	if base == "" {
		scheme := "http"
		if isHTTPS(c.r) {
			scheme = "https"
		}
		base = scheme + "://" + c.r.Host
	}
	v.CloneHTTP = base + "/scm/" + strings.ToLower(proj.Key) + "/" + r.Slug + ".git"
	if c.s.SSHBaseURL != "" {
		v.CloneSSH = c.s.SSHBaseURL + "/" + strings.ToLower(proj.Key) + "/" + r.Slug + ".git"
	}
	return v
}

type repoHomeData struct {
	repoView
	Path       string // always "": the root, for the shared listing template
	Empty      bool
	Entries    []repo.TreeEntry
	More       bool
	Readme     template.HTML
	ReadmeName string
	ReadmeCut  bool
	Last       *repo.Commit
}

func (c *call) repoHome() error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	v := c.repoView(proj, r, "source")
	data := repoHomeData{repoView: v}
	sha, err := c.revision(r, v.At)
	if err != nil {
		if v.At == "" && problem.Is(err, problem.NotFound) {
			// The default branch does not exist yet: an empty repository.
			data.Empty = true
			return c.ok("repo", r.Name, data)
		}
		return err
	}
	data.Commit = sha
	entries, err := c.s.Repos.Tree(c.ctx, r.ID, sha, "")
	if err != nil {
		return err
	}
	sortTree(entries)
	if len(entries) > treePageSize {
		entries, data.More = entries[:treePageSize], true
	}
	data.Entries = entries
	if commits, err := c.s.Repos.Log(c.ctx, r.ID, sha, "", 0, 1); err == nil && len(commits) == 1 {
		data.Last = &commits[0]
	} else if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type == "FILE" && isReadme(e.Path) {
			body, _, cut, err := c.s.Repos.Blob(c.ctx, r.ID, sha, e.Path, maxReadmeBytes)
			if err != nil {
				return err
			}
			data.ReadmeName, data.ReadmeCut = e.Path, cut
			if isMarkdown(e.Path) {
				data.Readme = renderMarkdown(body)
			} else {
				data.Readme = template.HTML("<pre>" + template.HTMLEscapeString(string(body)) + "</pre>")
			}
			break
		}
	}
	return c.ok("repo", r.Name, data)
}

func isReadme(name string) bool {
	base := strings.ToLower(name)
	return base == "readme" || base == "readme.md" || base == "readme.markdown" || base == "readme.txt"
}

// sortTree puts directories first, then files, each by name.
func sortTree(entries []repo.TreeEntry) {
	slices.SortStableFunc(entries, func(a, b repo.TreeEntry) int {
		da, db := a.Type == "DIRECTORY", b.Type == "DIRECTORY"
		if da != db {
			if da {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
}

// crumb is one element of the path breadcrumbs.
type crumb struct {
	Name, Path string
}

func crumbs(p string) []crumb {
	if p == "" {
		return nil
	}
	var out []crumb
	parts := strings.Split(p, "/")
	for i, s := range parts {
		out = append(out, crumb{Name: s, Path: strings.Join(parts[:i+1], "/")})
	}
	return out
}

type treeData struct {
	repoView
	Path    string
	Parent  string
	Crumbs  []crumb
	Entries []repo.TreeEntry
	Pager   pager
}

type blobData struct {
	repoView
	Path     string
	Crumbs   []crumb
	Size     int64
	TooLarge bool
	Binary   bool
	Image    bool
	Lines    []codeLine
	Markdown template.HTML
	Rendered bool // showing rendered Markdown rather than source
}

// browse shows a directory listing or a file at a revision.
func (c *call) browse() error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	v := c.repoView(proj, r, "source")
	sha, err := c.revision(r, v.At)
	if err != nil {
		return err
	}
	v.Commit = sha
	p := strings.Trim(c.r.PathValue("path"), "/")
	if p != "" {
		data, size, cut, err := c.s.Repos.Blob(c.ctx, r.ID, sha, p, maxViewBytes)
		switch {
		case err == nil:
			return c.blob(v, p, data, size, cut)
		case !problem.Is(err, problem.Invalid):
			return hide(err)
		}
		// Not a file: a directory, listed below.
	}
	entries, err := c.s.Repos.Tree(c.ctx, r.ID, sha, p)
	if err != nil {
		return hide(err)
	}
	sortTree(entries)
	start := c.start()
	if start > len(entries) {
		start = len(entries)
	}
	end := min(len(entries), start+treePageSize)
	parent := ""
	if i := strings.LastIndex(p, "/"); i > 0 {
		parent = p[:i]
	}
	return c.ok("tree", r.Name+": "+p, treeData{
		repoView: v, Path: p, Parent: parent, Crumbs: crumbs(p), Entries: entries[start:end],
		Pager: newPager(browseURL(r, v.At, p), start, treePageSize, end < len(entries)),
	})
}

func (c *call) blob(v repoView, p string, data []byte, size int64, cut bool) error {
	d := blobData{repoView: v, Path: p, Crumbs: crumbs(p), Size: size}
	switch {
	case cut:
		d.TooLarge = true
	case isBinary(data):
		d.Binary = true
		d.Image = inlineImageType(p) != ""
	case isMarkdown(p) && c.query("view") != "source":
		d.Markdown, d.Rendered = renderMarkdown(data), true
	default:
		d.Lines = c.s.highlights.lines(p, data)
	}
	return c.ok("blob", v.Repo.Name+": "+p, d)
}

// inlineImageType is the content type raster images are served with
// inline. SVG is not among them: it can carry script.
func inlineImageType(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".gif":
		return "image/gif"
	case ".webp":
		return "image/webp"
	}
	return ""
}

// raw serves a file's bytes so that it can never act as a page of this
// site: text (including HTML and SVG) as text/plain, raster images as
// themselves, everything else as a download; always with nosniff and a
// CSP that sandboxes the response.
func (c *call) raw() error {
	_, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	sha, err := c.revision(r, c.query("at"))
	if err != nil {
		return err
	}
	p := strings.Trim(c.r.PathValue("path"), "/")
	head, _, _, err := c.s.Repos.Blob(c.ctx, r.ID, sha, p, 8000)
	if err != nil {
		return hide(err)
	}
	h := c.w.Header()
	name := path.Base(p)
	switch ct := inlineImageType(p); {
	case ct != "":
		h.Set("Content-Type", ct)
	case !isBinary(head):
		h.Set("Content-Type", "text/plain; charset=utf-8")
	default:
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "private, no-cache")
	c.wrote = true
	c.w.WriteHeader(http.StatusOK)
	return c.s.Repos.WriteBlob(c.ctx, r.ID, sha, p, c.w)
}

type commitsData struct {
	repoView
	Commits []repo.Commit
	Pager   pager
	Empty   bool
}

func (c *call) commits() error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	v := c.repoView(proj, r, "commits")
	sha, err := c.revision(r, v.At)
	if err != nil {
		if v.At == "" && problem.Is(err, problem.NotFound) {
			return c.ok("commits", r.Name+": commits", commitsData{repoView: v, Empty: true})
		}
		return err
	}
	v.Commit = sha
	start := c.start()
	list, err := c.s.Repos.Log(c.ctx, r.ID, sha, "", start, commitPageSize+1)
	if err != nil {
		return err
	}
	more := len(list) > commitPageSize
	if more {
		list = list[:commitPageSize]
	}
	return c.ok("commits", r.Name+": commits", commitsData{repoView: v, Commits: list,
		Pager: newPager(commitsURL(r, v.At), start, commitPageSize, more)})
}

type commitData struct {
	repoView
	C         *repo.Commit
	Files     []diffFile
	Stats     []repo.FileStat
	StatsMore bool
	Cut       bool
	Split     bool
	ViewURL   string
}

func (c *call) commit() error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	v := c.repoView(proj, r, "commits")
	sha, err := c.revision(r, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	v.Commit, v.At = sha, sha
	v.AtLabel = shortID(sha)
	cm, err := c.s.Repos.Commit(c.ctx, r.ID, sha)
	if err != nil {
		return err
	}
	stats, statsMore, err := c.s.Repos.DiffStat(c.ctx, r.ID, "", sha, 1000)
	if err != nil {
		return err
	}
	text, cut, err := c.s.Repos.Diff(c.ctx, r.ID, "", sha, "", maxDiffBytes)
	if err != nil {
		return err
	}
	files, linesCut := parseDiff(text, maxDiffLines)
	if err := c.markTooLarge(r.ID, "", sha, files); err != nil {
		return err
	}
	if cut && len(files) > 0 {
		// The last file was cut mid-way.
		files[len(files)-1].TooLarge = true
	}
	split := c.query("view") == "split"
	viewURL := commitURL(r, sha)
	if !split {
		viewURL += "?view=split"
	}
	return c.ok("commit", r.Name+": "+firstLine(cm.Message), commitData{repoView: v, C: cm, Files: files,
		Stats: stats, StatsMore: statsMore, Cut: cut || linesCut, Split: split, ViewURL: viewURL})
}

type refsData struct {
	repoView
	Kind   string
	Filter string
	Refs   []repo.Ref
	Pager  pager
}

func (c *call) branches() error { return c.refs("heads", "branches") }
func (c *call) tags() error     { return c.refs("tags", "tags") }

func (c *call) refs(kind, tab string) error {
	proj, r, err := c.repo(auth.Read)
	if err != nil {
		return err
	}
	v := c.repoView(proj, r, tab)
	filter := strings.TrimSpace(c.query("q"))
	if len(filter) > 255 {
		filter = filter[:255]
	}
	start := c.start()
	refs, total, err := c.s.Repos.Refs(c.ctx, r.ID, kind, filter, start, refsPageSize)
	if err != nil {
		return err
	}
	base := repoURL(r) + "/" + tab
	if filter != "" {
		base += "?q=" + url.QueryEscape(filter)
	}
	return c.ok("refs", r.Name+": "+tab, refsData{repoView: v, Kind: tab, Filter: filter, Refs: refs,
		Pager: newPager(base, start, refsPageSize, start+len(refs) < total)})
}

func (c *call) help() error { return c.ok("help", "Keyboard shortcuts", nil) }
