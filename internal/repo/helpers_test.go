package repo

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// newManager returns a Manager over a fresh root, with a gitcmd Runner
// whose hooks do nothing.
func newManager(t *testing.T) *Manager {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	runner, err := gitcmd.New(gitcmd.Config{Binary: "git", HomeDir: t.TempDir(), HookBinary: "/bin/true"}, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	return NewManager(t.TempDir(), runner, logger)
}

// gitEnv isolates the fixture-building git from the machine's config. The
// fixtures are built with the git binary directly, like a user's client
// would, not through gitcmd: they are test input, not code under test.
func gitEnv(t *testing.T, home string, date string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Ada Author", "GIT_AUTHOR_EMAIL=ada@example.com", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=Cy Committer", "GIT_COMMITTER_EMAIL=cy@example.com", "GIT_COMMITTER_DATE=" + date,
	}
}

// work is a non-bare repository in which tests build history to push.
type work struct {
	t    *testing.T
	dir  string
	home string
	tick int
}

func newWork(t *testing.T) *work {
	t.Helper()
	w := &work{t: t, dir: t.TempDir(), home: t.TempDir()}
	w.git("init", "-q", "-b", "main")
	return w
}

func (w *work) git(args ...string) string {
	w.t.Helper()
	// Every command gets the next second, so commit times are distinct and
	// log order is deterministic.
	date := fmt.Sprintf("%d +0130", 1700000000+w.tick*60)
	cmd := exec.Command("git", append([]string{"-C", w.dir}, args...)...)
	cmd.Env = gitEnv(w.t, w.home, date)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		w.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func (w *work) write(name, content string) {
	w.t.Helper()
	p := filepath.Join(w.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// commit stages everything and commits; it returns the new commit's id.
func (w *work) commit(msg string) string {
	w.t.Helper()
	w.tick++
	w.git("add", "-A")
	w.git("commit", "-q", "-m", msg)
	return w.git("rev-parse", "HEAD")
}

// history is the fixture most read tests use.
type history struct {
	c1, c2, c3 string // main: root, second, third (HEAD of main)
	feature    string // feature branch tip, child of c2
	v2tag      string // the annotated tag object v2 (points at c3)
	subCommit  string // the commit a submodule entry points at
}

// seed creates repository id with default branch main and pushes a small
// history into it:
//
//	c1  README.md, dir/a.txt, -dash.txt, "with space.txt"
//	c2  README.md changed, dir/sub/b.txt, big.bin (binary), feature branches here
//	c3  dir/a.txt renamed to dir/c.txt, script.sh (0755), link -> README.md, sub (submodule)
//	feature: feature.txt on top of c2
//	tags: v1 (lightweight, c1), v2 (annotated, c3)
func seed(t *testing.T, m *Manager, id int64) (*work, history) {
	t.Helper()
	if err := m.Create(context.Background(), id, "main"); err != nil {
		t.Fatal(err)
	}
	w := newWork(t)
	var h history
	w.write("README.md", "hello\n")
	w.write("dir/a.txt", strings.Repeat("line a\n", 10))
	w.write("-dash.txt", "dash\n")
	w.write("with space.txt", "space\n")
	h.c1 = w.commit("first\n\nwith a body")
	w.write("README.md", "hello\nworld\n")
	w.write("dir/sub/b.txt", "b\n")
	big := make([]byte, 3000)
	for i := range big {
		big[i] = byte(i % 251)
	}
	w.write("big.bin", string(big))
	h.c2 = w.commit("second")
	w.git("checkout", "-q", "-b", "feature")
	w.write("feature.txt", "feature\n")
	h.feature = w.commit("feature work")
	w.git("checkout", "-q", "main")
	w.git("mv", "dir/a.txt", "dir/c.txt")
	w.write("script.sh", "#!/bin/sh\necho hi\n")
	if err := os.Chmod(filepath.Join(w.dir, "script.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README.md", filepath.Join(w.dir, "link")); err != nil {
		t.Fatal(err)
	}
	// A gitlink to a commit this repository does not have, as with any
	// real submodule.
	h.subCommit = "1234567890abcdef1234567890abcdef12345678"
	w.git("add", "-A")
	w.git("update-index", "--add", "--cacheinfo", "160000,"+h.subCommit+",sub")
	w.tick++
	w.git("commit", "-q", "-m", "third")
	h.c3 = w.git("rev-parse", "HEAD")
	w.git("tag", "v1", h.c1)
	w.git("tag", "-a", "-m", "release 2", "v2", h.c3)
	h.v2tag = w.git("rev-parse", "v2")
	w.git("push", "-q", m.Path(id), "main", "feature", "--tags")
	return w, h
}

// bareGit runs git directly in a managed repository, for checks (fsck) and
// for changes a test makes behind the Manager's back.
func bareGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + dir}, args...)...)
	cmd.Env = gitEnv(t, t.TempDir(), "1700000000 +0000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func wantKind(t *testing.T, err error, k problem.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", k)
	}
	if got := problem.KindOf(err); got != k {
		t.Fatalf("got error %v of kind %v, want %v", err, got, k)
	}
}
