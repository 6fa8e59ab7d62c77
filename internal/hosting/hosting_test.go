package hosting_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/packcache"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// recorder is an Admission and a Cache that record the order of calls.
type recorder struct {
	mu        sync.Mutex
	calls     []string
	rateErr   error
	cacheMode string // "", "hit", "miss" (calls generate), "decline"
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) Calls() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.calls, ",")
}

func (r *recorder) Admit(ctx context.Context, tk throttle.Ticket, progress func(string)) (func(), error) {
	r.note("admit")
	return func() { r.note("release") }, nil
}

func (r *recorder) RateLimit(ctx context.Context, p *auth.Principal, remote string) error {
	r.note("ratelimit")
	return r.rateErr
}

func (r *recorder) Serve(ctx context.Context, req *packcache.Request, w io.Writer, progress func(string), generate packcache.Generate) (bool, error) {
	r.note("cache")
	switch r.cacheMode {
	case "hit":
		_, err := io.WriteString(w, "cached bytes")
		return true, err
	case "miss":
		return true, generate(ctx, w, progress)
	}
	return false, nil
}

type env struct {
	st    *store.DB
	auth  *auth.Service
	git   *gitcmd.Runner
	svc   *hosting.Service
	rec   *recorder
	reg   *prometheus.Registry
	repo  *store.Repository
	repos *repo.Manager
	alice *auth.Principal // REPO_WRITE
	bob   *auth.Principal // REPO_READ
	carol *auth.Principal // nothing
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "db"), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	git, err := gitcmd.New(gitcmd.Config{HomeDir: filepath.Join(dir, "home"), HookBinary: "/bin/false"}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { git.Close() })
	repos := repo.NewManager(filepath.Join(dir, "repos"), git, logger)
	a := auth.New(st, logger, reg)
	rec := &recorder{}
	e := &env{st: st, auth: a, git: git, rec: rec, reg: reg, repos: repos}
	e.svc = hosting.New(hosting.Deps{Store: st, Auth: a, Repos: repos, Git: git, Logger: logger, Registerer: reg, Admission: rec, Cache: rec})

	proj := &store.Project{Key: "PROJ", Name: "Proj"}
	if err := st.CreateProject(ctx, proj); err != nil {
		t.Fatal(err)
	}
	e.repo = &store.Repository{ProjectID: proj.ID, Name: "app"}
	if err := repo.Provision(ctx, st, repos, e.repo); err != nil {
		t.Fatal(err)
	}
	// One commit, so that advertisements list a ref.
	wt := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=T", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one"},
		{"push", "-q", repos.Path(e.repo.ID), "main"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = wt
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+wt)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	user := func(name string, perm store.Permission) *auth.Principal {
		u := &store.User{Name: name, DisplayName: name, Email: name + "@example.com", Active: true}
		if err := st.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		if perm != "" {
			if err := st.SetRepoPermission(ctx, e.repo.ID, store.Grant{UserID: u.ID, Permission: perm}); err != nil {
				t.Fatal(err)
			}
		}
		return &auth.Principal{UserID: u.ID, Name: u.Name}
	}
	e.alice = user("alice", store.PermRepoWrite)
	e.bob = user("bob", store.PermRepoRead)
	e.carol = user("carol", "")
	return e
}

