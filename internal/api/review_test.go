package api_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// reviewWorld is a buildWorld with a few more files on main (one in a
// directory), an annotated tag, a lightweight tag, and a tag whose name
// is a directory of names, in "open" (alice reads it, eve does not).
type reviewWorld struct {
	*buildWorld
	head string
}

func newReviewWorld(t *testing.T) *reviewWorld {
	t.Helper()
	w := &reviewWorld{buildWorld: newBuildWorld(t)}
	w.git("checkout", "-q", "main")
	w.git("config", "user.name", "Tagger")
	w.git("config", "user.email", "tagger@example.com")
	if err := writeFiles(w.work, map[string]string{"docs/guide.md": "guide\n", "docs/api/ref.md": "ref\n", "z.txt": "z\n"}); err != nil {
		t.Fatal(err)
	}
	w.git("add", "-A")
	w.git("commit", "-q", "-m", "docs")
	w.head = w.git("rev-parse", "HEAD")
	w.git("tag", "-a", "-m", "release one", "v1", "HEAD~1")
	w.git("tag", "release/2", "HEAD")
	w.git("tag", "light", "HEAD")
	w.git("push", "-q", w.n.CloneURL("PRJ", "open", "admin", w.n.AdminPassword), "main", "--tags")
	return w
}

type filesPage struct {
	Size          int      `json:"size"`
	IsLastPage    bool     `json:"isLastPage"`
	NextPageStart *int     `json:"nextPageStart"`
	Values        []string `json:"values"`
}

func TestFiles(t *testing.T) {
	w := newReviewWorld(t)
	all := []string{"README", "docs/api/ref.md", "docs/guide.md", "z.txt"}
	for _, path := range []string{openRepo + "/files", openRepo + "/files/", strings.Replace(openRepo, "1.0", "latest", 1) + "/files"} {
		var p filesPage
		w.must(200, w.alice, "GET", path, nil, &p)
		if !slices.Equal(p.Values, all) || !p.IsLastPage {
			t.Fatalf("GET %s: %+v, want %v", path, p, all)
		}
	}
	// Below a directory, relative to it.
	var p filesPage
	w.must(200, w.alice, "GET", openRepo+"/files/docs", nil, &p)
	if !slices.Equal(p.Values, []string{"api/ref.md", "guide.md"}) {
		t.Fatalf("files/docs: %v", p.Values)
	}
	// at names the revision.
	w.must(200, w.alice, "GET", openRepo+"/files?at=refs/heads/feature", nil, &p)
	if !slices.Equal(p.Values, []string{"README", "feature.txt"}) {
		t.Fatalf("files at feature: %v", p.Values)
	}
	// Pages.
	var got []string
	for start := 0; ; {
		w.must(200, w.alice, "GET", fmt.Sprintf("%s/files?limit=3&start=%d", openRepo, start), nil, &p)
		got = append(got, p.Values...)
		if p.IsLastPage {
			break
		}
		start = *p.NextPageStart
	}
	if !slices.Equal(got, all) {
		t.Fatalf("files over pages of 3: %v", got)
	}
	// A file is not a directory; a missing path is not found; a
	// repository eve cannot read does not exist for her.
	if code, body := w.call(w.alice, "GET", openRepo+"/files/z.txt", nil); code != 400 {
		t.Fatalf("files of a file: %d %s", code, body)
	}
	if code, body := w.call(w.alice, "GET", openRepo+"/files/nope", nil); code != 404 {
		t.Fatalf("files of a missing directory: %d %s", code, body)
	}
	if code, body := w.call(w.eve, "GET", openRepo+"/files", nil); code != 404 {
		t.Fatalf("files of an unreadable repository: %d %s", code, body)
	}
	if code, body := w.call(w.alice, "GET", openRepo+"/files?at="+w.private, nil); code != 404 {
		t.Fatalf("files at another repository's commit: %d %s", code, body)
	}
}

