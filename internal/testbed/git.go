package testbed

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitEnv is the environment tests run the git client with: no user or
// system configuration, no prompts, a fixed identity and dates so that
// generated histories are reproducible.
func GitEnv(home string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Sluice Test",
		"GIT_AUTHOR_EMAIL=test@sluice.invalid",
		"GIT_COMMITTER_NAME=Sluice Test",
		"GIT_COMMITTER_EMAIL=test@sluice.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
		"GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"LANG=C",
	}
	return env
}

// Git runs the git client in dir and returns its stdout; it fails the test
// on a non-zero exit.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitErr(dir, args...)
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// GitErr runs the git client and returns stdout, or an error carrying
// stderr.
func GitErr(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = GitEnv(filepath.Join(os.TempDir(), "sluice-test-home"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// WorkTree makes a non-bare repository with n commits on branch main, each
// changing a file, and returns its path.
func WorkTree(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	Git(t, dir, "init", "-q", "-b", "main")
	for i := 0; i < n; i++ {
		name := filepath.Join(dir, fmt.Sprintf("file%d.txt", i%5))
		if err := os.WriteFile(name, []byte(fmt.Sprintf("line %d\n%s", i, strings.Repeat("x", i%7))), 0o644); err != nil {
			t.Fatal(err)
		}
		Git(t, dir, "add", "-A")
		Git(t, dir, "commit", "-q", "-m", fmt.Sprintf("commit %d", i))
	}
	return dir
}
