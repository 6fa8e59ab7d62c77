package api

import (
	"bytes"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Commits, files and archives. Every revision a caller names goes through
// resolveRev (exists, reachable from this repository's refs), and only the
// resulting commit id reaches the repo helpers; every path goes through
// cleanRepoPath first.

type personJSON struct {
	Name         string `json:"name"`
	EmailAddress string `json:"emailAddress"`
}

type minimalCommitJSON struct {
	ID        string `json:"id"`
	DisplayID string `json:"displayId"`
}

type commitJSON struct {
	ID                 string              `json:"id"`
	DisplayID          string              `json:"displayId"`
	Author             personJSON          `json:"author"`
	AuthorTimestamp    int64               `json:"authorTimestamp"`
	Committer          personJSON          `json:"committer"`
	CommitterTimestamp int64               `json:"committerTimestamp"`
	Message            string              `json:"message"`
	Parents            []minimalCommitJSON `json:"parents"`
}

func commitOf(c repo.Commit) commitJSON {
	out := commitJSON{
		ID: c.ID, DisplayID: c.DisplayID,
		Author:          personJSON{Name: c.Author.Name, EmailAddress: c.Author.Email},
		AuthorTimestamp: millis(c.Author.Time),
		Committer:       personJSON{Name: c.Committer.Name, EmailAddress: c.Committer.Email},
		// Bitbucket's message has no trailing newline.
		CommitterTimestamp: millis(c.Committer.Time), Message: strings.TrimRight(c.Message, "\n"),
		Parents: make([]minimalCommitJSON, len(c.Parents)),
	}
	for i, p := range c.Parents {
		out.Parents[i] = minimalCommitJSON{ID: p, DisplayID: p[:min(11, len(p))]}
	}
	return out
}

// gitProbe is how many rows to ask a repo helper for: one more than the
// page to learn whether another page exists, within the helpers' cap.
func gitProbe(pg store.Page) int { return min(pg.Limit+1, repo.MaxPageLimit) }

// gitPage is newPage for rows fetched with gitProbe. At the cap the probe
// row cannot be asked for, so a full page of 1000 says "maybe more".
func gitPage[T any](rows []T, pg store.Page) pageJSON[T] {
	p := newPage(rows, pg)
	if pg.Limit >= repo.MaxPageLimit && len(rows) >= repo.MaxPageLimit {
		next := pg.Start + len(p.Values)
		p.IsLastPage, p.NextPageStart = false, &next
	}
	return p
}

// listCommits is Bitbucket's commits resource: until (default: the
// default branch), optionally excluding what since reaches, optionally
// only commits touching path.
func (c *call) listCommits() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	until, _, err := c.atOrDefault(r, "until")
	if err != nil {
		return err
	}
	p, err := cleanRepoPath("path", c.query("path"))
	if err != nil {
		return err
	}
	var commits []repo.Commit
	if since := c.query("since"); since != "" {
		if p != "" {
			return problem.New(problem.Invalid, "since and path cannot be combined")
		}
		sinceSHA, err := c.resolveRev(r, "since", since)
		if err != nil {
			return err
		}
		commits, err = c.s.Repos.Compare(c.ctx, r.ID, sinceSHA, until, pg.Start, gitProbe(pg))
		if err != nil {
			return err
		}
	} else {
		commits, err = c.s.Repos.Log(c.ctx, r.ID, until, p, pg.Start, gitProbe(pg))
		if err != nil {
			return err
		}
	}
	return c.json(mapPage(gitPage(commits, pg), commitOf))
}

func (c *call) getCommit() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	sha, err := c.resolveRev(r, "commitId", c.path("commitId"))
	if err != nil {
		return err
	}
	commit, err := c.s.Repos.Commit(c.ctx, r.ID, sha)
	if err != nil {
		return err
	}
	return c.json(commitOf(*commit))
}

// compareCommits is Bitbucket's compare/commits: the commits reachable
// from "from" but not from "to" (what merging from into to would bring).
func (c *call) compareCommits() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	from, err := c.resolveRev(r, "from", c.query("from"))
	if err != nil {
		return err
	}
	to, err := c.resolveRev(r, "to", c.query("to"))
	if err != nil {
		return err
	}
	// repo.Compare(a, b) lists what b has and a lacks.
	commits, err := c.s.Repos.Compare(c.ctx, r.ID, to, from, pg.Start, gitProbe(pg))
	if err != nil {
		return err
	}
	return c.json(mapPage(gitPage(commits, pg), commitOf))
}

