package datagen

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		o       Options
		want    Counts
		wantErr bool
	}{
		{Options{Profile: "large", Scale: 0.005}, Counts{Users: 125, Groups: 250, Projects: 84, Repositories: 260, PullRequests: 4250, Comments: 17500}, false},
		{Options{Profile: "Small", Scale: 0.05}, Counts{Users: 150, Groups: 300, Projects: 100, Repositories: 310, PullRequests: 5900, Comments: 24300}, false},
		{Options{Profile: "small", Scale: 1e-9}, Counts{1, 1, 1, 1, 1, 1}, false},
		{Options{Profile: "huge", Scale: 1}, Counts{}, true},
		{Options{Profile: "small", Scale: 0}, Counts{}, true},
	}
	for _, tt := range tests {
		got, err := tt.o.Plan()
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Plan(%+v) = %+v, %v; want %+v", tt.o, got, err, tt.want)
		}
	}
}

// TestGenerate builds a tiny data set twice on SQLite: the second run must
// create nothing, and the forks must share the seed's objects.
func TestGenerate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	git, err := gitcmd.New(gitcmd.Config{HomeDir: filepath.Join(dir, "home"), HookBinary: "/bin/true"}, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	m := repo.NewManager(filepath.Join(dir, "repos"), git, logger)
	deps := Deps{DB: db, Repos: m, Auth: auth.New(db, logger, nil)}
	o := Options{Profile: "small", Scale: 0.001, Seed: 7, Seeds: 2, Commits: 220, LoadUsers: 3,
		TokensFile: filepath.Join(dir, "tokens"), KeysFile: filepath.Join(dir, "keys"), SeedCache: filepath.Join(dir, "cache")}
	rep, err := Generate(ctx, deps, o)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := o.Plan()
	want := plan
	want.Users += o.LoadUsers
	if rep.Created != want {
		t.Fatalf("created %+v, want %+v", rep.Created, want)
	}
	again, err := Generate(ctx, deps, o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Created != (Counts{}) {
		t.Fatalf("second run created %+v, want nothing", again.Created)
	}
	for table, n := range map[string]int{store.BulkUsers: want.Users, store.BulkRepos: plan.Repositories, store.BulkPullRequests: plan.PullRequests} {
		got, err := db.CountRows(ctx, table)
		if err != nil || int(got) != n {
			t.Errorf("%s: %d rows, %v; want %d", table, got, err, n)
		}
	}
	// Repository 3 (a fork of seed 1) has the seed's history through its
	// alternates; the path scheme is the one experiments address.
	r, err := db.RepoBySlug(ctx, ProjectKey(2%plan.Projects), RepoSlug(2))
	if err != nil {
		t.Fatal(err)
	}
	if r.ForkOf == 0 {
		t.Error("repository 2 is not recorded as a fork")
	}
	out, err := exec.Command("git", "-C", m.Path(r.ID), "rev-list", "--count", "main").Output()
	if err != nil || strings.TrimSpace(string(out)) != "220" {
		t.Fatalf("fork history: %q, %v", out, err)
	}
	toks, err := ReadTokens(o.TokensFile)
	if err != nil || len(toks) != 3 {
		t.Fatalf("tokens: %v, %v", toks, err)
	}
	p, err := deps.Auth.Token(ctx, toks[0][1])
	if err != nil || p.Name != LoadUserName(1) {
		t.Fatalf("load token authenticates %+v, %v", p, err)
	}
	// Every load user has one registered key (the second run added none).
	keys, err := ReadKeys(o.KeysFile)
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys: %v, %v", keys, err)
	}
	for i := 1; i <= 3; i++ {
		name := LoadUserName(i)
		p, err := deps.Auth.PublicKey(ctx, keys[name].PublicKey())
		if err != nil || p.Name != name {
			t.Fatalf("%s's key authenticates %+v, %v", name, p, err)
		}
		if list, err := db.ListSSHKeys(ctx, p.UserID); err != nil || len(list) != 1 {
			t.Fatalf("%s has %d keys (%v), want 1", name, len(list), err)
		}
	}
	if fi, err := os.Stat(o.KeysFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keys file mode: %v, %v", fi, err)
	}
}

func TestReadKeysRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, text, want string }{
		{"missing is empty", "", ""},
		{"no seed", "load-0001\n", ":1:"},
		{"short seed", "load-0001 AAAA\n", ":1:"},
		{"not base64", "load-0001 !!!\n", ":1:"},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, fmt.Sprint(i))
		if tt.text != "" {
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		keys, err := ReadKeys(path)
		if tt.want == "" {
			if err != nil || len(keys) != 0 {
				t.Errorf("%s: %v, %v", tt.name, keys, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}
