package web_test

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// pushOne creates key/name and pushes a one-commit history to it.
func pushOne(t *testing.T, n *testbed.Node, key, name string) *store.Repository {
	t.Helper()
	r := n.CreateRepo(t, key, name)
	dir := t.TempDir()
	testbed.Git(t, dir, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.Git(t, dir, "add", "-A")
	testbed.Git(t, dir, "commit", "-q", "-m", "first")
	testbed.Git(t, dir, "push", "-q", n.CloneURL(key, r.Slug, "admin", n.AdminPassword), "main")
	return r
}

// The admin page, the dashboard and the clone URLs, on one node.
func TestAdminDashboardAndCloneURLs(t *testing.T) {
	n := newNode(t)
	older := pushOne(t, n, "DASH", "older")
	newer := pushOne(t, n, "DASH", "newer")
	n.CreateRepo(t, "DASH", "never-pushed")
	hidden := pushOne(t, n, "DASH", "hidden")
	bob := n.CreateUser(t, "bob", "bob-password")
	n.Grant(t, older, bob.ID, store.PermRepoRead)
	n.Grant(t, newer, bob.ID, store.PermRepoRead)

	admin := newBrowser(t, n.URL)
	admin.login("admin", n.AdminPassword)

	t.Run("admin page shows this node and the job queue", func(t *testing.T) {
		p := admin.get("/admin")
		if p.status != 200 {
			t.Fatalf("/admin: %d", p.status)
		}
		nodes := section(t, p.body, "ad-nodes")
		for _, want := range []string{"(this node)", `<span class="ok">live</span>`, "tickets", "queued", n.App.HTTPAddr()} {
			if !strings.Contains(nodes, want) {
				t.Errorf("cluster section lacks %q:\n%s", want, nodes)
			}
		}
		jobs := section(t, p.body, "ad-jobs")
		// Each push queued a delayed housekeeping job.
		row := regexp.MustCompile(`<tr><td>housekeeping</td><td class="num">(\d+)</td><td class="num">(\d+)</td>`).FindStringSubmatch(jobs)
		if row == nil {
			t.Fatalf("no housekeeping row in the jobs section:\n%s", jobs)
		}
		if row[2] != "3" {
			t.Errorf("housekeeping scheduled %s, want 3 (one per pushed repository)", row[2])
		}
		for _, want := range []string{"Queue wait mean / p95", "Run time mean / p95", "cluster-sweep"} {
			if !strings.Contains(jobs, want) {
				t.Errorf("jobs section lacks %q", want)
			}
		}
	})

	t.Run("dashboard lists visible repositories, most recently pushed first", func(t *testing.T) {
		p := admin.get("/")
		if got, want := recentNames(p.body), []string{"hidden", "newer", "older", "never-pushed"}; !equal(got, want) {
			t.Errorf("admin's recent repositories %v, want %v", got, want)
		}
		b := newBrowser(t, n.URL)
		b.login("bob", "bob-password")
		p = b.get("/")
		if got, want := recentNames(p.body), []string{"newer", "older"}; !equal(got, want) {
			t.Errorf("bob's recent repositories %v, want %v", got, want)
		}
		if strings.Contains(p.body, "/repos/"+hidden.Slug+"\"") {
			t.Error("bob's dashboard names a repository he cannot read")
		}
	})

	t.Run("clone URLs carry the bound port", func(t *testing.T) {
		p := admin.get("/projects/DASH/repos/" + newer.Slug)
		want := n.URL + "/scm/dash/" + newer.Slug + ".git"
		if !strings.Contains(html.UnescapeString(p.body), want) {
			t.Errorf("repository home lacks the clone URL %q", want)
		}
		if strings.Contains(p.body, "127.0.0.1:0") {
			t.Error("repository home shows the unbound address 127.0.0.1:0")
		}
	})
}

// section returns the <section> labelled by id.
func section(t *testing.T, body, id string) string {
	t.Helper()
	i := strings.Index(body, `aria-labelledby="`+id+`"`)
	if i < 0 {
		t.Fatalf("no section %q", id)
	}
	j := strings.Index(body[i:], "</section>")
	return body[i : i+j]
}

var repoLinkRE = regexp.MustCompile(`href="/projects/DASH/repos/([a-z-]+)"`)

// recentNames lists the repositories the dashboard links to, in order.
func recentNames(body string) []string {
	var out []string
	for _, m := range repoLinkRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// TestAdminShowsGitCgroup: a node in a cgroup of its own shows its git
// cgroup in the throttling panel.
func TestAdminShowsGitCgroup(t *testing.T) {
	testbed.OwnCgroup(t, "test-web-gitgroup")
	n := newNode(t)
	st := n.App.Throttle.State().Controller
	if st == nil || st.GitCgroup == "" {
		t.Fatalf("node has no git cgroup: %+v", st)
	}
	admin := newBrowser(t, n.URL)
	admin.login("admin", n.AdminPassword)
	p := admin.get("/admin")
	want := "<dt>Git cgroup</dt><dd><code>" + html.EscapeString(st.GitCgroup) + "</code>: not capped</dd>"
	if th := section(t, p.body, "ad-throttle"); !strings.Contains(th, want) {
		t.Errorf("throttling panel lacks %q:\n%s", want, th)
	}
}
