package gitcmd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// newRunner returns a Runner whose hook binary is a shell script with body
// hookBody (default: succeed silently).
func newRunner(t *testing.T, hookBody string, mod ...func(*Config)) *Runner {
	t.Helper()
	dir := t.TempDir()
	if hookBody == "" {
		hookBody = "exit 0"
	}
	hook := filepath.Join(dir, "bin dir", "sluice")
	if err := os.MkdirAll(filepath.Dir(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"+hookBody+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{HomeDir: filepath.Join(dir, "home"), HookBinary: hook, MaxInputSize: 1 << 20, Timeout: time.Minute}
	for _, m := range mod {
		m(&cfg)
	}
	r, err := New(cfg, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

type fixture struct {
	dir, commit, tree, blob string
}

// makeRepo creates a bare repository with one commit on main holding
// README, entirely through the runner.
func makeRepo(t *testing.T, r *Runner) fixture {
	t.Helper()
	ctx := context.Background()
	f := fixture{dir: filepath.Join(t.TempDir(), "r.git")}
	run := func(c Cmd) string {
		t.Helper()
		c.Dir = f.dir
		out, err := r.Output(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		return strings.TrimSpace(string(out))
	}
	run(Cmd{Name: "init", Flags: []string{"--bare", "--quiet"}})
	f.blob = run(Cmd{Name: "hash-object", Flags: []string{"-w", "--stdin"}, Stdin: strings.NewReader("hello\n")})
	f.tree = run(Cmd{Name: "mktree", Stdin: strings.NewReader("100644 blob " + f.blob + "\tREADME\n")})
	f.commit = run(Cmd{Name: "commit-tree", Args: []string{f.tree}, Stdin: strings.NewReader("initial\n"),
		Env: []string{"GIT_AUTHOR_DATE=1700000000 +0000", "GIT_COMMITTER_DATE=1700000000 +0000"}})
	run(Cmd{Name: "update-ref", Args: []string{"refs/heads/main", f.commit}})
	run(Cmd{Name: "symbolic-ref", Args: []string{"HEAD", "refs/heads/main"}})
	return f
}

func TestArgv(t *testing.T) {
	tests := []struct {
		name string
		cmd  Cmd
		want string // space-joined argv; empty means an error is expected
	}{
		{"rev-parse verify", Cmd{Dir: "/r.git", Name: "rev-parse", Flags: []string{"--verify"}, Args: []string{"main"}},
			"--git-dir=/r.git rev-parse --verify --end-of-options main"},
		{"rev-parse without verify gets no end-of-options", Cmd{Dir: "/r.git", Name: "rev-parse", Args: []string{"main"}},
			"--git-dir=/r.git rev-parse main"},
		{"log with paths", Cmd{Dir: "/r.git", Name: "log", Flags: []string{"--format=%H"}, Args: []string{"main"}, Paths: []string{"-dash", "a b"}},
			"--git-dir=/r.git log --format=%H --end-of-options main -- -dash a b"},
		{"empty paths still give --", Cmd{Dir: "/r.git", Name: "log", Paths: []string{}}, "--git-dir=/r.git log --"},
		{"no args, no end-of-options", Cmd{Dir: "/r.git", Name: "for-each-ref", Flags: []string{"--format=%(refname)"}},
			"--git-dir=/r.git for-each-ref --format=%(refname)"},
		{"upload-pack takes the repository as argument", Cmd{Dir: "/r.git", Name: "upload-pack", Flags: []string{"--stateless-rpc", "--advertise-refs"}},
			"upload-pack --stateless-rpc --advertise-refs --end-of-options /r.git"},
		{"upload-archive", Cmd{Dir: "/r.git", Name: "upload-archive"}, "upload-archive /r.git"},
		{"check-ref-format has no end-of-options", Cmd{Name: "check-ref-format", Args: []string{"refs/heads/x"}}, "check-ref-format refs/heads/x"},
		{"two-word subcommand", Cmd{Dir: "/r.git", Name: "commit-graph write", Flags: []string{"--reachable"}},
			"--git-dir=/r.git commit-graph write --reachable"},

		{"user option as argument", Cmd{Dir: "/r.git", Name: "fetch", Args: []string{"--upload-pack=touch /tmp/x"}}, ""},
		{"dash", Cmd{Dir: "/r.git", Name: "log", Args: []string{"-"}}, ""},
		{"NUL in argument", Cmd{Dir: "/r.git", Name: "log", Args: []string{"ma\x00in"}}, ""},
		{"newline in argument", Cmd{Dir: "/r.git", Name: "log", Args: []string{"main\n--all"}}, ""},
		{"CR in argument", Cmd{Dir: "/r.git", Name: "log", Args: []string{"main\r"}}, ""},
		{"empty argument", Cmd{Dir: "/r.git", Name: "log", Args: []string{""}}, ""},
		{"NUL in path", Cmd{Dir: "/r.git", Name: "log", Paths: []string{"a\x00"}}, ""},
		{"flag not an option", Cmd{Dir: "/r.git", Name: "log", Flags: []string{"main"}}, ""},
		{"flag --", Cmd{Dir: "/r.git", Name: "log", Flags: []string{"--"}}, ""},
		{"denied flag", Cmd{Dir: "/r.git", Name: "fetch", Flags: []string{"--upload-pack=sh"}}, ""},
		{"denied exec flag", Cmd{Dir: "/r.git", Name: "archive", Flags: []string{"--exec=sh"}}, ""},
		{"denied -O", Cmd{Dir: "/r.git", Name: "grep", Flags: []string{"-Ovim"}}, ""},
		{"unknown subcommand", Cmd{Dir: "/r.git", Name: "daemon"}, ""},
		{"subcommand with option", Cmd{Dir: "/r.git", Name: "log --all"}, ""},
		{"relative dir", Cmd{Dir: "r.git", Name: "log"}, ""},
		{"unclean dir", Cmd{Dir: "/a/../r.git", Name: "log"}, ""},
		{"upload-pack without repository", Cmd{Name: "upload-pack"}, ""},
		{"upload-pack with arguments", Cmd{Dir: "/r.git", Name: "upload-pack", Args: []string{"x"}}, ""},
		{"noArgs subcommand with arguments", Cmd{Dir: "/r.git", Name: "repack", Args: []string{"x"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cmd.argv()
			if tt.want == "" {
				if err == nil {
					t.Fatalf("argv = %q, want an error", got)
				}
				if !errors.Is(err, ErrInvalidCmd) {
					t.Fatalf("error %v does not wrap ErrInvalidCmd", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(got, " "); s != tt.want {
				t.Errorf("argv = %q\n      want %q", s, tt.want)
			}
		})
	}
}

// TestEndOfOptionsAgainstGit checks the subcommand table against the real
// git: every subcommand marked endOfOptions must treat an option-looking
// word after --end-of-options as a positional argument, and the ones not
// marked must really not understand it (so the table is neither unsafe nor
// needlessly conservative).
func TestEndOfOptionsAgainstGit(t *testing.T) {
	r := newRunner(t, "")
	f := makeRepo(t, r)
	const probe = "--sluice-probe"
	// Flags a subcommand needs before its positional arguments, and
	// positional arguments to add after the probe.
	setup := map[string]struct{ flags, after []string }{
		"cat-file":     {flags: []string{"-t"}},
		"config":       {flags: []string{"--get"}},
		"update-ref":   {flags: []string{"-d"}},
		"merge-base":   {after: []string{"HEAD"}},
		"merge-tree":   {flags: []string{"--write-tree"}, after: []string{"HEAD"}},
		"rev-parse":    {flags: []string{"--verify"}},
		"upload-pack":  {flags: []string{"--advertise-refs"}},
		"receive-pack": {flags: []string{"--advertise-refs"}},
		"init":         {flags: []string{"--bare", "--quiet"}},
	}
	type result struct {
		code           int
		stdout, stderr string
	}
	runRaw := func(t *testing.T, name string, args ...string) result {
		argv := []string{"--git-dir=" + f.dir}
		argv = append(argv, strings.Fields(name)...)
		argv = append(argv, args...)
		cmd := exec.Command(r.binary, argv...)
		cmd.Env = r.baseEnv
		cmd.Dir = t.TempDir() // init creates its probe directory here
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{code, stdout.String(), stderr.String()}
	}
	// usageLike is how git reports an option it did not expect.
	usageLike := func(res result) bool {
		return res.code == 129 || strings.Contains(res.stderr, "unknown option") || strings.Contains(res.stderr, "usage:") ||
			strings.Contains(res.stdout, "--end-of-options") || strings.Contains(res.stdout, "usage")
	}
	for name, sc := range subcommands {
		if sc.noArgs {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := setup[name]
			args := append(append(append([]string{}, s.flags...), "--end-of-options", probe), s.after...)
			res := runRaw(t, name, args...)
			if sc.endOfOptions && usageLike(res) {
				t.Errorf("marked as honouring --end-of-options, but git %s %v: exit %d\nstdout: %s\nstderr: %s", name, args, res.code, res.stdout, res.stderr)
			}
			if !sc.endOfOptions && !usageLike(res) {
				t.Errorf("not marked, but git %s %v seems to honour --end-of-options: exit %d\nstderr: %s", name, args, res.code, res.stderr)
			}
		})
	}
	// rev-parse without --verify echoes the marker in 2.39, which is why
	// the table requires --verify.
	if res := runRaw(t, "rev-parse", "--end-of-options", "HEAD"); !strings.Contains(res.stdout, "--end-of-options") {
		t.Errorf("plain rev-parse now understands --end-of-options (stdout %q); endOfOptionsWith can go", res.stdout)
	}
}

func TestRunRealRepo(t *testing.T) {
	r := newRunner(t, "")
	f := makeRepo(t, r)
	ctx := context.Background()

	out, err := r.Output(ctx, Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--verify"}, Args: []string{"main^{commit}"}})
	if err != nil || strings.TrimSpace(string(out)) != f.commit {
		t.Fatalf("rev-parse = %q, %v; want %s", out, err, f.commit)
	}
	out, err = r.Output(ctx, Cmd{Dir: f.dir, Name: "log", Flags: []string{"--format=%H %s"}, Args: []string{"main"}, Paths: []string{"README"}})
	if err != nil || strings.TrimSpace(string(out)) != f.commit+" initial" {
		t.Fatalf("log = %q, %v", out, err)
	}
	// Pathspec magic is off: ":(top)" names a file that does not exist.
	out, err = r.Output(ctx, Cmd{Dir: f.dir, Name: "log", Flags: []string{"--format=%H"}, Args: []string{"main"}, Paths: []string{":(top)"}})
	if err != nil || len(out) != 0 {
		t.Fatalf("log -- :(top) = %q, %v; want nothing", out, err)
	}
	out, err = r.Output(ctx, Cmd{Dir: f.dir, Name: "ls-tree", Flags: []string{"--name-only"}, Args: []string{"main"}})
	if err != nil || string(out) != "README\n" {
		t.Fatalf("ls-tree = %q, %v", out, err)
	}

	// Non-zero exit: an ExitError with git's message and status.
	err = r.Run(ctx, Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--verify"}, Args: []string{"nosuch"}})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 128 || !strings.Contains(ee.Stderr, "Needed a single revision") {
		t.Fatalf("rev-parse nosuch: %v", err)
	}
	if err := r.Run(ctx, Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--verify", "-q"}, Args: []string{"nosuch"}}); ExitCode(err) != 1 {
		t.Fatalf("rev-parse -q nosuch: %v, want exit 1", err)
	}
	// Stderr is copied to the caller too.
	var stderr bytes.Buffer
	_ = r.Run(ctx, Cmd{Dir: f.dir, Name: "cat-file", Flags: []string{"-t"}, Args: []string{"nosuch"}, Stderr: &stderr})
	if !strings.Contains(stderr.String(), "nosuch") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestOutputLimit(t *testing.T) {
	r := newRunner(t, "")
	f := makeRepo(t, r)
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB, more than a pipe buffer
	blob, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "hash-object", Flags: []string{"-w", "--stdin"}, Stdin: strings.NewReader(big)})
	if err != nil {
		t.Fatal(err)
	}
	c := Cmd{Dir: f.dir, Name: "cat-file", Args: []string{"blob", strings.TrimSpace(string(blob))}}
	if _, err := r.OutputLimit(context.Background(), c, 1000); !errors.Is(err, ErrOutputTooLarge) {
		t.Fatalf("OutputLimit = %v, want ErrOutputTooLarge", err)
	}
	out, err := r.OutputLimit(context.Background(), c, int64(len(big)))
	if err != nil || string(out) != big {
		t.Fatalf("OutputLimit at the limit: %d bytes, %v", len(out), err)
	}
}

func TestEnvironmentIsolation(t *testing.T) {
	// Poison the server's own environment: none of it may reach git.
	serverHome := t.TempDir()
	os.WriteFile(filepath.Join(serverHome, ".gitconfig"), []byte("[sluice]\n\tleak = home\n"), 0o644)
	sys := filepath.Join(t.TempDir(), "system")
	os.WriteFile(sys, []byte("[sluice]\n\tleak = system\n"), 0o644)
	t.Setenv("HOME", serverHome)
	t.Setenv("XDG_CONFIG_HOME", serverHome)
	t.Setenv("GIT_CONFIG_SYSTEM", sys)
	t.Setenv("GIT_CONFIG_PARAMETERS", "'sluice.leak'='parameters'")
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "sluice.leak")
	t.Setenv("GIT_CONFIG_VALUE_0", "count")
	t.Setenv("GIT_DIR", "/nonexistent")
	t.Setenv("LD_PRELOAD", "/nonexistent/sluice-preload.so")

	r := newRunner(t, "")
	f := makeRepo(t, r)
	var stderr bytes.Buffer
	out, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "config", Flags: []string{"--list", "--show-origin"}, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "sluice.leak") {
		t.Errorf("server environment leaked into git config:\n%s", out)
	}
	global := "file:" + filepath.Join(r.HomeDir(), ".gitconfig")
	local := "file:" + filepath.Join(f.dir, "config")
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		origin, _, _ := strings.Cut(line, "\t")
		if origin != global && origin != local {
			t.Errorf("config from unexpected origin: %q", line)
		}
	}
	if !strings.Contains(string(out), "core.hookspath="+r.HooksDir()) {
		t.Errorf("core.hooksPath not pinned:\n%s", out)
	}
	// A loader complaint would mean LD_PRELOAD reached the process.
	if strings.Contains(stderr.String(), "preload") {
		t.Errorf("LD_PRELOAD reached git: %s", stderr.String())
	}

	// GIT_PROTOCOL passes when valid and changes what git does.
	out, err = r.Output(context.Background(), Cmd{Dir: f.dir, Name: "upload-pack", Flags: []string{"--stateless-rpc", "--advertise-refs"}, Env: []string{"GIT_PROTOCOL=version=2"}})
	if err != nil || !bytes.HasPrefix(out, []byte("000eversion 2\n")) {
		t.Fatalf("upload-pack v2 advertisement = %q, %v", out, err)
	}

	for _, env := range [][]string{
		{"LD_PRELOAD=/x.so"},
		{"GIT_DIR=/tmp"},
		{"GIT_CONFIG_PARAMETERS='core.hookspath'='/tmp'"},
		{"PATH=/tmp"},
		{"GIT_PROTOCOL=version=2;rm"},
		{"GIT_PROTOCOL=version=2", "GIT_PROTOCOL=version=1"},
		{"SLUICE_HOOK_=x"},
		{"SLUICE_HOOK_token=x"},
		{"GIT_QUARANTINE_PATH=relative"},
		{"GIT_ALTERNATE_OBJECT_DIRECTORIES=/a:b"},
		{"GIT_AUTHOR_NAME=a\nb"},
		{"GIT_AUTHOR_EMAIL=<x>"},
		{"NOEQUALS"},
	} {
		err := r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--git-dir"}, Env: env})
		if !errors.Is(err, ErrInvalidCmd) {
			t.Errorf("Env %q: err = %v, want ErrInvalidCmd", env, err)
		}
	}
	ok := []string{"SLUICE_HOOK_SOCKET=/run/x.sock", "SLUICE_HOOK_TOKEN=abc", "GIT_QUARANTINE_PATH=" + t.TempDir(),
		"GIT_OBJECT_DIRECTORY=" + filepath.Join(f.dir, "objects"), "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Join(f.dir, "objects")}
	if err := r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--git-dir"}, Env: ok}); err != nil {
		t.Errorf("allowed Env rejected: %v", err)
	}
}

func TestNoDiscoveryOutsideRepository(t *testing.T) {
	// HomeDir inside a work tree: a command without Dir must not find it.
	outer := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", outer).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := newRunner(t, "", func(c *Config) { c.HomeDir = filepath.Join(outer, "home") })
	err := r.Run(context.Background(), Cmd{Name: "rev-parse", Flags: []string{"--git-dir"}})
	if ExitCode(err) != 128 {
		t.Fatalf("rev-parse outside a repository: %v, want exit 128 (not a git repository)", err)
	}
}

// TestHookHelper: with a helper, every hook is a symlink to it, git runs
// it under the hook's name (which is how sluice-hook knows which hook it
// is), and a restart without the helper turns the links back into scripts.
func TestHookHelper(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "helper.log")
	helper := filepath.Join(dir, "bin dir", "sluice-hook")
	if err := os.MkdirAll(filepath.Dir(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$(basename \"$0\") $*\" >>'" + log + "'\ncat >/dev/null\n"
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	r := newRunner(t, "", func(c *Config) { c.HookHelper, c.HomeDir = helper, home })
	for _, name := range HookNames {
		target, err := os.Readlink(filepath.Join(r.HooksDir(), name))
		if err != nil || target != helper {
			t.Errorf("%s: link to %q, %v; want %q", name, target, err, helper)
		}
	}
	makeRepo(t, r)
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reference-transaction prepared", "reference-transaction committed"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("helper log lacks %q:\n%s", want, data)
		}
	}

	if _, err := New(Config{HomeDir: home, HookBinary: helper, HookHelper: "relative/sluice-hook"}, nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a relative helper path was accepted")
	}
	r2 := newRunner(t, "", func(c *Config) { c.HomeDir = home })
	for _, name := range HookNames {
		fi, err := os.Lstat(filepath.Join(r2.HooksDir(), name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s after a start without the helper: %v, %v; want a script", name, fi.Mode(), err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(r2.HooksDir(), ".*")); len(left) > 0 {
		t.Errorf("temporary files left in the hooks directory: %v", left)
	}
}

func TestHomeAndHooks(t *testing.T) {
	log := filepath.Join(t.TempDir(), "hook.log")
	r := newRunner(t, `echo "$@" >>'`+log+`'; cat >/dev/null`)
	for _, name := range HookNames {
		fi, err := os.Stat(filepath.Join(r.HooksDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", name, fi.Mode())
		}
	}
	// The reference-transaction hook runs (through the path with a space)
	// when a ref changes.
	f := makeRepo(t, r)
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hook reference-transaction prepared", "hook reference-transaction committed"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("hook log lacks %q:\n%s", want, data)
		}
	}
	// Config keys reach git with their values.
	for key, want := range map[string]string{
		"core.hooksPath":       r.HooksDir(),
		"receive.maxInputSize": "1048576",
		"receive.hideRefs":     "refs/pull-requests",
		"core.fsync":           "objects,derived-metadata,reference",
		"init.templateDir":     "",
		"protocol.file.allow":  "always",
	} {
		out, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "config", Flags: []string{"--get"}, Args: []string{key}})
		if err != nil || strings.TrimSuffix(string(out), "\n") != want {
			t.Errorf("config %s = %q, %v; want %q", key, out, err, want)
		}
	}
	// init used the empty template: no sample hooks inside the repository.
	if _, err := os.Stat(filepath.Join(f.dir, "hooks")); !os.IsNotExist(err) {
		t.Errorf("repository has a hooks directory: %v", err)
	}

	for _, bad := range []string{"relative/sluice", "/opt/it's/sluice", "/opt/a\nb/sluice", ""} {
		_, err := New(Config{HomeDir: t.TempDir(), HookBinary: bad}, nil, slog.New(slog.DiscardHandler))
		if err == nil {
			t.Errorf("New accepted hook binary %q", bad)
		}
	}
}

func TestCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// The hook leaves a grandchild of git (sleep) in the process group.
	r := newRunner(t, `if [ "$3" = prepared ] && grep -q refs/heads/other; then sleep 60 & echo $! >'`+pidFile+`.tmp'; mv '`+pidFile+`.tmp' '`+pidFile+`'; wait; fi; cat >/dev/null`)
	f := makeRepo(t, r)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := r.Start(ctx, Cmd{Dir: f.dir, Name: "update-ref", Args: []string{"refs/heads/other", f.commit}})
	if err != nil {
		t.Fatal(err)
	}
	pid := waitForPidFile(t, pidFile)
	start := time.Now()
	cancel()
	err = p.Wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Wait took %v after cancel", d)
	}
	waitGone(t, pid)
	if r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--verify", "-q"}, Args: []string{"refs/heads/other"}}) == nil {
		t.Error("cancelled update-ref still created the ref")
	}
}

func TestTimeout(t *testing.T) {
	r := newRunner(t, `if [ "$3" = prepared ] && grep -q refs/heads/other; then sleep 60; fi; cat >/dev/null`, func(c *Config) { c.Timeout = 2 * time.Second })
	f := makeRepo(t, r)
	start := time.Now()
	err := r.Run(context.Background(), Cmd{Dir: f.dir, Name: "update-ref", Args: []string{"refs/heads/other", f.commit}})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timed-out run took %v", d)
	}
}

