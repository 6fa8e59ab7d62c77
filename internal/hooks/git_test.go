package hooks

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/store"
)

// gitEnv isolates git from the machine's and the user's configuration.
func gitEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + filepath.Join(home, "gitconfig"),
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
		"LC_ALL=C",
	}
}

func git(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := git(t, dir, env, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// installHooks has gitcmd write its production hook scripts, with this
// test binary (see TestMain) behind a wrapper as the "sluice" they exec, and
// returns the hooks directory.
func installHooks(t *testing.T, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "sluice")
	script := "#!/bin/sh\nSLUICE_TEST_HOOK_MAIN=1 exec '" + strings.ReplaceAll(exe, "'", `'\''`) + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	runner, err := gitcmd.New(gitcmd.Config{HomeDir: filepath.Join(dir, "githome"), HookBinary: wrapper},
		nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("gitcmd.New: %v", err)
	}
	t.Cleanup(func() { runner.Close() })
	return runner.HooksDir()
}

// TestGitPush drives the hooks through a real `git push` into a bare
// repository, with git's hooks exec'ing this test binary as the hook program.
func TestGitPush(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	tmp := t.TempDir()
	env := gitEnv(tmp)
	hooksDir := installHooks(t, tmp)
	remote := filepath.Join(tmp, "remote.git")
	work := filepath.Join(tmp, "work")
	mustGit(t, tmp, env, "init", "-q", "--bare", remote)
	mustGit(t, tmp, env, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README"), []byte("hello\n"), 0o644)
	mustGit(t, work, env, "add", "README")
	mustGit(t, work, env, "commit", "-q", "-m", "first")

	s := newTestServer(t, Config{})
	var (
		mu      sync.Mutex
		pushed  []RefUpdate
		changed []RefUpdate
	)
	s.OnPushed(func(req Request, updates []RefUpdate) {
		mu.Lock()
		defer mu.Unlock()
		pushed = append(pushed, updates...)
	})
	s.OnRefsChanged(func(repoID int64, updates []RefUpdate) {
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, updates...)
	})

	push := func(refspec string) (string, error) {
		hookEnv, done := s.Register(Request{RepoID: 1, Transport: "test", System: true})
		defer done()
		// git clears GIT_CONFIG_PARAMETERS for the other side of a local
		// push, so the setting goes on receive-pack's own command line
		// (run by the shell; the temp dir holds no quote).
		receivePack := "git -c core.hooksPath='" + hooksDir + "' receive-pack"
		return git(t, work, append(env, hookEnv...), "push", "--receive-pack="+receivePack, remote, refspec)
	}
	refs := func() string { return mustGit(t, remote, env, "for-each-ref", "--format=%(refname)") }

	out, err := push("HEAD:refs/heads/--output=x")
	if err == nil {
		t.Fatalf("push of refs/heads/--output=x succeeded:\n%s", out)
	}
	if !strings.Contains(out, `remote: sluice: rejected by the ref name rule: invalid ref name "refs/heads/--output=x"`) ||
		!strings.Contains(out, "pre-receive hook declined") {
		t.Errorf("rejection not explained:\n%s", out)
	}
	if r := refs(); r != "" {
		t.Errorf("refs after a rejected push: %q", r)
	}
	if got := state(t, s.st, 1); got != (store.RepoState{}) {
		t.Errorf("state after a rejected push: %+v", got)
	}

	out, err = push("HEAD:refs/heads/main")
	if err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	if r := refs(); r != "refs/heads/main\n" {
		t.Errorf("refs after push: %q", r)
	}
	if got := state(t, s.st, 1); got != (store.RepoState{Generation: 2, Pending: 0}) {
		t.Errorf("state after push: %+v, want generation 2, pending 0", got)
	}
	head := strings.TrimSpace(mustGit(t, work, env, "rev-parse", "HEAD"))
	want := RefUpdate{Old: zero, New: head, Ref: "refs/heads/main"}
	mu.Lock()
	if len(pushed) != 1 || pushed[0] != want {
		t.Errorf("OnPushed got %v, want %v", pushed, want)
	}
	if len(changed) != 1 || changed[0] != want {
		t.Errorf("OnRefsChanged got %v, want %v", changed, want)
	}
	mu.Unlock()

	// When the database cannot record the transaction, the ref must not
	// move.
	s.st.set(func() { s.st.failBegin = true })
	os.WriteFile(filepath.Join(work, "README"), []byte("hello again\n"), 0o644)
	mustGit(t, work, env, "commit", "-q", "-a", "-m", "second")
	out, err = push("HEAD:refs/heads/main")
	if err == nil {
		t.Fatalf("push succeeded although the ref update could not be recorded:\n%s", out)
	}
	if !strings.Contains(out, "could not be recorded") {
		t.Errorf("failure not explained:\n%s", out)
	}
	if got := strings.TrimSpace(mustGit(t, remote, env, "rev-parse", "refs/heads/main")); got != head {
		t.Errorf("refs/heads/main moved to %s without a record", got)
	}
	if got := state(t, s.st, 1); got.Pending != 0 {
		t.Errorf("state after failed push: %+v", got)
	}
}
