package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/api"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hookclient"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestMain lets this test binary act as the hook program: gitcmd's hook
// scripts exec HookBinary ("hook NAME …"), and the test binary is that.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "hook" {
		os.Exit(hookclient.Run(os.Args[2], os.Args[3:], os.Stdin, os.Stdout, os.Stderr, os.Environ()))
	}
	os.Exit(m.Run())
}

// env is one in-process API server wired from the real store (SQLite in a
// temporary directory), auth, gitcmd, repo and hooks.
type env struct {
	t     *testing.T
	url   string
	st    *store.DB
	auth  *auth.Service
	repos *repo.Manager
	dir   string

	// Credentials: Authorization header values.
	admin, alice, bob, reader, writer string
	ids                               map[string]int64
}

const testPassword = "correct horse battery staple"

// newEnv builds the env; opts adjust gitcmd's configuration (read
// bounds, diff limits) before it starts.
func newEnv(t *testing.T, opts ...func(*gitcmd.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("SLUICE_TEST_LOG") == "1" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "sluice.db"), logger)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	gitCfg := gitcmd.Config{HomeDir: filepath.Join(dir, "git-home"), HookBinary: self, Timeout: time.Minute}
	for _, o := range opts {
		o(&gitCfg)
	}
	git, err := gitcmd.New(gitCfg, reg, logger)
	if err != nil {
		t.Fatalf("gitcmd: %v", err)
	}
	t.Cleanup(func() { git.Close() })
	repos := repo.NewManager(filepath.Join(dir, "repos"), git, logger)
	hk, err := hooks.NewServer(hooks.Config{SocketDir: filepath.Join(dir, "run"), NodeID: "test"}, st, logger, reg)
	if err != nil {
		t.Fatalf("hooks: %v", err)
	}
	t.Cleanup(func() { hk.Close() })
	au := auth.New(st, logger, reg)
	h := api.New(api.Deps{
		Store: st, Auth: au, Accounts: accounts.New(st, au, repos, logger), Repos: repos, Git: git, Hooks: hk, Logger: logger,
		BaseURL: "http://sluice.test/", SSHBaseURL: "ssh://git@sluice.test:7999",
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	e := &env{t: t, url: srv.URL, st: st, auth: au, repos: repos, dir: dir, ids: map[string]int64{}}
	e.admin = e.user("admin")
	if err := st.SetGlobalPermission(ctx, store.Grant{UserID: e.ids["admin"], Permission: store.PermSysAdmin}); err != nil {
		t.Fatal(err)
	}
	e.alice = e.user("alice")
	e.bob = e.user("bob")
	e.reader = e.user("reader")
	e.writer = e.user("writer")
	return e
}

// user creates an account with testPassword and returns a Bearer header
// for a full-power (admin scope) token of it; tokens keep the tests fast,
// where each password check costs an argon2 hash.
func (e *env) user(name string) string {
	e.t.Helper()
	ctx := context.Background()
	hash, err := auth.HashPassword(testPassword)
	if err != nil {
		e.t.Fatal(err)
	}
	u := &store.User{Name: name, DisplayName: strings.ToUpper(name[:1]) + name[1:], Email: name + "@example.com", PasswordHash: hash, Active: true}
	if err := e.st.CreateUser(ctx, u); err != nil {
		e.t.Fatalf("create user %s: %v", name, err)
	}
	e.ids[name] = u.ID
	secret, _, err := e.auth.CreateToken(ctx, u.ID, "tests", store.ScopeAdmin, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return "Bearer " + secret
}

func basic(user, pw string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pw)
	return req.Header.Get("Authorization")
}

// resp is a finished response with its body read.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %d response %q: %v", r.status, r.body, err)
	}
}

// message is the first error message of an error body.
func (r resp) message(t *testing.T) string {
	t.Helper()
	var eb struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	r.json(t, &eb)
	if len(eb.Errors) == 0 {
		t.Fatalf("no errors in %s", r.body)
	}
	return eb.Errors[0].Message
}

// do sends a request; body is JSON-encoded unless it is a string or nil.
func (e *env) do(method, path, authz string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

// must sends a request and fails the test unless the status is want.
func (e *env) must(want int, method, path, authz string, body any) resp {
	e.t.Helper()
	r := e.do(method, path, authz, body)
	if r.status != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, want, r.body)
	}
	return r
}

// repoJSON is the subset of the repository document tests read.
type repoJSON struct {
	ID     int64  `json:"id"`
	Slug   string `json:"slug"`
	Name   string `json:"name"`
	ScmID  string `json:"scmId"`
	State  string `json:"state"`
	Public bool   `json:"public"`
	Origin *struct {
		Slug string `json:"slug"`
	} `json:"origin"`
	Project struct {
		Key  string `json:"key"`
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"project"`
	Links struct {
		Clone []struct{ Href, Name string } `json:"clone"`
		Self  []struct{ Href string }       `json:"self"`
	} `json:"links"`
}

// project creates a project as admin.
func (e *env) project(key string, public bool) {
	e.t.Helper()
	e.must(201, "POST", "/rest/api/1.0/projects", e.admin, map[string]any{"key": key, "name": key + " project", "public": public})
}

// repo creates a repository as admin and returns it.
func (e *env) repo(key, name string) repoJSON {
	e.t.Helper()
	var r repoJSON
	e.must(201, "POST", "/rest/api/1.0/projects/"+key+"/repos", e.admin, map[string]any{"name": name}).json(e.t, &r)
	return r
}

// grant gives a user a repository permission through the API.
func (e *env) grant(key, slug, user, perm string) {
	e.t.Helper()
	e.must(204, "PUT", fmt.Sprintf("/rest/api/1.0/projects/%s/repos/%s/permissions/users?name=%s&permission=%s", key, slug, user, perm), e.admin, nil)
}

// git runs the git client for test set-up (never the server's git).
func (e *env) git(dir string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + e.dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.com",
		"GIT_COMMITTER_NAME=Test Committer", "GIT_COMMITTER_EMAIL=committer@example.com",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z", "LANG=C",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// workTree makes a work tree on main with files and commits, for pushing.
func (e *env) workTree(files map[string]string, commits int) string {
	e.t.Helper()
	dir := e.t.TempDir()
	e.git(dir, "init", "-q", "-b", "main")
	for i := 0; i < commits; i++ {
		if err := os.WriteFile(filepath.Join(dir, "history.txt"), []byte(fmt.Sprintf("version %d\n", i)), 0o644); err != nil {
			e.t.Fatal(err)
		}
		if i == commits-1 {
			for name, content := range files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					e.t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					e.t.Fatal(err)
				}
			}
		}
		e.git(dir, "add", "-A")
		e.git(dir, "commit", "-q", "-m", fmt.Sprintf("commit %d\n\nbody of commit %d", i, i))
	}
	return dir
}

// push pushes refs of a work tree straight into repository id's directory
// (test set-up only; the server's git paths are under test elsewhere).
func (e *env) push(work string, id int64, refspecs ...string) {
	e.t.Helper()
	e.git(work, append([]string{"push", "-q", e.repos.Path(id)}, refspecs...)...)
}

func (e *env) generation(id int64) int64 {
	e.t.Helper()
	s, err := e.st.RepoState(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return s.Generation
}

func urlq(s string) string { return url.QueryEscape(s) }
