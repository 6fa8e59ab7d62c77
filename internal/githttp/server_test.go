package githttp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/githttp"
	"github.com/sluice-scm/sluice/internal/hookclient"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// TestMain lets this test binary stand in for `sluice hook NAME`: the hook
// scripts gitcmd writes exec HookBinary, which the tests point here.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "hook" {
		os.Exit(hookclient.Run(os.Args[2], os.Args[3:], os.Stdin, os.Stdout, os.Stderr, os.Environ()))
	}
	os.Exit(m.Run())
}

// countingStore counts repository lookups, so path tests can prove a bad
// path never got as far as the store (let alone the disk).
type countingStore struct {
	store.Store
	lookups atomic.Int64
}

func (c *countingStore) RepoBySlug(ctx context.Context, key, slug string) (*store.Repository, error) {
	c.lookups.Add(1)
	return c.Store.RepoBySlug(ctx, key, slug)
}

// admissionFunc is a test Admission; a nil admit admits everything.
type admissionFunc struct {
	admit func(tk throttle.Ticket) error
}

func (a *admissionFunc) Admit(ctx context.Context, tk throttle.Ticket, progress func(string)) (func(), error) {
	if a.admit != nil {
		if err := a.admit(tk); err != nil {
			return nil, err
		}
	}
	return func() {}, nil
}

func (a *admissionFunc) RateLimit(ctx context.Context, p *auth.Principal, remote string) error {
	return nil
}

type serverOptions struct {
	maxInputSize   int64
	maxRequestBody int64
	admit          func(tk throttle.Ticket) error
	cache          hosting.Cache
	// policy judges pushes in pre-receive; tests use it to hold a push
	// at a known point.
	policy hooks.Policy
	// onRequest sees every request before the handler does.
	onRequest func(r *http.Request)
}

