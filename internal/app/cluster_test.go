package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/cluster"
	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

func testConfig(t *testing.T, dir string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Data.Dir = dir
	cfg.Server.HTTPAddr = "127.0.0.1:0"
	cfg.Server.SSHAddr = ""
	cfg.Git.HookBinary = "/bin/false" // no push happens here
	if err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A second server on one SQLite database is refused with a message that
// names the holder; the admin CLI's app still opens beside it, and the
// lock goes with the first server.
func TestSQLiteSingleServer(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	logger := slog.New(slog.DiscardHandler)
	t.Setenv("SLUICE_ADMIN_PASSWORD", "pw-for-tests")
	ctx := context.Background()

	first, err := New(ctx, cfg, logger, Options{Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, cfg, logger, Options{Stdout: io.Discard})
	if !problem.Is(err, problem.Unavailable) {
		first.Close()
		t.Fatalf("second server: %v, want Unavailable", err)
	}
	db := strings.TrimPrefix(cfg.Database.URL, "sqlite://")
	msg := problem.Message(err)
	for _, want := range []string{"another sluice server is using " + db, "(pid ", "SQLite supports one server — use PostgreSQL for a cluster"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	admin, err := New(ctx, cfg, logger, Options{Admin: true})
	if err != nil {
		t.Fatalf("admin app beside a server: %v", err)
	}
	if _, err := admin.ClusterNodes(ctx); err != nil {
		t.Errorf("admin cluster status: %v", err)
	}
	admin.Close()

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := New(ctx, cfg, logger, Options{Stdout: io.Discard})
	if err != nil {
		t.Fatalf("server after the first closed: %v", err)
	}
	again.Close()
}

func TestStaleLeftovers(t *testing.T) {
	old := time.Now().Add(-2 * time.Hour)
	for _, tc := range []struct {
		name  string
		path  string // relative to the repository; a trailing / makes a directory
		aged  bool
		stale bool
	}{
		{"clean", "", false, false},
		{"fresh packed-refs lock", "packed-refs.lock", false, false},
		{"old packed-refs lock", "packed-refs.lock", true, true},
		{"old ref lock", "refs/heads/feature/x.lock", true, true},
		{"old non-lock ref", "refs/heads/main", true, false},
		{"old quarantine", "objects/tmp_objdir-incoming-abc/", true, true},
		{"fresh quarantine", "objects/tmp_objdir-incoming-abc/", false, false},
		{"old temporary pack", "objects/pack/tmp_pack_123", true, true},
		{"old midx lock", "objects/pack/multi-pack-index.lock", true, true},
		{"housekeeping flock is not a lock file", "sluice-housekeeping", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{"refs/heads", "objects/pack", "objects/info"} {
				os.MkdirAll(filepath.Join(dir, d), 0o755)
			}
			if tc.path != "" {
				p := filepath.Join(dir, tc.path)
				if strings.HasSuffix(tc.path, "/") {
					os.MkdirAll(p, 0o755)
				} else {
					os.MkdirAll(filepath.Dir(p), 0o755)
					os.WriteFile(p, nil, 0o644)
				}
				if tc.aged {
					os.Chtimes(p, old, old)
				}
			}
			if got := staleLeftovers(dir, time.Now()); got != tc.stale {
				t.Errorf("staleLeftovers = %v, want %v", got, tc.stale)
			}
		})
	}
}

// Rate-limit settings travel over the event bus both ways: a change made
// on this node is published, and an event from another node makes this
// one re-read the setting at once.
func TestSettingsOverBus(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	t.Setenv("SLUICE_ADMIN_PASSWORD", "pw-for-tests")
	ctx := context.Background()
	a, err := New(ctx, cfg, slog.New(slog.DiscardHandler), Options{Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	heard := make(chan string, 4)
	a.Bus().Subscribe(cluster.TopicSettings, func(p []byte) { heard <- string(p) })
	rl, _ := a.Throttle.RateLimits()
	rl.Bucket = 77
	if err := a.Throttle.SetRateLimits(ctx, rl); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-heard:
		if got != throttle.SettingRateLimits {
			t.Fatalf("published %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetRateLimits published nothing")
	}

	// Another node stores new settings and tells everyone.
	rl.Bucket = 99
	b, err := json.Marshal(rl)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Store.PutSetting(ctx, throttle.SettingRateLimits, string(b)); err != nil {
		t.Fatal(err)
	}
	if err := a.Bus().Publish(ctx, cluster.TopicSettings, []byte(throttle.SettingRateLimits)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second) // well inside the 5 s poll
	for {
		if cur, _ := a.Throttle.RateLimits(); cur.Bucket == 99 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the settings event did not reload the rate limits")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An admin command run by another binary on the same data directory (the
// README's `go run ./cmd/sluice admin …`, whose binary is deleted when it
// exits) must not rewrite the running server's hook scripts.
func TestAdminKeepsServerHooks(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Git.HookBinary = "/opt/sluice/bin/sluice"
	t.Setenv("SLUICE_ADMIN_PASSWORD", "pw-for-tests")
	ctx := context.Background()
	server, err := New(ctx, cfg, slog.New(slog.DiscardHandler), Options{Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	adminCfg := cfg
	adminCfg.Git.HookBinary = "/tmp/go-build123/exe/sluice"
	admin, err := New(ctx, adminCfg, slog.New(slog.DiscardHandler), Options{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	admin.Close()
	hook, err := os.ReadFile(filepath.Join(server.Git.HooksDir(), "pre-receive"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(hook), "/opt/sluice/bin/sluice") {
		t.Fatalf("the server's hook now runs another binary:\n%s", hook)
	}
}

// The job queue's rescue sees a node whose heartbeat stopped as not live,
// so its running jobs go back in the queue.
func TestLiveNodesForJobRescue(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	ctx := context.Background()
	a, err := New(ctx, cfg, slog.New(slog.DiscardHandler), Options{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, id := range []string{"alive", "dead"} {
		if err := a.DB.RegisterNode(ctx, store.Node{ID: id}, "i-"+id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.DB.SQL().ExecContext(ctx,
		`UPDATE nodes SET heartbeat_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour') WHERE id = 'dead'`); err != nil {
		t.Fatal(err)
	}
	live, err := a.liveNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !live["alive"] || live["dead"] || len(live) != 2 {
		t.Errorf("liveNodes = %v, want alive only", live)
	}
}

// A node on port 0 without node.id is one identity to the registry and
// to the job queue: a job it is running names a node the registry lists
// as live, so no other node's rescue takes the job for an orphan.
func TestNodeIdentityOnPortZero(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Node.ID = ""
	t.Setenv("SLUICE_ADMIN_PASSWORD", "pw-for-tests")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, cfg, slog.New(slog.DiscardHandler), Options{Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	running, release := make(chan struct{}), make(chan struct{})
	a.Jobs.Handle("identity-probe", func(ctx context.Context, _ json.RawMessage) error {
		close(running)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()
	deadline := time.Now().Add(10 * time.Second)
	for (webCluster{a}).Self() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the node did not register")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if self := (webCluster{a}).Self(); self != a.nodeID || !strings.Contains(self, ":0/") {
		t.Fatalf("registry id %q, job queue and hooks id %q: want the same port-0 id", self, a.nodeID)
	}
	if err := a.Jobs.Enqueue(ctx, "identity-probe", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	case <-time.After(15 * time.Second):
		t.Fatal("the probe job did not start")
	}
	defer close(release)
	var raw string
	if err := a.DB.SQL().QueryRowContext(ctx, `SELECT json(attempted_by) FROM river_job WHERE kind = 'identity-probe'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var by []string
	if err := json.Unmarshal([]byte(raw), &by); err != nil || len(by) == 0 {
		t.Fatalf("attempted_by %q: %v", raw, err)
	}
	node := by[len(by)-1][:strings.LastIndexByte(by[len(by)-1], '_')]
	live, err := a.liveNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !live[node] {
		t.Fatalf("the running job's node %q is not live for the rescue (live: %v)", node, live)
	}
}
