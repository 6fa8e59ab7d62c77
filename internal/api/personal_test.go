package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/api"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/githttp"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// newGitEnv is newEnv with the smart HTTP transport mounted at /scm/, so a
// test can drive the REST API and the real git client on one server.
func newGitEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "sluice.db"), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	git, err := gitcmd.New(gitcmd.Config{HomeDir: filepath.Join(dir, "git-home"), HookBinary: self, Timeout: time.Minute}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { git.Close() })
	repos := repo.NewManager(filepath.Join(dir, "repos"), git, logger)
	hk, err := hooks.NewServer(hooks.Config{SocketDir: filepath.Join(dir, "run"), NodeID: "test"}, st, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hk.Close() })
	au := auth.New(st, logger, reg)
	rest := api.New(api.Deps{
		Store: st, Auth: au, Accounts: accounts.New(st, au, repos, logger), Repos: repos, Git: git, Hooks: hk, Logger: logger,
		BaseURL: "http://sluice.test/", SSHBaseURL: "ssh://git@sluice.test:7999",
	})
	svc := hosting.New(hosting.Deps{Store: st, Auth: au, Repos: repos, Git: git, Hooks: hk, Logger: logger, Registerer: reg})
	scm := githttp.New(svc, au, githttp.Config{BodyTimeout: 30 * time.Second}, logger)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/scm/") {
			scm.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, st: st, auth: au, repos: repos, dir: dir, ids: map[string]int64{}}
	e.admin = e.user("admin")
	if err := st.SetGlobalPermission(ctx, store.Grant{UserID: e.ids["admin"], Permission: store.PermSysAdmin}); err != nil {
		t.Fatal(err)
	}
	e.alice = e.user("alice")
	e.bob = e.user("bob")
	return e
}

// scmURL is the clone URL of ~owner/slug for user with the token behind
// bearer as the password.
func (e *env) scmURL(key, slug, user, bearer string) string {
	u := strings.Replace(e.url, "http://", "http://"+user+":"+strings.TrimPrefix(bearer, "Bearer ")+"@", 1)
	return u + "/scm/" + key + "/" + slug + ".git"
}

func TestPersonalRepositories(t *testing.T) {
	e := newGitEnv(t)

	// Alice creates a repository in her personal project, which exists
	// from first use; the key is any case of "~" and her login.
	var r repoJSON
	e.must(201, "POST", "/rest/api/1.0/projects/~alice/repos", e.alice, map[string]any{"name": "notes"}).json(t, &r)
	if r.Project.Key != "~ALICE" || r.Project.Name != "Alice" || r.Slug != "notes" {
		t.Fatalf("personal repository %+v", r)
	}
	e.must(200, "GET", "/rest/api/1.0/projects/~ALICE/repos/notes", e.alice, nil)
	e.must(200, "GET", "/rest/api/1.0/users/alice/repos/notes", e.alice, nil)

	// Push and clone it with the git client through /scm/~alice/.
	work := e.workTree(map[string]string{"README": "hello\n"}, 2)
	e.git(work, "push", "-q", e.scmURL("~alice", "notes", "alice", e.alice), "main")
	clone := filepath.Join(t.TempDir(), "clone")
	e.git("", "clone", "-q", e.scmURL("~Alice", "notes", "alice", e.alice), clone)
	if got, want := e.git(clone, "rev-parse", "HEAD"), e.git(work, "rev-parse", "main"); got != want {
		t.Fatalf("cloned %s, pushed %s", got, want)
	}

	var page struct {
		Size   int `json:"size"`
		Values []repoJSON
	}
	e.must(200, "GET", "/rest/api/1.0/users/alice/repos", e.alice, nil).json(t, &page)
	if page.Size != 1 || page.Values[0].Slug != "notes" {
		t.Fatalf("alice's own listing %s", e.do("GET", "/rest/api/1.0/users/alice/repos", e.alice, nil).body)
	}

	// Bob sees nothing of it until granted, over REST and git alike.
	e.must(404, "GET", "/rest/api/1.0/projects/~alice/repos/notes", e.bob, nil)
	e.must(404, "GET", "/rest/api/1.0/users/alice/repos/notes", e.bob, nil)
	e.must(200, "GET", "/rest/api/1.0/users/alice/repos", e.bob, nil).json(t, &page)
	if page.Size != 0 {
		t.Fatalf("bob lists alice's private repositories: %+v", page)
	}
	if res := e.do("GET", "/scm/~alice/notes.git/info/refs?service=git-upload-pack", basic("bob", strings.TrimPrefix(e.bob, "Bearer ")), nil); res.status != 404 {
		t.Fatalf("bob's git read: %d", res.status)
	}
	// Nor may he create repositories there.
	if res := e.do("POST", "/rest/api/1.0/projects/~alice/repos", e.bob, map[string]any{"name": "mine"}); res.status/100 == 2 {
		t.Fatalf("bob created a repository in alice's project: %d", res.status)
	}
	e.must(204, "PUT", "/rest/api/1.0/projects/~alice/repos/notes/permissions/users?name=bob&permission=REPO_READ", e.alice, nil)
	e.must(200, "GET", "/rest/api/1.0/users/alice/repos/notes", e.bob, nil)
	e.must(200, "GET", "/rest/api/1.0/users/alice/repos", e.bob, nil).json(t, &page)
	if page.Size != 1 {
		t.Fatalf("bob after the grant: %+v", page)
	}
	bobClone := filepath.Join(t.TempDir(), "bob")
	e.git("", "clone", "-q", e.scmURL("~alice", "notes", "bob", e.bob), bobClone)

	// Bob forks it into his own personal project.
	var fork repoJSON
	e.must(201, "POST", "/rest/api/1.0/projects/~alice/repos/notes", e.bob, map[string]any{"project": map[string]string{"key": "~bob"}}).json(t, &fork)
	if fork.Project.Key != "~BOB" || fork.Origin == nil || fork.Origin.Slug != "notes" {
		t.Fatalf("fork %+v", fork)
	}

	// '~' is a personal project of an existing user and nothing else.
	e.must(404, "GET", "/rest/api/1.0/projects/~nobody/repos", e.alice, nil)
	e.must(404, "GET", "/rest/api/1.0/users/nobody/repos", e.alice, nil)
	for _, key := range []string{"~nobody", "~", "a~b", "~alice", "~~alice"} {
		if res := e.do("POST", "/rest/api/1.0/projects", e.admin, map[string]any{"key": key, "name": "x"}); res.status != 400 && res.status != 409 {
			t.Errorf("create project %q: %d %s", key, res.status, res.body)
		}
	}
	for _, key := range []string{"~nobody", "~", "a~b", "~~alice"} {
		if res := e.do("POST", "/rest/api/1.0/projects/"+key+"/repos", e.admin, map[string]any{"name": "x"}); res.status/100 == 2 {
			t.Errorf("create repository in %q: %d", key, res.status)
		}
		if res := e.do("GET", "/scm/"+key+"/notes.git/info/refs?service=git-upload-pack", e.admin, nil); res.status != 404 {
			t.Errorf("git path under %q: %d", key, res.status)
		}
	}
}
