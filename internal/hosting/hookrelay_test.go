package hosting_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/githttp"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// recordFails stands in for sluice-hook when the database goes away
// between pre-receive and the ref update: the reference-transaction
// hook's prepared phase prints the hooks server's message and refuses.
// The second line is git-like noise naming a server path, which must not
// reach the user.
const recordFails = `#!/bin/sh
if [ "$2" = reference-transaction ] && [ "$3" = prepared ]; then
	cat >/dev/null
	echo "sluice: the ref update could not be recorded; nothing was changed, try again" >&2
	echo "error: cannot lock /srv/secret/repositories/1.git" >&2
	exit 1
fi
cat >/dev/null
exit 0
`

// TestPushShowsRefRecordFailureOverHTTP: the reference-transaction hook's
// message reaches an HTTP client as "remote: …", although git writes it to
// receive-pack's stderr, which stateless HTTP has no channel for; git's
// own stderr does not. The push changes nothing.
func TestPushShowsRefRecordFailureOverHTTP(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	logger := slog.New(slog.DiscardHandler)
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "db"), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hook := filepath.Join(dir, "fake-sluice")
	if err := os.WriteFile(hook, []byte(recordFails), 0o755); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	git, err := gitcmd.New(gitcmd.Config{HomeDir: filepath.Join(dir, "home"), HookBinary: hook}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer git.Close()
	repos := repo.NewManager(filepath.Join(dir, "repos"), git, logger)
	a := auth.New(st, logger, reg)
	svc := hosting.New(hosting.Deps{Store: st, Auth: a, Repos: repos, Git: git, Logger: logger, Registerer: reg})
	proj := &store.Project{Key: "PROJ", Name: "Proj"}
	if err := st.CreateProject(ctx, proj); err != nil {
		t.Fatal(err)
	}
	r := &store.Repository{ProjectID: proj.ID, Name: "app"}
	if err := repo.Provision(ctx, st, repos, r); err != nil {
		t.Fatal(err)
	}
	u := &store.User{Name: "alice", DisplayName: "alice", Email: "alice@example.com", Active: true}
	if err := st.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := st.SetRepoPermission(ctx, r.ID, store.Grant{UserID: u.ID, Permission: store.PermRepoWrite}); err != nil {
		t.Fatal(err)
	}
	secret, _, err := a.CreateToken(ctx, u.ID, "push", store.ScopeWrite, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(githttp.New(svc, a, githttp.Config{}, logger))
	defer srv.Close()
	remote := srv.URL + "/scm/proj/app.git"
	ru, _ := url.Parse(remote)
	ru.User = url.UserPassword("alice", secret)

	wt := t.TempDir()
	run := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = wt
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+wt, "GIT_TERMINAL_PROMPT=0", "LANG=C")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=T", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one"},
	} {
		if out, err := run(args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	for _, proto := range []string{"0", "2"} {
		out, err := run("-c", "protocol.version="+proto, "push", ru.String(), "main")
		t.Logf("protocol %s:\n%s", proto, out)
		if err == nil {
			t.Fatalf("protocol %s: push succeeded although the ref update was refused:\n%s", proto, out)
		}
		if !strings.Contains(out, "remote: sluice: the ref update could not be recorded; nothing was changed, try again") {
			t.Errorf("protocol %s: the hook's message did not reach the client:\n%s", proto, out)
		}
		if strings.Contains(out, "/srv/secret") {
			t.Errorf("protocol %s: git's stderr reached the client:\n%s", proto, out)
		}
		if !strings.Contains(out, "[remote rejected] main -> main (the ref update could not be recorded)") {
			t.Errorf("protocol %s: no report for the ref:\n%s", proto, out)
		}
		if strings.Contains(out, "hung up") || strings.Contains(out, "git failed") {
			t.Errorf("protocol %s: the push failed as a transport error:\n%s", proto, out)
		}
	}
	refs, err := exec.Command("git", "-C", repos.Path(r.ID), "for-each-ref").CombinedOutput()
	if err != nil || len(refs) != 0 {
		t.Fatalf("refs after the refused pushes: %s, %v", refs, err)
	}
}