// server is one in-process Sluice git HTTP endpoint with its own store,
// repositories and git home.
type server struct {
	t     *testing.T
	base  string // http://127.0.0.1:port
	host  string // 127.0.0.1:port
	st    *countingStore
	auth  *auth.Service
	repos *repo.Manager
	home  string // HOME for the git client
	log   *syncBuffer
	hooks *hooks.Server
	// gzipRequests counts requests that came with a gzip body.
	gzipRequests atomic.Int64
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newServer(t *testing.T, opts serverOptions) *server {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "sluice.db"), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := &countingStore{Store: db}
	reg := prometheus.NewRegistry()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	git, err := gitcmd.New(gitcmd.Config{
		HomeDir:      filepath.Join(dir, "git-home"),
		HookBinary:   exe,
		MaxInputSize: opts.maxInputSize,
		Timeout:      time.Minute,
	}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { git.Close() })
	hk, err := hooks.NewServer(hooks.Config{NodeID: "test"}, st, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hk.Close() })
	if opts.policy != nil {
		hk.SetPolicy(opts.policy)
	}
	a := auth.New(st, logger, reg)
	repos := repo.NewManager(filepath.Join(dir, "repos"), git, logger)
	var adm hosting.Admission
	if opts.admit != nil {
		adm = &admissionFunc{admit: opts.admit}
	}
	svc := hosting.New(hosting.Deps{
		Store: st, Auth: a, Repos: repos, Git: git, Hooks: hk,
		Logger: logger, Registerer: reg, Admission: adm, Cache: opts.cache,
	})
	h := githttp.New(svc, a, githttp.Config{
		MaxRequestBody: opts.maxRequestBody,
		MaxPushBody:    opts.maxInputSize,
		BodyTimeout:    30 * time.Second,
	}, logger)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "gzip" {
			s.gzipRequests.Add(1)
		}
		if opts.onRequest != nil {
			opts.onRequest(r)
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: count, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	home := filepath.Join(dir, "client-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	s.t, s.base, s.host = t, "http://"+ln.Addr().String(), ln.Addr().String()
	s.st, s.auth, s.repos, s.home, s.log = st, a, repos, home, logs
	s.hooks = hk
	return s
}

func (s *server) user(name, password string) *store.User {
	s.t.Helper()
	// Most users get no password: argon2id under the race detector costs
	// seconds per hash, and tokens exercise the same paths.
	var hash string
	if password != "" {
		var err error
		if hash, err = auth.HashPassword(password); err != nil {
			s.t.Fatal(err)
		}
	}
	u := &store.User{Name: name, DisplayName: name, Email: name + "@example.com", PasswordHash: hash, Active: true}
	if err := s.st.CreateUser(context.Background(), u); err != nil {
		s.t.Fatal(err)
	}
	return u
}

func (s *server) token(userID int64, scope store.Scope, expires *time.Time) (string, *store.Token) {
	s.t.Helper()
	secret, tok, err := s.auth.CreateToken(context.Background(), userID, fmt.Sprintf("t%d", time.Now().UnixNano()), scope, expires)
	if err != nil {
		s.t.Fatal(err)
	}
	return secret, tok
}

func (s *server) createProject(key string, public bool) *store.Project {
	s.t.Helper()
	p := &store.Project{Key: key, Name: key, Public: public}
	if err := s.st.CreateProject(context.Background(), p); err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *server) createRepo(p *store.Project, name string, public bool) *store.Repository {
	s.t.Helper()
	r := &store.Repository{ProjectID: p.ID, Name: name, Public: public}
	if err := repo.Provision(context.Background(), s.st, s.repos, r); err != nil {
		s.t.Fatal(err)
	}
	r.ProjectKey = p.Key
	return r
}

func (s *server) grant(r *store.Repository, userID int64, perm store.Permission) {
	s.t.Helper()
	if err := s.st.SetRepoPermission(context.Background(), r.ID, store.Grant{UserID: userID, Permission: perm}); err != nil {
		s.t.Fatal(err)
	}
}

// url is the clone URL of key/slug with user:secret embedded ("" for none).
func (s *server) url(key, slug, user, secret string) string {
	u := url.URL{Scheme: "http", Host: s.host, Path: "/scm/" + key + "/" + slug + ".git"}
	if user != "" {
		u.User = url.UserPassword(user, secret)
	}
	return u.String()
}

// git runs the git client in dir and returns stdout, stderr and the error.
func (s *server) git(dir string, args ...string) (string, string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + s.home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"GIT_AUTHOR_NAME=Sluice Test",
		"GIT_AUTHOR_EMAIL=test@sluice.invalid",
		"GIT_COMMITTER_NAME=Sluice Test",
		"GIT_COMMITTER_EMAIL=test@sluice.invalid",
		"LANG=C",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// mustGit runs git and fails the test on a non-zero exit.
func (s *server) mustGit(dir string, args ...string) string {
	s.t.Helper()
	out, errOut, err := s.git(dir, args...)
	if err != nil {
		s.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// failGit runs git, expects it to fail, and returns its stderr.
func (s *server) failGit(dir string, args ...string) string {
	s.t.Helper()
	_, errOut, err := s.git(dir, args...)
	if err == nil {
		s.t.Fatalf("git %s succeeded, want failure", strings.Join(args, " "))
	}
	return errOut
}

// workTree makes a repository with n commits on main.
func (s *server) workTree(n int) string {
	s.t.Helper()
	dir := s.t.TempDir()
	s.mustGit(dir, "init", "-q", "-b", "main")
	for i := 0; i < n; i++ {
		s.commit(dir, fmt.Sprintf("file%d.txt", i%3), fmt.Sprintf("content %d\n", i))
	}
	return dir
}

func (s *server) commit(dir, name, content string) string {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.mustGit(dir, "add", "-A")
	s.mustGit(dir, "commit", "-q", "-m", "change "+name)
	return strings.TrimSpace(s.mustGit(dir, "rev-parse", "HEAD"))
}

// refs lists the refs in repository r on disk as "sha ref" lines.
func (s *server) refs(r *store.Repository) string {
	s.t.Helper()
	out, errOut, err := s.git("", "--git-dir="+s.repos.Path(r.ID), "for-each-ref", "--format=%(objectname) %(refname)")
	if err != nil {
		s.t.Fatalf("for-each-ref: %v\n%s", err, errOut)
	}
	return out
}

// fsck checks repository r on disk.
func (s *server) fsck(r *store.Repository) {
	s.t.Helper()
	if _, errOut, err := s.git("", "--git-dir="+s.repos.Path(r.ID), "fsck", "--strict"); err != nil {
		s.t.Fatalf("fsck: %v\n%s", err, errOut)
	}
}

// do sends a raw request and returns status, headers and body.
func (s *server) do(method, path string, hdr http.Header, body io.Reader) (int, http.Header, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}
