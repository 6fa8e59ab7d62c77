package api_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
)

type refJSON struct {
	ID           string `json:"id"`
	DisplayID    string `json:"displayId"`
	Type         string `json:"type"`
	LatestCommit string `json:"latestCommit"`
	IsDefault    bool   `json:"isDefault"`
}

type commitJSON struct {
	ID              string `json:"id"`
	DisplayID       string `json:"displayId"`
	Message         string `json:"message"`
	AuthorTimestamp int64  `json:"authorTimestamp"`
	Author          struct {
		Name         string `json:"name"`
		EmailAddress string `json:"emailAddress"`
	} `json:"author"`
	Committer struct {
		Name string `json:"name"`
	} `json:"committer"`
	Parents []struct {
		ID string `json:"id"`
	} `json:"parents"`
}

// contentEnv is a repository with three commits on main; the last adds
// README.md, dir/sub.txt, page.html, blob.bin.
func contentEnv(t *testing.T) (*env, repoJSON, string) {
	e := newEnv(t)
	e.project("PRJ", false)
	r := e.repo("PRJ", "repo")
	work := e.workTree(map[string]string{
		"README.md":   "line one\nline two\nline three\n",
		"dir/sub.txt": "sub\n",
		"page.html":   "<html><body><script>alert(1)</script></body></html>\n",
		"blob.bin":    "\x00\x01\x02binary\x00",
	}, 3)
	e.push(work, r.ID, "main")
	return e, r, work
}