func waitForPidFile(t *testing.T, name string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if data, err := os.ReadFile(name); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatal("hook never wrote its pid")
	return 0
}

// waitGone waits until pid no longer runs (a zombie waiting for a reaper
// counts as gone: it has been killed).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				return
			}
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("process %d in the git process group survived cancellation", pid)
}

func TestStartedCounter(t *testing.T) {
	r := newRunner(t, "")
	f := makeRepo(t, r)
	before := r.Started("rev-parse")
	for range 3 {
		if err := r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--git-dir"}}); err != nil {
			t.Fatal(err)
		}
	}
	// A failing process counts; a rejected command starts nothing.
	_ = r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--verify"}, Args: []string{"nosuch"}})
	_ = r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Args: []string{"--all"}})
	if got := r.Started("rev-parse") - before; got != 4 {
		t.Errorf("started rev-parse = %v, want 4", got)
	}
	if got := r.Started("init"); got != 1 {
		t.Errorf("started init = %v, want 1", got)
	}
}

func TestStdinAndStdout(t *testing.T) {
	r := newRunner(t, "")
	f := makeRepo(t, r)
	// A writer that fails stops git instead of leaving it blocked.
	big := strings.Repeat("x", 1<<20)
	blob, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "hash-object", Flags: []string{"-w", "--stdin"}, Stdin: strings.NewReader(big)})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(context.Background(), Cmd{Dir: f.dir, Name: "cat-file", Args: []string{"blob", strings.TrimSpace(string(blob))}, Stdout: failingWriter{}})
	if !errors.Is(err, errFailingWriter) {
		t.Fatalf("Run with failing stdout = %v", err)
	}
	// Stdin git does not read does not block Wait.
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		done <- r.Run(context.Background(), Cmd{Dir: f.dir, Name: "rev-parse", Flags: []string{"--git-dir"}, Stdin: pr})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run blocked on unread stdin")
	}
	pw.Close()
}

