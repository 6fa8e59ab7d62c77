package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// branchesRepo makes a local repository with main and one commit on each
// of branches, to push to several server repositories at one request each
// (the tests' rate limit counts requests).
func branchesRepo(t *testing.T, branches ...string) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		testbed.Git(t, dir, append([]string{"-c", "user.name=T", "-c", "user.email=t@example.com"}, args...)...)
	}
	git("init", "-q", "-b", "main")
	git("commit", "-q", "--allow-empty", "-m", "first")
	for _, b := range branches {
		git("checkout", "-q", "-b", b, "main")
		git("commit", "-q", "--allow-empty", "-m", b)
	}
	return dir
}

// The dashboard's pull requests come from every repository the user can
// read, not from a scan of a few, and its inbox can be marked read.
func TestDashboardPullsAndInbox(t *testing.T) {
	n := newNode(t)
	ctx := t.Context()
	bob := n.CreateUser(t, "bob", "bob-password")
	// Enough repositories that a scan of "the most recently pushed few"
	// would miss the first one pushed, which holds the pull requests.
	local := branchesRepo(t, "bobs", "review-me", "secret")
	var repos []*store.Repository
	for _, name := range []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"} {
		r := n.CreateRepo(t, "DASH", name)
		n.Grant(t, r, bob.ID, store.PermRepoWrite)
		testbed.Git(t, local, "push", "-q", n.CloneURL("DASH", r.Slug, "admin", n.AdminPassword), "main", "bobs", "review-me", "secret")
		repos = append(repos, r)
	}
	oldest, hidden := repos[0], repos[1]

	ps := n.App.Pulls
	asBob := &auth.Principal{UserID: bob.ID, Name: "bob"}
	asAdmin := &auth.Principal{UserID: 1, Name: "admin"}
	if u, err := n.Store().UserByName(ctx, "admin"); err == nil {
		asAdmin.UserID = u.ID
	}
	create := func(p *auth.Principal, r *store.Repository, from, title string, reviewers ...int64) {
		t.Helper()
		if _, err := ps.Create(ctx, p, r, pull.CreateRequest{Title: title, FromRepo: r, FromRef: from, ToRef: "main", Reviewers: reviewers}); err != nil {
			t.Fatalf("create %q: %v", title, err)
		}
	}
	create(asBob, oldest, "bobs", "Bob's own change")
	create(asAdmin, oldest, "review-me", "Please review", bob.ID)
	create(asAdmin, hidden, "secret", "Hidden review", bob.ID)
	// bob loses access to one repository: its pull request is no longer
	// his to see.
	if err := n.Store().RevokeRepoPermission(ctx, hidden.ID, bob.ID, 0); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, n.URL)
	b.login("bob", "bob-password")
	p := b.get("/")
	if mine := section(t, p.body, "my-prs"); !strings.Contains(mine, "Bob&#39;s own change") {
		t.Errorf("my open pull requests lack bob's:\n%s", mine)
	}
	reviews := section(t, p.body, "reviews")
	if !strings.Contains(reviews, "Please review") {
		t.Errorf("reviews waiting lack the request:\n%s", reviews)
	}
	if strings.Contains(p.body, "Hidden review") {
		t.Error("the dashboard shows a pull request of a repository bob cannot read")
	}

	// The review request reaches bob's inbox through the notify job.
	deadline := time.Now().Add(45 * time.Second)
	for {
		p = b.get("/")
		if strings.Contains(section(t, p.body, "inbox"), `id="unread"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no unread notification on the dashboard:\n%s", section(t, p.body, "inbox"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	inbox := section(t, p.body, "inbox")
	if !strings.Contains(inbox, "Please review") || !strings.Contains(inbox, `href="/projects/DASH/repos/alpha/pull-requests/`) {
		t.Errorf("inbox lacks the review request:\n%s", inbox)
	}
	if strings.Contains(inbox, "Hidden review") {
		t.Error("the inbox shows a pull request of a repository bob cannot read")
	}

	// Mark all read: refused without the CSRF token, done with it.
	if p := b.post("/notifications/read", url.Values{"csrf": {""}}); p.status != http.StatusForbidden {
		t.Errorf("mark read without csrf: %d, want 403", p.status)
	}
	if p := b.submit("/notifications/read", "/", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("mark read: %d", p.status)
	}
	if unread, err := n.App.Notify.UnreadCount(ctx, bob.ID); err != nil || unread != 0 {
		t.Errorf("unread after marking all read: %d %v", unread, err)
	}
	inbox = section(t, b.get("/").body, "inbox")
	if strings.Contains(inbox, `id="unread"`) || strings.Contains(inbox, `id="mark-read"`) || !strings.Contains(inbox, "Please review") {
		t.Errorf("inbox after marking read:\n%s", inbox)
	}
}