func TestResolve(t *testing.T) {
	e := newEnv(t)
	anon := auth.Anonymous()
	cases := []struct {
		name      string
		p         *auth.Principal
		key, slug string
		a         auth.Action
		kind      problem.Kind // Internal means success
		msg       string
	}{
		{"writer reads", e.alice, "PROJ", "app", auth.Read, problem.Internal, ""},
		{"writer writes", e.alice, "PROJ", "app", auth.Write, problem.Internal, ""},
		{"key in lower case", e.alice, "proj", "app", auth.Read, problem.Internal, ""},
		{"reader writes", e.bob, "PROJ", "app", auth.Write, problem.Forbidden, ""},
		{"no access", e.carol, "PROJ", "app", auth.Read, problem.NotFound, "repository not found"},
		{"missing repository", e.carol, "PROJ", "nope", auth.Read, problem.NotFound, "repository not found"},
		{"missing project", e.alice, "NOPE", "app", auth.Read, problem.NotFound, "repository not found"},
		{"anonymous, private", anon, "PROJ", "app", auth.Read, problem.Unauthenticated, "authentication required"},
		{"anonymous, missing", anon, "PROJ", "nope", auth.Read, problem.Unauthenticated, "authentication required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := e.svc.Resolve(context.Background(), c.p, c.key, c.slug, c.a)
			if c.kind == problem.Internal {
				if err != nil || r.ID != e.repo.ID {
					t.Fatalf("got %v, %v", r, err)
				}
				return
			}
			if !problem.Is(err, c.kind) || (c.msg != "" && problem.Message(err) != c.msg) {
				t.Fatalf("got %v (kind %v), want %v %q", err, problem.KindOf(err), c.kind, c.msg)
			}
		})
	}

	// An anonymous push to a public repository asks for credentials.
	e.repo.Public = true
	if err := e.st.UpdateRepo(context.Background(), e.repo); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Resolve(context.Background(), anon, "PROJ", "app", auth.Read); err != nil {
		t.Fatalf("anonymous read of a public repository: %v", err)
	}
	if _, err := e.svc.Resolve(context.Background(), anon, "PROJ", "app", auth.Write); !problem.Is(err, problem.Unauthenticated) {
		t.Fatalf("anonymous write of a public repository: %v", err)
	}
}

// lsRefs is a protocol v2 ls-refs request.
func lsRefs() []byte {
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	return []byte(pkt("command=ls-refs\n") + "0001" + pkt("ref-prefix refs/heads/\n") + "0000")
}

func TestServeOrderAndCache(t *testing.T) {
	cases := []struct {
		mode      string
		calls     string
		gitRuns   float64
		wantBytes string // substring of the output
	}{
		{"hit", "ratelimit,cache", 0, "cached bytes"},
		{"miss", "ratelimit,cache,admit,release", 1, "refs/heads/main"},
		{"decline", "ratelimit,cache,admit,release", 1, "refs/heads/main"},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			e := newEnv(t)
			e.rec.cacheMode = c.mode
			op := hosting.Op{Principal: e.bob, ProjectKey: "PROJ", Slug: "app", Service: hosting.UploadPack,
				Protocol: "version=2", Transport: "http", Stateless: true}
			var out bytes.Buffer
			if err := e.svc.Serve(context.Background(), op, bytes.NewReader(lsRefs()), &out); err != nil {
				t.Fatal(err)
			}
			if got := e.rec.Calls(); got != c.calls {
				t.Fatalf("calls %s, want %s", got, c.calls)
			}
			if n := e.git.Started("upload-pack"); n != c.gitRuns {
				t.Fatalf("%v upload-pack processes, want %v", n, c.gitRuns)
			}
			if !strings.Contains(out.String(), c.wantBytes) {
				t.Fatalf("output %q", out.String())
			}
		})
	}
}

func TestAdvertiseRefs(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		service, protocol string
		prefix            string
	}{
		{hosting.UploadPack, "", "001e# service=git-upload-pack\n0000"},
		{hosting.UploadPack, "version=1", "001e# service=git-upload-pack\n0000000eversion 1\n"},
		{hosting.UploadPack, "version=2", "000eversion 2\n"},
		{hosting.ReceivePack, "", "001f# service=git-receive-pack\n0000"},
		// Invalid values are dropped: the client gets protocol v0.
		{hosting.UploadPack, "version=2\n", "001e# service=git-upload-pack\n0000"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		op := hosting.Op{Principal: e.alice, ProjectKey: "PROJ", Slug: "app", Service: c.service, Protocol: c.protocol, Transport: "http", Stateless: true}
		if err := e.svc.AdvertiseRefs(context.Background(), op, &out); err != nil {
			t.Fatalf("%s %q: %v", c.service, c.protocol, err)
		}
		if !strings.HasPrefix(out.String(), c.prefix) {
			t.Fatalf("%s %q: output %q, want prefix %q", c.service, c.protocol, out.String(), c.prefix)
		}
	}
}

