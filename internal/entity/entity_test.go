package entity

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

// jsonEqual compares got, marshalled, with want as JSON values, so the
// expected documents can be written by hand in Bitbucket's layout.
func jsonEqual(t *testing.T, got any, want string) {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("got  %s\nwant %s", gb, wb)
	}
}

var r = &Renderer{BaseURL: "https://git.example", SSHBaseURL: "ssh://git@git.example:7999",
	Markdown: func(s string) string { return "<p>" + s + "</p>" }}

var proj = &store.Project{ID: 1, Key: "PRJ", Name: "My Project", Public: false}

var rp = &store.Repository{ID: 84, ProjectID: 1, ProjectKey: "PRJ", Slug: "my-repo", Name: "My Repo", DefaultBranch: "main"}

// The repository of Bitbucket's REST and webhook documentation, with
// Sluice's values.
func TestRepository(t *testing.T) {
	jsonEqual(t, r.Repository(rp, proj), `{
		"slug": "my-repo", "id": 84, "name": "My Repo", "scmId": "git", "state": "AVAILABLE",
		"statusMessage": "Available", "forkable": true, "public": false, "defaultBranch": "main",
		"project": {"key": "PRJ", "id": 1, "name": "My Project", "public": false, "type": "NORMAL",
			"links": {"self": [{"href": "https://git.example/projects/PRJ"}]}},
		"links": {
			"clone": [{"href": "https://git.example/scm/prj/my-repo.git", "name": "http"},
			          {"href": "ssh://git@git.example:7999/prj/my-repo.git", "name": "ssh"}],
			"self": [{"href": "https://git.example/projects/PRJ/repos/my-repo/browse"}]}}`)
	// Without the project row the key still names it.
	if got := r.Repository(rp, nil).Project; got.Key != "PRJ" || got.ID != 1 {
		t.Errorf("project from key = %+v", got)
	}
}

func TestUser(t *testing.T) {
	u := &store.User{ID: 7, Name: "Alice", Email: "alice@example.com", Active: true}
	jsonEqual(t, r.User(u), `{"name": "Alice", "emailAddress": "alice@example.com", "id": 7, "displayName": "Alice",
		"active": true, "slug": "alice", "type": "NORMAL", "links": {"self": [{"href": "https://git.example/users/alice"}]}}`)
	if d := DeletedUser(9); d.Name != "deleted-user-9" || DisplayName(d) != "Deleted user" {
		t.Errorf("DeletedUser = %+v", d)
	}
}

func TestRefOf(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"refs/heads/feature/x", `{"id": "refs/heads/feature/x", "displayId": "feature/x", "type": "BRANCH"}`},
		{"refs/tags/v1.0", `{"id": "refs/tags/v1.0", "displayId": "v1.0", "type": "TAG"}`},
		{"refs/notes/commits", `{"id": "refs/notes/commits", "displayId": "refs/notes/commits", "type": "BRANCH"}`},
	} {
		jsonEqual(t, RefOf(tc.name), tc.want)
	}
}

func TestPullRequest(t *testing.T) {
	created := time.UnixMilli(1_700_000_000_000).UTC()
	fork := &store.Repository{ID: 85, ProjectID: 2, ProjectKey: "~BOB", Slug: "my-repo", Name: "My Repo", ForkOf: 84}
	pr := &store.PullRequest{ID: 500, Number: 3, RepoID: 84, FromRepoID: 85, FromRef: "refs/heads/fix", FromSHA: "aaa",
		ToRef: "refs/heads/main", ToSHA: "bbb", Title: "Fix", Description: "why", State: store.PullOpen, Version: 2,
		CreatedAt: created, UpdatedAt: created, MergeStatus: "CLEAN"}
	to := r.Repository(rp, proj)
	from := r.Repository(fork, nil)
	out := r.PullRequest(pr, &to, &from)
	out.AddParticipant(r.Participant(&store.Participant{UserID: 7, Role: store.RoleAuthor, Status: store.StatusUnapproved},
		&store.User{ID: 7, Name: "bob", Active: true}))
	out.AddParticipant(r.Participant(&store.Participant{UserID: 8, Role: store.RoleReviewer, Status: store.StatusApproved},
		&store.User{ID: 8, Name: "carol", Active: true}))
	b, _ := json.Marshal(out)
	var got map[string]any
	json.Unmarshal(b, &got)
	// The fields Jenkins and the Bitbucket Server Integration plugin read.
	fromRef := got["fromRef"].(map[string]any)
	if fromRef["displayId"] != "fix" || fromRef["latestCommit"] != "aaa" || fromRef["type"] != "BRANCH" {
		t.Errorf("fromRef = %v", fromRef)
	}
	if repo := fromRef["repository"].(map[string]any); repo["slug"] != "my-repo" || repo["project"].(map[string]any)["key"] != "~BOB" {
		t.Errorf("fromRef.repository = %v", repo)
	}
	if repo := got["toRef"].(map[string]any)["repository"].(map[string]any); repo["project"].(map[string]any)["key"] != "PRJ" {
		t.Errorf("toRef.repository = %v", repo)
	}
	if got["id"] != 3.0 || got["version"] != 2.0 || got["state"] != "OPEN" || got["open"] != true || got["closed"] != false ||
		got["createdDate"] != 1.7e12 || got["descriptionHtml"] != "<p>why</p>" {
		t.Errorf("pull request = %s", b)
	}
	if a := got["author"].(map[string]any); a["role"] != "AUTHOR" || a["user"].(map[string]any)["name"] != "bob" || a["approved"] != false {
		t.Errorf("author = %v", a)
	}
	if rs := got["reviewers"].([]any); len(rs) != 1 || rs[0].(map[string]any)["approved"] != true || rs[0].(map[string]any)["status"] != "APPROVED" {
		t.Errorf("reviewers = %v", rs)
	}
	if ps := got["participants"].([]any); len(ps) != 0 {
		t.Errorf("participants = %v, want [] (never null)", ps)
	}
	if self := got["links"].(map[string]any)["self"].([]any)[0].(map[string]any)["href"]; self != "https://git.example/projects/PRJ/repos/my-repo/pull-requests/3" {
		t.Errorf("self = %v", self)
	}
	// A pull request within one repository has it on both sides.
	pr.FromRepoID = 84
	if same := r.PullRequest(pr, &to, nil); same.FromRef.Repository != same.ToRef.Repository {
		t.Error("nil from is not the target")
	}
}

func TestComment(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000).UTC()
	cm := &store.PullComment{ID: 62, Version: 1, Text: "looks good", AuthorID: 7, Created: at, Updated: at,
		Severity: "NORMAL", State: "OPEN", Path: "a.go", Line: 3, LineType: "ADDED", FileType: "TO", FromSHA: "x", ToSHA: "y"}
	jsonEqual(t, r.Comment(cm, &store.User{ID: 7, Name: "bob", Active: true}), `{
		"id": 62, "version": 1, "text": "looks good", "html": "<p>looks good</p>",
		"author": {"name": "bob", "id": 7, "displayName": "bob", "active": true, "slug": "bob", "type": "NORMAL",
			"links": {"self": [{"href": "https://git.example/users/bob"}]}},
		"createdDate": 1700000000000, "updatedDate": 1700000000000, "severity": "NORMAL", "state": "OPEN",
		"anchor": {"path": "a.go", "line": 3, "lineType": "ADDED", "fileType": "TO", "fromHash": "x", "toHash": "y", "orphaned": false},
		"comments": []}`)
}
