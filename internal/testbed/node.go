// Package testbed starts the real components Sluice's tests run against:
// the sluice binary (built once per test run), in-process nodes on
// 127.0.0.1 random ports, a throw-away PostgreSQL, and helpers that create
// users, projects and repositories and generate history with the real git.
//
// Tests read like a story:
//
//	n := testbed.NewNode(t, testbed.NodeOptions{})
//	repo := n.CreateRepo(t, "PROJ", "app")
//	testbed.Git(t, dir, "push", n.CloneURL("PROJ", "app", n.AdminToken))
package testbed

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/store"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of a sluice binary: $SLUICE_TEST_BINARY when set
// (make test builds it once for every package), else one built now, once
// per test process.
func Binary(t testing.TB) string {
	skipShort(t)
	t.Helper()
	if p := os.Getenv("SLUICE_TEST_BINARY"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// sluice-hook goes next to sluice, where the node finds it.
		buildPath = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/sluice", "./cmd/sluice-hook")
		cmd.Dir = moduleRoot()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build ./cmd/sluice ./cmd/sluice-hook: " + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// NodeOptions adjust a test node.
type NodeOptions struct {
	// DatabaseURL selects the store; empty means SQLite in the node's dir.
	DatabaseURL string
	// Repositories is the repository root; empty means one of its own.
	// Nodes of one cluster share it.
	Repositories string
	// Configure may change the configuration before the node is built.
	Configure func(*config.Config)
	// Logger receives the node's log; nil discards it unless
	// SLUICE_TEST_LOG=1.
	Logger *slog.Logger
	// SSH serves git over SSH on 127.0.0.1, on a port of its own.
	SSH bool
}

// Node is an in-process Sluice node serving on 127.0.0.1.
type Node struct {
	App           *app.App
	URL           string // http://127.0.0.1:PORT
	AdminPassword string
	cancel        context.CancelFunc
	done          chan error
}

// NewNode starts a node and stops it when the test ends.
func NewNode(t testing.TB, opts NodeOptions) *Node {
	t.Helper()
	skipShort(t)
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Data.Dir = dir
	cfg.Server.HTTPAddr = "127.0.0.1:0"
	cfg.Server.SSHAddr = ""
	if opts.SSH {
		cfg.Server.SSHAddr = "127.0.0.1:0"
	}
	cfg.Database.URL = opts.DatabaseURL
	cfg.Storage.Repositories = opts.Repositories
	cfg.Git.HookBinary = Binary(t)
	cfg.Server.ShutdownTimeout = config.Duration{Duration: 5 * time.Second}
	// Tests drive one user as fast as the machine allows: a per-user
	// bucket would make them fail by speed, not by fault. Tests of rate
	// limiting turn it on in Configure.
	cfg.Throttle.RateLimit = false
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	if err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := opts.Logger
	if logger == nil {
		var w io.Writer = io.Discard
		if os.Getenv("SLUICE_TEST_LOG") == "1" {
			w = os.Stderr
		}
		logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	const adminPassword = "admin-password-for-tests"
	t.Setenv("SLUICE_ADMIN_PASSWORD", adminPassword)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, logger, app.Options{Stdout: io.Discard})
	if err != nil {
		cancel()
		t.Fatalf("start node: %v", err)
	}
	if err := a.Listen(); err != nil {
		cancel()
		a.Close()
		t.Fatal(err)
	}
	n := &Node{App: a, URL: "http://" + a.HTTPAddr(), AdminPassword: adminPassword, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- a.Serve(ctx) }()
	t.Cleanup(n.Stop)
	return n
}

// Stop shuts the node down and waits for it.
func (n *Node) Stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	<-n.done
	n.App.Close()
	n.cancel = nil
}

// testActor is the test itself, which sets up what it needs like the
// machine's operator would.
var testActor = accounts.System("testbed")

// Store is the node's store.
func (n *Node) Store() store.Store { return n.App.Store }

// CreateUser creates an active user with the given password.
func (n *Node) CreateUser(t testing.TB, name, password string) *store.User {
	t.Helper()
	u, err := n.App.Accounts.CreateUser(context.Background(), testActor, accounts.NewUser{Name: name, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Token creates an access token for the user.
func (n *Node) Token(t testing.TB, userID int64, scope store.Scope) string {
	t.Helper()
	ctx := context.Background()
	u, err := n.App.Store.UserByID(ctx, userID)
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := n.App.Accounts.CreateToken(ctx, testActor, u, accounts.NewToken{Name: "test-" + string(scope), Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// CreateProject creates a project, or returns the existing one.
func (n *Node) CreateProject(t testing.TB, key string) *store.Project {
	t.Helper()
	ctx := context.Background()
	if p, err := n.App.Store.ProjectByKey(ctx, key); err == nil {
		return p
	}
	p, err := n.App.Accounts.CreateProject(ctx, testActor, accounts.NewProject{Key: key, Name: key})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// CreateRepo creates a private repository (and its project if needed).
func (n *Node) CreateRepo(t testing.TB, projectKey, name string) *store.Repository {
	t.Helper()
	p := n.CreateProject(t, projectKey)
	r, err := n.App.Accounts.CreateRepository(context.Background(), testActor, p, accounts.NewRepository{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Grant gives a user a repository permission.
func (n *Node) Grant(t testing.TB, r *store.Repository, userID int64, perm store.Permission) {
	t.Helper()
	if err := n.App.Accounts.Grant(context.Background(), testActor, accounts.Target{Repo: r}, []store.Grant{{UserID: userID}}, perm); err != nil {
		t.Fatal(err)
	}
}

// CloneURL is the HTTP clone URL of a repository with credentials embedded
// (user may be empty for anonymous).
func (n *Node) CloneURL(projectKey, slug, user, secret string) string {
	u, _ := url.Parse(n.URL + "/scm/" + strings.ToLower(projectKey) + "/" + slug + ".git")
	if user != "" {
		u.User = url.UserPassword(user, secret)
	}
	return u.String()
}

// SSHURL is the SSH clone URL of a repository, for git with
// GIT_SSH_COMMAND pointing at the client key (see the sshd tests). The node
// must have been started with NodeOptions.SSH.
func (n *Node) SSHURL(projectKey, slug string) string {
	return "ssh://git@" + n.App.SSHAddr() + "/" + projectKey + "/" + slug + ".git"
}