func TestBranchesAndTags(t *testing.T) {
	t.Parallel()
	e, r, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	head := e.git(work, "rev-parse", "HEAD")
	first := e.git(work, "rev-parse", "HEAD~2")

	var branches page[refJSON]
	e.must(200, "GET", base+"/branches", e.admin, nil).json(t, &branches)
	if branches.Size != 1 || branches.Values[0].ID != "refs/heads/main" || !branches.Values[0].IsDefault ||
		branches.Values[0].LatestCommit != head || branches.Values[0].Type != "BRANCH" {
		t.Fatalf("branches %+v", branches)
	}

	// Creating a branch goes through the hooks and bumps the generation.
	gen := e.generation(r.ID)
	var b refJSON
	e.must(200, "POST", base+"/branches", e.admin, map[string]string{"name": "feature/x", "startPoint": first}).json(t, &b)
	if b.ID != "refs/heads/feature/x" || b.DisplayID != "feature/x" || b.LatestCommit != first {
		t.Fatalf("created branch %+v", b)
	}
	if g := e.generation(r.ID); g <= gen {
		t.Fatalf("generation %d after branch create, was %d", g, gen)
	}
	if got := e.git(work, "ls-remote", e.repos.Path(r.ID), "refs/heads/feature/x"); !strings.HasPrefix(got, first) {
		t.Fatalf("branch on disk: %q", got)
	}
	e.must(409, "POST", base+"/branches", e.admin, map[string]string{"name": "feature/x", "startPoint": "main"})
	e.must(409, "POST", base+"/branches", e.admin, map[string]string{"name": "feature/x/y", "startPoint": "main"})
	e.must(200, "POST", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "refs/heads/other", "startPoint": "refs/heads/main"})

	e.must(200, "GET", base+"/branches?filterText=FEAT", e.admin, nil).json(t, &branches)
	if branches.Size != 1 || branches.Values[0].DisplayID != "feature/x" || branches.Values[0].IsDefault {
		t.Fatalf("filtered branches %+v", branches)
	}
	e.must(200, "GET", base+"/branches?limit=1", e.admin, nil).json(t, &branches)
	if branches.Size != 1 || branches.IsLastPage || branches.NextPageStart == nil || *branches.NextPageStart != 1 {
		t.Fatalf("paged branches %+v", branches)
	}

	// Default branch.
	var def refJSON
	e.must(200, "GET", base+"/default-branch", e.admin, nil).json(t, &def)
	if def.ID != "refs/heads/main" || def.LatestCommit != head || !def.IsDefault {
		t.Fatalf("default branch %+v", def)
	}
	gen = e.generation(r.ID)
	e.must(204, "PUT", base+"/default-branch", e.admin, map[string]string{"id": "refs/heads/other"})
	e.must(200, "GET", base+"/default-branch", e.admin, nil).json(t, &def)
	if def.DisplayID != "other" {
		t.Fatalf("default branch after set %+v", def)
	}
	if g := e.generation(r.ID); g <= gen {
		t.Fatalf("generation not bumped by default-branch change")
	}
	// The default branch cannot be deleted.
	e.must(409, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "other"})
	e.must(204, "PUT", base+"/default-branch", e.admin, map[string]string{"id": "main"})

	// Deleting: endPoint must match, dryRun changes nothing.
	e.must(409, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "feature/x", "endPoint": head})
	e.must(204, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]any{"name": "feature/x", "dryRun": true})
	gen = e.generation(r.ID)
	e.must(204, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "refs/heads/feature/x", "endPoint": first})
	if g := e.generation(r.ID); g <= gen {
		t.Fatalf("generation %d after branch delete, was %d", g, gen)
	}
	e.must(404, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "feature/x"})
	if got := e.git(work, "ls-remote", e.repos.Path(r.ID), "refs/heads/feature/x"); got != "" {
		t.Fatalf("deleted branch still on disk: %q", got)
	}

	// Tags: lightweight and annotated.
	var tag refJSON
	e.must(200, "POST", base+"/tags", e.admin, map[string]string{"name": "v1", "startPoint": first}).json(t, &tag)
	if tag.ID != "refs/tags/v1" || tag.Type != "TAG" || tag.LatestCommit != first {
		t.Fatalf("tag %+v", tag)
	}
	e.must(200, "POST", "/rest/git/1.0/projects/PRJ/repos/repo/tags", e.admin, map[string]string{"name": "v2", "startPoint": "main", "message": "Release 2\n\nnotes"})
	e.must(409, "POST", base+"/tags", e.admin, map[string]string{"name": "v1", "startPoint": "main"})
	if typ := e.git(work, "--git-dir="+e.repos.Path(r.ID), "cat-file", "-t", "refs/tags/v2"); typ != "tag" {
		t.Fatalf("v2 is a %s, want an annotated tag", typ)
	}
	if msg := e.git(work, "--git-dir="+e.repos.Path(r.ID), "cat-file", "-p", "refs/tags/v2"); !strings.Contains(msg, "tagger Admin <admin@example.com>") || !strings.Contains(msg, "Release 2") {
		t.Fatalf("tag object:\n%s", msg)
	}
	var tags page[refJSON]
	e.must(200, "GET", base+"/tags", e.admin, nil).json(t, &tags)
	if tags.Size != 2 || tags.Values[1].DisplayID != "v2" || tags.Values[1].LatestCommit != head {
		t.Fatalf("tags %+v", tags)
	}
	gen = e.generation(r.ID)
	e.must(204, "DELETE", base+"/tags/v1", e.admin, nil)
	e.must(204, "DELETE", "/rest/git/1.0/projects/PRJ/repos/repo/tags/v2", e.admin, nil)
	e.must(404, "DELETE", base+"/tags/v1", e.admin, nil)
	if g := e.generation(r.ID); g <= gen {
		t.Fatalf("generation not bumped by tag delete")
	}
	e.must(200, "GET", base+"/tags", e.admin, nil).json(t, &tags)
	if tags.Size != 0 {
		t.Fatalf("tags after delete %+v", tags)
	}
}