func TestServeRefusals(t *testing.T) {
	e := newEnv(t)
	e.rec.rateErr = problem.New(problem.Throttled, "slow down")
	base := hosting.Op{Principal: e.bob, ProjectKey: "PROJ", Slug: "app", Transport: "ssh"}
	cases := []struct {
		name    string
		edit    func(*hosting.Op)
		kind    problem.Kind
		outcome string
	}{
		{"unknown service", func(o *hosting.Op) { o.Service = "git-daemon" }, problem.Invalid, "invalid"},
		{"archive over http", func(o *hosting.Op) { o.Service = hosting.UploadArchive; o.Stateless = true }, problem.Invalid, "invalid"},
		{"push by a reader", func(o *hosting.Op) { o.Service = hosting.ReceivePack }, problem.Forbidden, "forbidden"},
		{"rate limited", func(o *hosting.Op) { o.Service = hosting.UploadPack }, problem.Throttled, "throttled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op := base
			c.edit(&op)
			err := e.svc.Serve(context.Background(), op, strings.NewReader(""), io.Discard)
			if !problem.Is(err, c.kind) {
				t.Fatalf("got %v, want %v", err, c.kind)
			}
			cmd := strings.TrimPrefix(op.Service, "git-")
			if n := opsCount(t, e.reg, cmd, c.outcome); n != 1 {
				t.Fatalf("sluice_git_operations_total{command=%q,outcome=%q} = %v", cmd, c.outcome, n)
			}
		})
	}
	if n := e.git.Started("upload-pack") + e.git.Started("receive-pack"); n != 0 {
		t.Fatalf("%v git processes started for refused operations", n)
	}
}

// opsCount reads one sluice_git_operations_total series (transport ssh).
func opsCount(t *testing.T, reg *prometheus.Registry, command, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_git_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["command"] == command && labels["outcome"] == outcome && labels["transport"] == "ssh" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series for command=%s outcome=%s", command, outcome)
	return 0
}

// TestSSHv0Session: a protocol v0 SSH session goes through the cache for
// its advertisement and a request ending in done, and runs one git as
// before when the cache declines.
func TestSSHv0Session(t *testing.T) {
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	cases := []struct {
		mode    string
		calls   string
		gitRuns float64
	}{
		// Advertisement and pack: two stateless generations.
		{"miss", "ratelimit,cache,admit,release,cache,admit,release", 2},
		{"decline", "ratelimit,cache,admit,release", 1},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			e := newEnv(t)
			e.rec.cacheMode = c.mode
			head, err := e.git.Output(context.Background(), gitcmd.Cmd{Dir: e.repos.Path(e.repo.ID), Name: "rev-parse", Args: []string{"main"}})
			if err != nil {
				t.Fatal(err)
			}
			req := pkt("want "+strings.TrimSpace(string(head))+" side-band-64k ofs-delta\n") + "0000" + pkt("done\n")
			op := hosting.Op{Principal: e.bob, ProjectKey: "PROJ", Slug: "app", Service: hosting.UploadPack, Transport: "ssh"}
			var out bytes.Buffer
			if err := e.svc.Serve(context.Background(), op, strings.NewReader(req), &out); err != nil {
				t.Fatal(err)
			}
			if got := e.rec.Calls(); got != c.calls {
				t.Fatalf("calls %s, want %s", got, c.calls)
			}
			if n := e.git.Started("upload-pack"); n != c.gitRuns {
				t.Fatalf("%v upload-pack processes, want %v", n, c.gitRuns)
			}
			s := out.String()
			if !strings.Contains(s, " HEAD\x00") || strings.Contains(s, "no-done") || !strings.Contains(s, "0008NAK\n") || !strings.Contains(s, "PACK") {
				t.Fatalf("output %q", s)
			}
		})
	}
}