// Diff bounds. Bitbucket stops diffs at 10 000 lines (page.max.diff.lines);
// the byte cap keeps one request's git output and JSON in memory small.
const (
	maxDiffLines = 10_000
	maxDiffBytes = 4 << 20
)

type diffResponse struct {
	FromHash     string     `json:"fromHash"`
	ToHash       string     `json:"toHash"`
	ContextLines int        `json:"contextLines"`
	Whitespace   string     `json:"whitespace"`
	Diffs        []diffJSON `json:"diffs"`
	Truncated    bool       `json:"truncated"`
}

func (c *call) writeDiff(r *store.Repository, from, to, p string) error {
	text, cut, err := c.s.Repos.Diff(c.ctx, r.ID, from, to, p, maxDiffBytes)
	if err != nil {
		return err
	}
	diffs, linesCut := parseDiff(text, maxDiffLines)
	if paths := binaryPaths(diffs); len(paths) > 0 {
		big, err := c.s.Repos.DiffTooLarge(c.ctx, r.ID, from, to, paths)
		if err != nil {
			return err
		}
		markTooLarge(diffs, big)
	}
	// git diff-tree's default context is three lines.
	return c.json(diffResponse{FromHash: from, ToHash: to, ContextLines: 3, Whitespace: "SHOW",
		Diffs: diffs, Truncated: cut || linesCut})
}

// compareDiff is Bitbucket's compare/diff between to (source) and from
// (destination), optionally limited to one path.
func (c *call) compareDiff() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	from, err := c.resolveRev(r, "from", c.query("from"))
	if err != nil {
		return err
	}
	to, err := c.resolveRev(r, "to", c.query("to"))
	if err != nil {
		return err
	}
	p, err := c.diffPath()
	if err != nil {
		return err
	}
	return c.writeDiff(r, to, from, p)
}

// commitDiff is the diff a commit introduces (against since, or its first
// parent).
func (c *call) commitDiff() error {
	_, r, err := c.repoFor(auth.Read)
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
	p, err := c.diffPath()
	if err != nil {
		return err
	}
	return c.writeDiff(r, since, sha, p)
}

func (c *call) diffPath() (string, error) {
	p := c.path("path")
	if p == "" {
		p = c.query("path")
	}
	return cleanRepoPath("path", p)
}

// pathJSON is Bitbucket's path object.
type pathJSON struct {
	Components []string `json:"components"`
	Parent     string   `json:"parent"`
	Name       string   `json:"name"`
	Extension  string   `json:"extension,omitempty"`
	ToString   string   `json:"toString"`
}

func pathOf(p string) pathJSON {
	if p == "" {
		return pathJSON{Components: []string{}}
	}
	comps := strings.Split(p, "/")
	name := comps[len(comps)-1]
	out := pathJSON{Components: comps, Parent: strings.Join(comps[:len(comps)-1], "/"), Name: name, ToString: p}
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		out.Extension = name[i+1:]
	}
	return out
}

type childJSON struct {
	Path      pathJSON `json:"path"`
	ContentID string   `json:"contentId"`
	Type      string   `json:"type"`
	Size      *int64   `json:"size,omitempty"`
}

type treeResponse struct {
	Path     pathJSON            `json:"path"`
	Revision string              `json:"revision"`
	Children pageJSON[childJSON] `json:"children"`
}

type lineJSON struct {
	Text string `json:"text"`
}

type fileResponse struct {
	Lines         []lineJSON `json:"lines"`
	Start         int        `json:"start"`
	Size          int        `json:"size"`
	Limit         int        `json:"limit"`
	IsLastPage    bool       `json:"isLastPage"`
	NextPageStart *int       `json:"nextPageStart,omitempty"`
	Binary        bool       `json:"binary,omitempty"`
	// Truncated says the file is larger than browse shows; raw serves it
	// whole.
	Truncated bool `json:"truncated,omitempty"`
}

// maxBrowseBytes is the most of one file browse reads into memory: a page
// of lines is cut from it. Larger files are for raw.
const maxBrowseBytes = 5 << 20