func TestCommitsAndCompare(t *testing.T) {
	t.Parallel()
	e, _, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	head := e.git(work, "rev-parse", "HEAD")
	first := e.git(work, "rev-parse", "HEAD~2")

	var commits page[commitJSON]
	e.must(200, "GET", base+"/commits", e.admin, nil).json(t, &commits)
	if commits.Size != 3 || !commits.IsLastPage || commits.Values[0].ID != head {
		t.Fatalf("commits %+v", commits)
	}
	c := commits.Values[0]
	if c.DisplayID != head[:11] || c.Message != "commit 2\n\nbody of commit 2" || c.Author.Name != "Test Author" ||
		c.Author.EmailAddress != "author@example.com" || c.Committer.Name != "Test Committer" ||
		c.AuthorTimestamp != 1767225600000 || len(c.Parents) != 1 {
		t.Fatalf("commit %+v", c)
	}
	e.must(200, "GET", base+"/commits?limit=2", e.admin, nil).json(t, &commits)
	if commits.Size != 2 || commits.IsLastPage || *commits.NextPageStart != 2 {
		t.Fatalf("paged commits %+v", commits)
	}
	e.must(200, "GET", base+"/commits?start=2&limit=2", e.admin, nil).json(t, &commits)
	if commits.Size != 1 || !commits.IsLastPage || commits.Values[0].ID != first {
		t.Fatalf("second page %+v", commits)
	}
	e.must(200, "GET", base+"/commits?path=README.md", e.admin, nil).json(t, &commits)
	if commits.Size != 1 || commits.Values[0].ID != head {
		t.Fatalf("commits touching README.md %+v", commits)
	}
	e.must(200, "GET", base+"/commits?since="+first+"&until=main", e.admin, nil).json(t, &commits)
	if commits.Size != 2 {
		t.Fatalf("commits since first %+v", commits)
	}
	e.must(200, "GET", base+"/commits?until="+first, e.admin, nil).json(t, &commits)
	if commits.Size != 1 {
		t.Fatalf("commits until first %+v", commits)
	}

	var one commitJSON
	e.must(200, "GET", base+"/commits/"+head[:12], e.admin, nil).json(t, &one)
	if one.ID != head {
		t.Fatalf("commit by short id %+v", one)
	}

	// compare/commits: in from, not in to.
	e.must(200, "GET", base+"/compare/commits?from=main&to="+first, e.admin, nil).json(t, &commits)
	if commits.Size != 2 || commits.Values[0].ID != head {
		t.Fatalf("compare %+v", commits)
	}
	e.must(200, "GET", base+"/compare/commits?from="+first+"&to=main", e.admin, nil).json(t, &commits)
	if commits.Size != 0 {
		t.Fatalf("reverse compare %+v", commits)
	}
	e.must(400, "GET", base+"/compare/commits?from=main", e.admin, nil)

	// compare/diff and the commit diff in Bitbucket's structure.
	type diffs struct {
		FromHash, ToHash string
		Truncated        bool
		Diffs            []struct {
			Source, Destination *struct {
				ToString string `json:"toString"`
			}
			Binary bool
			Hunks  []struct {
				SourceLine, SourceSpan, DestinationLine, DestinationSpan int
				Segments                                                 []struct {
					Type  string
					Lines []struct {
						Source, Destination int
						Line                string
					}
				}
			}
		}
	}
	var d diffs
	e.must(200, "GET", base+"/compare/diff?from=main&to="+first, e.admin, nil).json(t, &d)
	files := map[string]bool{}
	for _, f := range d.Diffs {
		if f.Destination != nil {
			files[f.Destination.ToString] = f.Source == nil
		}
	}
	if !files["README.md"] || !files["dir/sub.txt"] || d.Truncated || len(d.Diffs) != 5 {
		t.Fatalf("compare diff files %v in %+v", files, d)
	}
	e.must(200, "GET", base+"/compare/diff/README.md?from=main&to="+first, e.admin, nil).json(t, &d)
	if len(d.Diffs) != 1 || len(d.Diffs[0].Hunks) != 1 {
		t.Fatalf("README diff %+v", d)
	}
	h := d.Diffs[0].Hunks[0]
	if h.DestinationLine != 1 || h.DestinationSpan != 3 || len(h.Segments) != 1 || h.Segments[0].Type != "ADDED" ||
		len(h.Segments[0].Lines) != 3 || h.Segments[0].Lines[1].Line != "line two" || h.Segments[0].Lines[1].Destination != 2 {
		t.Fatalf("README hunk %+v", h)
	}
	e.must(200, "GET", base+"/commits/"+head+"/diff?path=history.txt", e.admin, nil).json(t, &d)
	if len(d.Diffs) != 1 || len(d.Diffs[0].Hunks) != 1 {
		t.Fatalf("commit diff %+v", d)
	}
	segs := d.Diffs[0].Hunks[0].Segments
	if len(segs) != 2 || segs[0].Type != "REMOVED" || segs[0].Lines[0].Line != "version 1" || segs[1].Type != "ADDED" || segs[1].Lines[0].Line != "version 2" {
		t.Fatalf("commit diff segments %+v", segs)
	}
}