func TestGetTag(t *testing.T) {
	w := newReviewWorld(t)
	first := w.git("rev-parse", "HEAD~1")
	type tag struct {
		ID, DisplayID, Type, LatestCommit string
	}
	cases := []struct {
		path string
		want tag
	}{
		{openRepo + "/tags/v1", tag{"refs/tags/v1", "v1", "TAG", first}}, // annotated: the commit, peeled
		{openRepo + "/tags/release/2", tag{"refs/tags/release/2", "release/2", "TAG", w.head}},
		{openRepo + "/tags/light", tag{"refs/tags/light", "light", "TAG", w.head}},
		{strings.Replace(openRepo, "1.0", "latest", 1) + "/tags/light", tag{"refs/tags/light", "light", "TAG", w.head}},
		{"/rest/git/1.0/projects/PRJ/repos/open/tags/light", tag{"refs/tags/light", "light", "TAG", w.head}},
	}
	for _, c := range cases {
		var got tag
		w.must(200, w.alice, "GET", c.path, nil, &got)
		if got != c.want {
			t.Errorf("GET %s: %+v, want %+v", c.path, got, c.want)
		}
	}
	for _, missing := range []string{"v2", "release", "release/2/x", "a..b", "refs/heads/main"} {
		if code, body := w.call(w.alice, "GET", openRepo+"/tags/"+missing, nil); code != 404 {
			t.Errorf("GET tags/%s: %d %s", missing, code, body)
		}
	}
	if code, body := w.call(w.eve, "GET", openRepo+"/tags/light", nil); code != 404 {
		t.Fatalf("a tag of an unreadable repository: %d %s", code, body)
	}
	if code, body := w.call("", "GET", openRepo+"/tags/light", nil); code != 401 {
		t.Fatalf("a tag of a private repository, anonymously: %d %s", code, body)
	}
}

// openFeature opens feature → main in "open" as admin and returns its path.
func (w *reviewWorld) openFeature() string {
	w.t.Helper()
	var pr struct {
		ID int64 `json:"id"`
	}
	w.must(201, w.admin, "POST", openRepo+"/pull-requests", map[string]any{"title": "feature",
		"fromRef": map[string]any{"id": "refs/heads/feature"}, "toRef": map[string]any{"id": "refs/heads/main"}}, &pr)
	return fmt.Sprintf("%s/pull-requests/%d", openRepo, pr.ID)
}

type activity struct {
	Action        string `json:"action"`
	CommentAction string `json:"commentAction"`
	User          *struct {
		Name string `json:"name"`
	} `json:"user"`
	Comment *struct {
		ID       int64  `json:"id"`
		Version  int64  `json:"version"`
		Text     string `json:"text"`
		ParentID int64  `json:"parentId"`
		Author   struct {
			Name string `json:"name"`
		} `json:"author"`
		CreatedDate int64 `json:"createdDate"`
		Comments    []struct {
			Text string `json:"text"`
		} `json:"comments"`
	} `json:"comment"`
	CommentAnchor *struct {
		Path     string `json:"path"`
		Line     int    `json:"line"`
		LineType string `json:"lineType"`
	} `json:"commentAnchor"`
	Participant *struct {
		Status string `json:"status"`
	} `json:"participant"`
	Commit *struct {
		ID string `json:"id"`
	} `json:"commit"`
}