// browse lists a directory or pages the lines of a file.
func (c *call) browse() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	p, err := cleanRepoPath("path", c.path("path"))
	if err != nil {
		return err
	}
	sha, at, err := c.atOrDefault(r, "at")
	if err != nil {
		return err
	}
	if typeOnly, err := c.boolQuery("type", false); err != nil {
		return err
	} else if typeOnly {
		return c.pathType(r.ID, sha, p)
	}
	entries, err := c.s.Repos.Tree(c.ctx, r.ID, sha, p)
	// With the path and revision already validated, Invalid from Tree
	// means the path is not a directory: it is a file.
	if problem.Is(err, problem.Invalid) && p != "" {
		return c.browseFile(r, sha, p, pg)
	}
	if err != nil {
		return err
	}
	// Directories first, then files, each by name, as Bitbucket lists them.
	slices.SortStableFunc(entries, func(a, b repo.TreeEntry) int {
		if (a.Type == "DIRECTORY") != (b.Type == "DIRECTORY") {
			if a.Type == "DIRECTORY" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	children := mapPage(slicePage(entries, pg), func(e repo.TreeEntry) childJSON {
		ch := childJSON{Path: pathOf(e.Path), ContentID: e.ID, Type: e.Type}
		if e.Type == "FILE" {
			size := e.Size
			ch.Size = &size
		}
		return ch
	})
	return c.json(treeResponse{Path: pathOf(p), Revision: at, Children: children})
}

func (c *call) browseFile(r *store.Repository, sha, p string, pg store.Page) error {
	data, _, truncated, err := c.s.Repos.Blob(c.ctx, r.ID, sha, p, maxBrowseBytes)
	if err != nil {
		return err
	}
	out := fileResponse{Start: pg.Start, Limit: pg.Limit, Lines: []lineJSON{}, Truncated: truncated}
	if isBinary(data) {
		out.Binary, out.IsLastPage = true, true
		return c.json(out)
	}
	var lines []string
	if len(data) > 0 {
		lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	}
	page := slicePage(lines, pg)
	out.Size, out.IsLastPage, out.NextPageStart = page.Size, page.IsLastPage, page.NextPageStart
	for _, l := range page.Values {
		out.Lines = append(out.Lines, lineJSON{Text: strings.TrimSuffix(l, "\r")})
	}
	return c.json(out)
}

// isBinary is git's own heuristic: a NUL byte in the first 8000 bytes.
func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0
}

// raw serves a file's bytes. Nothing a user committed is ever rendered by
// the browser in this origin: text is served as text/plain, anything else
// as an octet-stream download, with nosniff and a sandboxing CSP.
func (c *call) raw() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	p, err := cleanRepoPath("path", c.path("path"))
	if err != nil {
		return err
	}
	if p == "" {
		return problem.New(problem.Invalid, "path is required")
	}
	sha, _, err := c.atOrDefault(r, "at")
	if err != nil {
		return err
	}
	sw := &sniffWriter{w: c.w, name: path.Base(p)}
	if err := c.s.Repos.WriteBlob(c.ctx, r.ID, sha, p, sw); err != nil {
		return err
	}
	return sw.flush()
}

// sniffWriter holds back the first bytes of a file until it knows whether
// the file is text, then sets the headers and streams the rest.
type sniffWriter struct {
	w       http.ResponseWriter
	name    string
	buf     []byte
	decided bool
}

// sniffLen is what http.DetectContentType looks at.
const sniffLen = 512

func (s *sniffWriter) Write(b []byte) (int, error) {
	if s.decided {
		return s.w.Write(b)
	}
	s.buf = append(s.buf, b...)
	if len(s.buf) < sniffLen {
		return len(b), nil
	}
	if err := s.flush(); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s *sniffWriter) flush() error {
	if s.decided {
		return nil
	}
	s.decided = true
	h := s.w.Header()
	ct := http.DetectContentType(s.buf)
	if strings.HasPrefix(ct, "text/") && !isBinary(s.buf) {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": s.name}))
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	s.w.WriteHeader(http.StatusOK)
	_, err := s.w.Write(s.buf)
	s.buf = nil
	return err
}

// archive streams a zip or tar(.gz) of a revision.
func (c *call) archive() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	format := c.query("format")
	if format == "" {
		format = "zip"
	}
	var ctype, ext string
	switch format {
	case "zip":
		ctype, ext = "application/zip", "zip"
	case "tar":
		ctype, ext = "application/x-tar", "tar"
	case "tar.gz", "tgz":
		ctype, ext = "application/gzip", format
	default:
		return problem.New(problem.Invalid, "format must be one of zip, tar, tar.gz, tgz")
	}
	prefix, err := archivePrefix(c.query("prefix"))
	if err != nil {
		return err
	}
	sha, _, err := c.atOrDefault(r, "at")
	if err != nil {
		return err
	}
	h := c.w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment",
		map[string]string{"filename": r.Slug + "-" + sha[:min(11, len(sha))] + "." + ext}))
	h.Set("X-Content-Type-Options", "nosniff")
	hw := &holdWriter{w: c.w}
	return hw.finish(c.s.Repos.Archive(c.ctx, r.ID, sha, format, prefix, hw))
}