func TestBrowseRawArchive(t *testing.T) {
	t.Parallel()
	e, _, work := contentEnv(t)
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	first := e.git(work, "rev-parse", "HEAD~2")

	type child struct {
		Path struct {
			Name     string `json:"name"`
			ToString string `json:"toString"`
		} `json:"path"`
		Type      string `json:"type"`
		ContentID string `json:"contentId"`
		Size      *int64 `json:"size"`
	}
	var tree struct {
		Path     struct{ ToString string } `json:"path"`
		Revision string                    `json:"revision"`
		Children page[child]               `json:"children"`
	}
	e.must(200, "GET", base+"/browse", e.admin, nil).json(t, &tree)
	var names []string
	for _, c := range tree.Children.Values {
		names = append(names, c.Path.Name+":"+c.Type)
	}
	if got := strings.Join(names, " "); got != "dir:DIRECTORY README.md:FILE blob.bin:FILE history.txt:FILE page.html:FILE" {
		t.Fatalf("root listing %q", got)
	}
	if tree.Children.Values[1].Size == nil || *tree.Children.Values[1].Size != 29 || tree.Children.Values[0].Size != nil {
		t.Fatalf("sizes %+v", tree.Children.Values)
	}
	e.must(200, "GET", base+"/browse/dir?at=main", e.admin, nil).json(t, &tree)
	if tree.Children.Size != 1 || tree.Children.Values[0].Path.ToString != "sub.txt" || tree.Revision != "main" || tree.Path.ToString != "dir" {
		t.Fatalf("dir listing %+v", tree)
	}
	e.must(200, "GET", base+"/browse?limit=2&start=1", e.admin, nil).json(t, &tree)
	if tree.Children.Size != 2 || tree.Children.IsLastPage || tree.Children.Values[0].Path.Name != "README.md" {
		t.Fatalf("paged listing %+v", tree.Children)
	}
	e.must(404, "GET", base+"/browse/dir?at="+first, e.admin, nil)

	type file struct {
		Lines      []struct{ Text string } `json:"lines"`
		Size       int                     `json:"size"`
		IsLastPage bool                    `json:"isLastPage"`
		Binary     bool                    `json:"binary"`
	}
	var f file
	e.must(200, "GET", base+"/browse/README.md", e.admin, nil).json(t, &f)
	if f.Size != 3 || !f.IsLastPage || f.Lines[2].Text != "line three" {
		t.Fatalf("file %+v", f)
	}
	e.must(200, "GET", base+"/browse/README.md?start=1&limit=1", e.admin, nil).json(t, &f)
	if f.Size != 1 || f.IsLastPage || f.Lines[0].Text != "line two" {
		t.Fatalf("file page %+v", f)
	}
	e.must(200, "GET", base+"/browse/blob.bin", e.admin, nil).json(t, &f)
	if !f.Binary || len(f.Lines) != 0 {
		t.Fatalf("binary file %+v", f)
	}

	// Raw: text is text/plain, HTML too, binary is a download; never sniffed.
	raw := e.must(200, "GET", base+"/raw/README.md", e.admin, nil)
	if string(raw.body) != "line one\nline two\nline three\n" || raw.header.Get("Content-Type") != "text/plain; charset=utf-8" ||
		raw.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("raw text: %q %v", raw.body, raw.header)
	}
	raw = e.must(200, "GET", base+"/raw/page.html", e.admin, nil)
	if raw.header.Get("Content-Type") != "text/plain; charset=utf-8" || raw.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("raw html served as %v", raw.header)
	}
	raw = e.must(200, "GET", base+"/raw/blob.bin", e.admin, nil)
	if raw.header.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(raw.header.Get("Content-Disposition"), "attachment") ||
		string(raw.body) != "\x00\x01\x02binary\x00" {
		t.Fatalf("raw binary: %q %v", raw.body, raw.header)
	}
	e.must(400, "GET", base+"/raw/dir", e.admin, nil)
	e.must(404, "GET", base+"/raw/README.md?at="+first, e.admin, nil)

	// Archives in every format, with and without a prefix.
	want := "README.md blob.bin dir/ dir/sub.txt history.txt page.html"
	for _, tt := range []struct{ format, prefix, ctype string }{
		{"", "", "application/zip"},
		{"zip", "pre/fix", "application/zip"},
		{"tar", "", "application/x-tar"},
		{"tar.gz", "p/", "application/gzip"},
		{"tgz", "", "application/gzip"},
	} {
		q := fmt.Sprintf("?format=%s&prefix=%s", tt.format, tt.prefix)
		res := e.must(200, "GET", base+"/archive"+q, e.admin, nil)
		if ct := res.header.Get("Content-Type"); ct != tt.ctype {
			t.Errorf("%s: content type %q", q, ct)
		}
		if cd := res.header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") || !strings.Contains(cd, "repo-") {
			t.Errorf("%s: disposition %q", q, cd)
		}
		prefix := tt.prefix
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		got := archiveNames(t, tt.format, res.body, prefix)
		if got != want {
			t.Errorf("%s: entries %q, want %q", q, got, want)
		}
	}
	res := e.must(200, "GET", base+"/archive?format=tar&at="+first, e.admin, nil)
	if got := archiveNames(t, "tar", res.body, ""); got != "history.txt" {
		t.Errorf("archive at first commit: %q", got)
	}
}