var errFailingWriter = errors.New("client went away")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errFailingWriter }

func TestCatFilePool(t *testing.T) {
	r := newRunner(t, "")
	f := makeRepo(t, r)
	ctx := context.Background()

	c, release, err := r.CatFile(ctx, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info("main")
	if err != nil || info.OID != f.commit || info.Type != "commit" {
		t.Fatalf("Info(main) = %+v, %v", info, err)
	}
	info, data, err := c.Contents("main:README", 1<<20)
	if err != nil || info.OID != f.blob || string(data) != "hello\n" {
		t.Fatalf("Contents = %+v %q, %v", info, data, err)
	}
	if _, err := c.Info("nosuch"); !errors.Is(err, ErrObjectNotFound) {
		t.Fatalf("Info(nosuch) = %v", err)
	}
	if _, _, err := c.Contents("main:README", 3); !errors.Is(err, ErrOutputTooLarge) {
		t.Fatalf("Contents over limit = %v", err)
	}
	// Still usable after a miss and an oversized object.
	if _, data, err := c.Contents(f.blob, 100); err != nil || string(data) != "hello\n" {
		t.Fatalf("Contents after errors = %q, %v", data, err)
	}
	if _, err := c.Info("a\nb"); !errors.Is(err, ErrInvalidCmd) {
		t.Fatalf("Info with newline = %v", err)
	}
	release()

	// Reuse: no second process.
	c2, release2, err := r.CatFile(ctx, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Info("HEAD"); err != nil {
		t.Fatal(err)
	}
	release2()
	if n := r.Started("cat-file"); n != 1 {
		t.Errorf("cat-file processes started = %v, want 1", n)
	}

	// A cancelled request kills its process, which is not reused.
	cctx, cancel := context.WithCancel(ctx)
	c3, release3, err := r.CatFile(cctx, f.dir)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(50 * time.Millisecond)
	release3()
	_ = c3
	if n := r.IdleCatFiles(); n != 0 {
		t.Errorf("idle after cancelled use = %d, want 0", n)
	}

}

func TestCatFileReaped(t *testing.T) {
	r := newRunner(t, "")
	r.catfileIdle = 100 * time.Millisecond
	f := makeRepo(t, r)
	_, release4, err := r.CatFile(context.Background(), f.dir)
	if err != nil {
		t.Fatal(err)
	}
	release4()
	if n := r.IdleCatFiles(); n != 1 {
		t.Fatalf("idle = %d, want 1", n)
	}
	for deadline := time.Now().Add(5 * time.Second); r.IdleCatFiles() > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("idle cat-file never reaped")
		}
	}
}

