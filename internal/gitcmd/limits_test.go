package gitcmd

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// bigTextBlobs writes two blobs of lines lines each that differ in one
// line: diffing them makes xdiff hold both and an index of every line.
func bigTextBlobs(t *testing.T, r *Runner, dir string, lines int) (string, string) {
	t.Helper()
	a := strings.Repeat("x\n", lines)
	b := a[:lines] + "y\n" + a[lines+2:]
	var ids []string
	for _, s := range []string{a, b} {
		out, err := r.Output(context.Background(), Cmd{Dir: dir, Name: "hash-object", Flags: []string{"-w", "--stdin"}, Stdin: strings.NewReader(s)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, strings.TrimSpace(string(out)))
	}
	return ids[0], ids[1]
}

// TestReadMemoryLimit diffs two 2 MiB files of a million lines, which
// needs well over 64 MiB of address space: under a 64 MiB limit git fails
// cleanly and the caller gets a TooLarge problem naming the setting, and
// the same diff without the bound succeeds, so the bound (not the data)
// is what failed.
func TestReadMemoryLimit(t *testing.T) {
	r := newRunner(t, "", func(c *Config) { c.ReadMemoryLimit = 64 << 20 })
	f := makeRepo(t, r)
	a, b := bigTextBlobs(t, r, f.dir, 1_000_000)
	ctx := context.Background()

	_, err := r.Output(ctx, Cmd{Dir: f.dir, Name: "diff", Flags: []string{"--no-color"}, Args: []string{a, b}})
	if !errors.Is(err, ErrMemoryLimit) || !problem.Is(err, problem.TooLarge) {
		t.Fatalf("diff under the limit: got %v, want a TooLarge memory-limit error", err)
	}
	if msg := problem.Message(err); !strings.Contains(msg, "git.read_memory_limit") || !strings.Contains(msg, "64 MiB") {
		t.Errorf("message %q does not name the limit", msg)
	}
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Errorf("the exit error is not kept as the cause: %v", err)
	}

	out, err := r.Output(ctx, Cmd{Dir: f.dir, Name: "diff", Flags: []string{"--no-color"}, Args: []string{a, b}, Unbounded: true})
	if err != nil || !strings.Contains(string(out), "+y") {
		t.Fatalf("unbounded diff: %v (%d bytes)", err, len(out))
	}

	// Small reads still work under the limit, including from the pool.
	if _, err := r.Output(ctx, Cmd{Dir: f.dir, Name: "log", Flags: []string{"--oneline"}, Args: []string{f.commit}}); err != nil {
		t.Fatalf("log under the limit: %v", err)
	}
	cf, release, err := r.CatFile(ctx, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := cf.Info(f.commit); err != nil {
		t.Fatal(err)
	}
	limits, err := os.ReadFile("/proc/" + strconv.Itoa(cf.proc.Pid()) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(limits), "Max address space         "+strconv.Itoa(64<<20)) {
		t.Errorf("cat-file runs without the address-space limit:\n%s", limits)
	}
}

// TestHeavyCommandsUnbounded checks that clones and pushes keep running
// without the read bounds: upload-pack is started directly, not through the
// limiting shell.
func TestHeavyCommandsUnbounded(t *testing.T) {
	r := newRunner(t, "", func(c *Config) { c.ReadMemoryLimit = 64 << 20; c.ReadTimeout = time.Second })
	f := makeRepo(t, r)
	pr, pw := io.Pipe()
	p, err := r.Start(context.Background(), Cmd{Dir: f.dir, Name: "upload-pack", Flags: []string{"--stateless-rpc"}, Stdin: pr, Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pw.Close(); _ = p.Wait() }()
	if p.cmd.Path != r.binary {
		t.Errorf("upload-pack started as %s, want git itself", p.cmd.Path)
	}
	if d, ok := p.ctx.Deadline(); !ok || time.Until(d) < 30*time.Second {
		t.Errorf("upload-pack deadline %v, want Config.Timeout (1 min)", d)
	}
	limits, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(limits), strconv.Itoa(64<<20)) {
		t.Errorf("upload-pack has the read memory limit:\n%s", limits)
	}
}

// TestReadTimeout starts a cat-file that waits for input forever: the
// read timeout ends it and the error is a TooLarge problem naming
// git.read_timeout, not a bare timeout.
func TestReadTimeout(t *testing.T) {
	r := newRunner(t, "", func(c *Config) { c.ReadTimeout = 200 * time.Millisecond })
	f := makeRepo(t, r)
	pr, pw := io.Pipe()
	defer pw.Close()
	start := time.Now()
	err := r.Run(context.Background(), Cmd{Dir: f.dir, Name: "cat-file", Flags: []string{"--batch"}, Stdin: pr, Stdout: io.Discard})
	if !errors.Is(err, ErrTimeout) || !problem.Is(err, problem.TooLarge) {
		t.Fatalf("got %v, want a TooLarge timeout", err)
	}
	if msg := problem.Message(err); !strings.Contains(msg, "git.read_timeout") || !strings.Contains(msg, "200ms") {
		t.Errorf("message %q does not name the limit", msg)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("took %v", el)
	}
}

// TestMaxDiffBlobSize: a blob over the limit is shown as binary, without
// git reading it into a diff.
func TestMaxDiffBlobSize(t *testing.T) {
	r := newRunner(t, "", func(c *Config) { c.MaxDiffBlobSize = 1000 })
	f := makeRepo(t, r)
	a, b := bigTextBlobs(t, r, f.dir, 1000)
	out, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "diff", Flags: []string{"--no-color"}, Args: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Binary files") {
		t.Errorf("a blob over the limit was diffed:\n%s", out)
	}
	if r.MaxDiffBlobSize() != 1000 {
		t.Errorf("MaxDiffBlobSize = %d", r.MaxDiffBlobSize())
	}
	c, _ := bigTextBlobs(t, r, f.dir, 10)
	small, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "diff", Flags: []string{"--no-color"}, Args: []string{f.blob, c}})
	if err != nil || strings.Contains(string(small), "Binary files") {
		t.Errorf("small blob diff: %v\n%s", err, small)
	}
}