// archiveNames lists an archive's entries with prefix removed (every entry
// must carry it), sorted, ignoring the prefix directories themselves.
func archiveNames(t *testing.T, format string, data []byte, prefix string) string {
	t.Helper()
	var names []string
	add := func(n string) {
		if prefix != "" {
			if !strings.HasPrefix(n, prefix) {
				t.Errorf("entry %q lacks prefix %q", n, prefix)
				return
			}
			n = strings.TrimPrefix(n, prefix)
		}
		if n != "" && !strings.HasSuffix(prefix, n) {
			names = append(names, n)
		}
	}
	switch format {
	case "", "zip":
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("zip: %v", err)
		}
		for _, f := range zr.File {
			add(f.Name)
		}
	default:
		var r io.Reader = bytes.NewReader(data)
		if format != "tar" {
			zr, err := gzip.NewReader(r)
			if err != nil {
				t.Fatalf("gzip: %v", err)
			}
			r = zr
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("tar: %v", err)
			}
			if h.Typeflag == tar.TypeXGlobalHeader {
				continue
			}
			add(h.Name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// TestForkServesOnlyItsOwnObjects: a commit pushed to the origin after the
// fork is readable through the fork's alternates on disk, but the API must
// not serve it from the fork. Likewise a commit only a deleted branch
// reached is no longer served from the repository itself.
func TestForkServesOnlyItsOwnObjects(t *testing.T) {
	t.Parallel()
	e, r, work := contentEnv(t)
	e.project("DST", false)
	e.must(201, "POST", "/rest/api/1.0/projects/PRJ/repos/repo", e.admin, map[string]any{"name": "fork", "project": map[string]string{"key": "DST"}})
	head := e.git(work, "rev-parse", "HEAD")

	// A new commit on a new branch of the origin only.
	e.git(work, "checkout", "-q", "-b", "secret")
	e.git(work, "commit", "-q", "--allow-empty", "-m", "secret work")
	secret := e.git(work, "rev-parse", "HEAD")
	e.push(work, r.ID, "secret")

	const fork = "/rest/api/1.0/projects/DST/repos/fork"
	const origin = "/rest/api/1.0/projects/PRJ/repos/repo"
	e.must(200, "GET", origin+"/commits/"+secret, e.admin, nil)
	e.must(200, "GET", fork+"/commits/"+head, e.admin, nil)
	for _, p := range []string{
		"/commits/" + secret, "/commits/" + secret[:10], "/commits?until=" + secret, "/browse?at=" + secret, "/raw/README.md?at=" + secret,
		"/archive?at=" + secret, "/compare/commits?from=" + secret + "&to=main", "/compare/diff?from=" + secret + "&to=main",
		"/commits/" + secret + "/diff",
	} {
		if res := e.do("GET", fork+p, e.admin, nil); res.status != 404 {
			t.Errorf("fork %s: %d %s", p, res.status, res.body)
		}
	}
	e.must(404, "POST", fork+"/branches", e.admin, map[string]string{"name": "steal", "startPoint": secret})
	e.must(404, "POST", fork+"/tags", e.admin, map[string]string{"name": "steal", "startPoint": secret})

	// In the origin, deleting the branch makes the commit unreachable.
	e.must(204, "DELETE", "/rest/branch-utils/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]string{"name": "secret"})
	e.must(404, "GET", origin+"/commits/"+secret, e.admin, nil)
}