// TestNice: the heavy commands run at the configured niceness; light
// ones (the REST API's reads) keep the server's priority.
func TestNice(t *testing.T) {
	r := newRunner(t, "", func(c *Config) { c.Nice = 7 })
	f := makeRepo(t, r)
	niceOf := func(name string, flags []string) int {
		t.Helper()
		// The process blocks reading stdin until we close it, so its
		// niceness can be read while it runs.
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close()
		p, err := r.Start(context.Background(), Cmd{Dir: f.dir, Name: name, Flags: flags, Stdin: pr, Stdout: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, p.Pid())
		pw.Close()
		p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		// The raw syscall returns 20 - nice.
		return 20 - prio
	}
	if got := niceOf("upload-pack", []string{"--stateless-rpc"}); got != 7 {
		t.Errorf("upload-pack niceness %d, want 7", got)
	}
	own, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := niceOf("cat-file", []string{"--batch-check"}); got != 20-own {
		t.Errorf("cat-file niceness %d, want the server's own %d", got, 20-own)
	}
}

// TestConfine: heavy commands are handed to Confine as they start, light
// ones and merge-tree are not, and a failing Confine only logs.
func TestConfine(t *testing.T) {
	var mu sync.Mutex
	var got []int
	fail := false
	r := newRunner(t, "", func(c *Config) {
		c.Confine = func(pid int) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, pid)
			if fail {
				return errors.New("cgroup gone")
			}
			return nil
		}
	})
	f := makeRepo(t, r)
	ctx := context.Background()
	run := func(name string, flags []string, args ...string) int {
		t.Helper()
		p, err := r.Start(ctx, Cmd{Dir: f.dir, Name: name, Flags: flags, Args: args, Stdin: strings.NewReader("0000"), Stdout: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Fatalf("git %s: %v", name, err)
		}
		return p.Pid()
	}
	up := run("upload-pack", []string{"--stateless-rpc"})
	run("cat-file", []string{"--batch-check"})
	run("merge-tree", []string{"--write-tree"}, f.commit, f.commit)
	mu.Lock()
	if len(got) != 1 || got[0] != up {
		t.Errorf("Confine got %v, want only upload-pack's pid %d", got, up)
	}
	fail = true
	mu.Unlock()
	run("upload-pack", []string{"--stateless-rpc"}) // still runs
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Errorf("Confine called %d times, want 2", len(got))
	}
}

// TestNoAlternateRefs: a fork's receive-pack advertisement must not list
// the tips of the repository it borrows objects from (".have" lines).
func TestNoAlternateRefs(t *testing.T) {
	r := newRunner(t, "")
	parent := makeRepo(t, r)
	fork := filepath.Join(t.TempDir(), "fork.git")
	ctx := context.Background()
	if err := r.Run(ctx, Cmd{Dir: fork, Name: "init", Flags: []string{"--bare", "-q"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fork, "objects", "info", "alternates"), []byte(filepath.Join(parent.dir, "objects")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.Run(ctx, Cmd{Dir: fork, Name: "receive-pack", Flags: []string{"--advertise-refs"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), ".have") || strings.Contains(out.String(), parent.commit) {
		t.Fatalf("advertisement reveals the parent's tip: %q", out.String())
	}
}