func TestActivitiesInBitbucketShape(t *testing.T) {
	w := newReviewWorld(t)
	pr := w.openFeature()
	var general, inline, reply, gone struct {
		ID int64 `json:"id"`
	}
	w.must(201, w.admin, "POST", pr+"/comments", map[string]any{"text": "general"}, &general)
	w.must(201, w.admin, "POST", pr+"/comments", map[string]any{"text": "inline",
		"anchor": map[string]any{"path": "feature.txt", "line": 1, "lineType": "ADDED", "fileType": "TO"}}, &inline)
	w.must(201, w.alice, "POST", pr+"/comments", map[string]any{"text": "a reply", "parent": map[string]any{"id": inline.ID}}, &reply)
	w.must(200, w.admin, "PUT", fmt.Sprintf("%s/comments/%d", pr, general.ID), map[string]any{"text": "general, edited", "version": 0}, nil)
	w.must(201, w.admin, "POST", pr+"/comments", map[string]any{"text": "soon gone"}, &gone)
	w.must(204, w.admin, "DELETE", fmt.Sprintf("%s/comments/%d?version=0", pr, gone.ID), nil, nil)
	w.must(200, w.alice, "POST", pr+"/approve", nil, nil)

	var page struct {
		Values []activity `json:"values"`
	}
	w.must(200, w.alice, "GET", pr+"/activities", nil, &page)
	var got []string
	for _, a := range page.Values {
		s := a.Action
		if a.Comment != nil {
			s += fmt.Sprintf(" %s #%d %q", a.CommentAction, a.Comment.ID-general.ID, a.Comment.Text)
		}
		if a.CommentAnchor != nil {
			s += fmt.Sprintf(" @%s:%d", a.CommentAnchor.Path, a.CommentAnchor.Line)
		}
		if a.Participant != nil {
			s += " " + a.Participant.Status
		}
		got = append(got, s)
	}
	want := []string{
		"APPROVED APPROVED",
		"COMMENTED DELETED #3 \"\"",
		"COMMENTED ADDED #3 \"\"",
		"COMMENTED EDITED #0 \"general, edited\"",
		"COMMENTED REPLIED #2 \"a reply\" @feature.txt:1",
		"COMMENTED ADDED #1 \"inline\" @feature.txt:1",
		"COMMENTED ADDED #0 \"general, edited\"",
		"OPENED",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("activities:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The comment is the whole one: author, version, date, its replies.
	in := page.Values[5].Comment
	if in.Author.Name != "admin" || in.CreatedDate == 0 || len(in.Comments) != 1 || in.Comments[0].Text != "a reply" {
		t.Fatalf("inline comment in its activity: %+v", in)
	}
	if ed := page.Values[3].Comment; ed.Version != 1 || page.Values[3].User.Name != "admin" {
		t.Fatalf("edited comment in its activity: %+v", ed)
	}
	if code, body := w.call(w.eve, "GET", pr+"/activities", nil); code != 404 {
		t.Fatalf("activities of an unreadable repository: %d %s", code, body)
	}
}

// writeFiles writes files (by slash path) below dir.
func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func TestPullCommitsAndCommitViews(t *testing.T) {
	w := newReviewWorld(t)
	w.git("checkout", "-q", "feature")
	second := w.commit("feature2.txt", "more\n")
	w.git("mv", "feature.txt", "renamed.txt")
	w.git("commit", "-q", "-m", "rename")
	third := w.git("rev-parse", "HEAD")
	w.git("push", "-q", w.n.CloneURL("PRJ", "open", "admin", w.n.AdminPassword), "feature")
	pr := w.openFeature()

	var commits struct {
		Values []struct {
			ID string `json:"id"`
		} `json:"values"`
		IsLastPage    bool `json:"isLastPage"`
		NextPageStart int  `json:"nextPageStart"`
	}
	w.must(200, w.alice, "GET", pr+"/commits", nil, &commits)
	var ids []string
	for _, c := range commits.Values {
		ids = append(ids, c.ID)
	}
	if !slices.Equal(ids, []string{third, second, w.shared}) || !commits.IsLastPage {
		t.Fatalf("pull request commits: %v, want %v", ids, []string{third, second, w.shared})
	}
	w.must(200, w.alice, "GET", pr+"/commits?limit=2", nil, &commits)
	if len(commits.Values) != 2 || commits.IsLastPage || commits.NextPageStart != 2 {
		t.Fatalf("first page of two: %+v", commits)
	}

	type change struct {
		Type      string `json:"type"`
		NodeType  string `json:"nodeType"`
		ContentID string `json:"contentId"`
		Path      struct {
			Components []string `json:"components"`
			Parent     string   `json:"parent"`
			Name       string   `json:"name"`
			Extension  string   `json:"extension"`
			ToString   string   `json:"toString"`
		} `json:"path"`
		SrcPath *struct {
			ToString string `json:"toString"`
		} `json:"srcPath"`
	}
	var changes struct {
		FromHash, ToHash string
		IsLastPage       bool
		Values           []change
	}
	w.must(200, w.alice, "GET", openRepo+"/commits/"+third+"/changes", nil, &changes)
	if len(changes.Values) != 1 || changes.ToHash != third {
		t.Fatalf("changes of the rename: %+v", changes)
	}
	if ch := changes.Values[0]; ch.Type != "MOVE" || ch.SrcPath == nil || ch.SrcPath.ToString != "feature.txt" ||
		ch.Path.Name != "renamed.txt" || ch.Path.Extension != "txt" || ch.Path.ToString != "renamed.txt" || ch.NodeType != "FILE" || ch.ContentID == "" {
		t.Fatalf("the rename: %+v", ch)
	}
	w.must(200, w.alice, "GET", openRepo+"/commits/"+third+"/changes?since="+w.shared+"&limit=1", nil, &changes)
	if len(changes.Values) != 1 || changes.IsLastPage || changes.FromHash != w.shared || changes.Values[0].Type != "ADD" {
		t.Fatalf("first page of changes since the shared commit: %+v", changes)
	}
	w.must(200, w.alice, "GET", openRepo+"/commits/"+w.head+"/changes", nil, &changes)
	if got := changes.Values[0].Path; got.Parent != "docs/api" || !slices.Equal(got.Components, []string{"docs", "api", "ref.md"}) {
		t.Fatalf("a path object: %+v", got)
	}

	// The pull requests containing a commit: the feature's, not main's.
	var pulls struct {
		Values []struct {
			ID    int64  `json:"id"`
			Title string `json:"title"`
		} `json:"values"`
	}
	w.must(200, w.alice, "GET", openRepo+"/commits/"+second+"/pull-requests", nil, &pulls)
	if len(pulls.Values) != 1 || pulls.Values[0].Title != "feature" {
		t.Fatalf("pull requests containing %s: %+v", second, pulls)
	}
	w.must(200, w.alice, "GET", openRepo+"/commits/"+w.head+"/pull-requests", nil, &pulls)
	if len(pulls.Values) != 0 {
		t.Fatalf("pull requests containing main's head: %+v", pulls)
	}

	// Hidden repositories stay hidden; commits of other repositories do
	// not exist here.
	for _, path := range []string{pr + "/commits", openRepo + "/commits/" + third + "/changes", openRepo + "/commits/" + third + "/pull-requests"} {
		if code, body := w.call(w.eve, "GET", path, nil); code != 404 {
			t.Errorf("eve GET %s: %d %s", path, code, body)
		}
	}
	for _, path := range []string{openRepo + "/commits/" + w.private + "/changes", openRepo + "/commits/" + w.private + "/pull-requests"} {
		if code, body := w.call(w.alice, "GET", path, nil); code != 404 {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
}

func TestBlockerComments(t *testing.T) {
	w := newReviewWorld(t)
	pr := w.openFeature()
	type task struct {
		ID       int64  `json:"id"`
		Text     string `json:"text"`
		Severity string `json:"severity"`
		State    string `json:"state"`
		Version  int64  `json:"version"`
	}
	var a, b task
	w.must(201, w.alice, "POST", pr+"/blocker-comments", map[string]any{"text": "fix the tests"}, &a)
	w.must(201, w.admin, "POST", pr+"/blocker-comments", map[string]any{"text": "and the docs"}, &b)
	if a.Severity != "BLOCKER" || a.State != "OPEN" {
		t.Fatalf("a new task: %+v", a)
	}
	w.must(201, w.admin, "POST", pr+"/comments", map[string]any{"text": "not a task"}, nil)
	// A task is a comment and counts as one.
	var open struct {
		Values []task `json:"values"`
	}
	w.must(200, w.alice, "GET", pr+"/blocker-comments", nil, &open)
	if len(open.Values) != 2 {
		t.Fatalf("tasks: %+v", open)
	}
	w.must(200, w.alice, "PUT", fmt.Sprintf("%s/blocker-comments/%d", pr, a.ID), map[string]any{"version": 0, "state": "RESOLVED"}, &a)
	if a.State != "RESOLVED" || a.Version != 1 {
		t.Fatalf("resolved: %+v", a)
	}
	w.must(200, w.alice, "GET", pr+"/blocker-comments?state=OPEN", nil, &open)
	if len(open.Values) != 1 || open.Values[0].ID != b.ID {
		t.Fatalf("open tasks: %+v", open)
	}
	w.must(200, w.alice, "GET", fmt.Sprintf("%s/blocker-comments/%d", pr, a.ID), nil, &a)
	if a.Text != "fix the tests" {
		t.Fatalf("get a task: %+v", a)
	}
	// A plain comment is not a task; the task's version guards deletion.
	if code, body := w.call(w.alice, "GET", fmt.Sprintf("%s/blocker-comments/%d", pr, b.ID+1), nil); code != 404 {
		t.Fatalf("a plain comment as a task: %d %s", code, body)
	}
	if code, body := w.call(w.alice, "DELETE", fmt.Sprintf("%s/blocker-comments/%d?version=0", pr, a.ID), nil); code != 409 {
		t.Fatalf("deleting at a stale version: %d %s", code, body)
	}
	w.must(204, w.alice, "DELETE", fmt.Sprintf("%s/blocker-comments/%d?version=1", pr, a.ID), nil, nil)
	if code, body := w.call(w.alice, "GET", "/rest/api/latest/projects/PRJ/repos/open/pull-requests/1/blocker-comments?state=DONE", nil); code != 400 {
		t.Fatalf("an unknown state: %d %s", code, body)
	}
	if code, body := w.call(w.eve, "GET", pr+"/blocker-comments", nil); code != 404 {
		t.Fatalf("tasks of an unreadable repository: %d %s", code, body)
	}
	if code, body := w.call(w.eve, "POST", pr+"/blocker-comments", map[string]any{"text": "x"}); code != 404 {
		t.Fatalf("a task on an unreadable repository: %d %s", code, body)
	}
}

// TestParticipantPaths: …/participants/{user} answers with and without a
// trailing slash, under 1.0 and latest.
func TestParticipantPaths(t *testing.T) {
	w := newReviewWorld(t)
	pr := w.openFeature()
	latest := strings.Replace(pr, "1.0", "latest", 1)
	for _, path := range []string{pr + "/participants/alice", pr + "/participants/alice/", latest + "/participants/alice/"} {
		var pt struct {
			Status string `json:"status"`
			User   struct {
				Name string `json:"name"`
			} `json:"user"`
		}
		w.must(200, w.alice, "PUT", path, map[string]any{"status": "NEEDS_WORK"}, &pt)
		if pt.Status != "NEEDS_WORK" || pt.User.Name != "alice" {
			t.Fatalf("PUT %s: %+v", path, pt)
		}
	}
	if code, body := w.call(w.alice, "PUT", pr+"/participants/admin/", map[string]any{"status": "APPROVED"}); code != 403 {
		t.Fatalf("setting another's status: %d %s", code, body)
	}
	if code, body := w.call(w.eve, "PUT", pr+"/participants/eve/", map[string]any{"status": "APPROVED"}); code != 404 {
		t.Fatalf("a participant of an unreadable repository: %d %s", code, body)
	}
}
