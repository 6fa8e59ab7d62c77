package gitcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// configEntry is one key of the server-owned global config with the reason
// it is there; the reason is written into the file as a comment so an
// operator reading HomeDir/.gitconfig sees it too.
type configEntry struct {
	section, key, value, why string
}

// globalConfig is the whole of git's configuration outside repositories.
// Repository config files are written only by the server (users cannot push
// config), so this file plus git's defaults decide git's behaviour.
func globalConfig(cfg Config, hooksDir string) []configEntry {
	e := []configEntry{
		{"core", "hooksPath", hooksDir, "hooks are sluice's own programs, never a script inside a repository"},
		{"init", "templateDir", "", "new repositories get no sample hooks or description from a template"},
		{"transfer", "fsckObjects", "true", "every object entering a repository is checked"},
		{"receive", "fsckObjects", "true", "pushes are checked even if transfer.fsckObjects changes"},
		{"fetch", "fsckObjects", "true", "fetches between repositories (fork sync) are checked too"},
		{"core", "fsync", "objects,derived-metadata,reference", "an acknowledged push is durable: objects, packs, indexes and refs reach the disk before receive-pack reports ok"},
		{"core", "fsyncMethod", "fsync", "a real fsync, not writeout-only, for the same reason"},
		{"gc", "auto", "0", "housekeeping is a scheduled job, never a surprise inside a request"},
		{"receive", "autogc", "false", "same: no gc --auto after a push"},
		{"maintenance", "auto", "false", "same: no background maintenance started by git itself"},
		{"core", "useReplaceRefs", "false", "refs/replace must not change what objects mean (also GIT_NO_REPLACE_OBJECTS)"},
		{"uploadpack", "allowFilter", "true", "partial clone (--filter) is served"},
		{"uploadpack", "allowAnySHA1InWant", "false", "clients may fetch only what the advertised refs reach"},
		{"receive", "advertisePushOptions", "true", "push options reach pre-receive, which bounds them"},
		{"repack", "writeBitmaps", "true", "bitmaps make clones of repacked repositories cheap"},
		{"pack", "writeBitmapHashCache", "true", "the name-hash cache makes bitmap-based deltas better"},
		{"core", "commitGraph", "true", "commit-graph files written by housekeeping are used"},
		{"safe", "directory", "*", "repositories are owned by the server user but may live on shared storage with other owners; only the server reaches this config"},
		{"protocol", "allow", "never", "the server itself only ever fetches between local repositories (fork sync); no ext::, fd:: or network transport"},
		{"protocol \"file\"", "allow", "always", "local fetches between repositories on the repository filesystem"},
		{"core", "alternateRefsCommand", "true", "receive-pack advertises no \".have\" lines for a fork's alternates: a fork's pushers must not learn the commit ids of a parent they may no longer read (pushes to forks then send all their objects)"},
		{"core", "filesRefLockTimeout", "5000", "wait up to 5 s (default 100 ms) for a loose ref lock: housekeeping's pack-refs briefly locks every loose ref, and a push landing then must wait, not fail with \"cannot lock ref\""},
		{"core", "packedRefsTimeout", "10000", "likewise for packed-refs.lock (default 1 s), contended by pack-refs and branch deletions"},
		{"user", "name", "Sluice", "fallback identity for commits the server writes without an explicit one"},
		{"user", "email", "sluice@localhost", "same"},
	}
	for _, h := range HiddenRefs {
		e = append(e, configEntry{"uploadpack", "hideRefs", h, "refs clients are never shown (HiddenRefs)"})
	}
	for _, h := range ServerRefs {
		e = append(e, configEntry{"receive", "hideRefs", h, "server-managed refs (ServerRefs): clients may not push to them"})
	}
	e = append(e, fsckConfig()...)
	if cfg.MaxInputSize > 0 {
		e = append(e, configEntry{"receive", "maxInputSize", strconv.FormatInt(cfg.MaxInputSize, 10), "the largest pack one push may send (git.max_input_size)"})
	}
	return e
}

// renderConfig writes entries in git-config syntax, one section header per
// entry so each keeps its comment next to it.
func renderConfig(entries []configEntry) string {
	var b strings.Builder
	b.WriteString("# Written by sluice on every start; edits are lost. See internal/gitcmd.\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "\n# %s\n[%s]\n\t%s = %s\n", e.why, e.section, e.key, quoteConfigValue(e.value))
	}
	return b.String()
}

// quoteConfigValue quotes v for a git config file: inside double quotes only
// '"' and '\' need escaping, and quoting keeps '#', ';' and leading or
// trailing spaces literal.
func quoteConfigValue(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(v) + `"`
}

// checkHookBinary refuses a path the hook scripts could not quote safely.
func checkHookBinary(p string) error {
	if p == "" || !filepath.IsAbs(p) {
		return fmt.Errorf("hook binary must be an absolute path, got %q", p)
	}
	if strings.ContainsAny(p, "'\n\r\x00") {
		return fmt.Errorf("hook binary path %q contains a quote or a line break", p)
	}
	return nil
}

// hookScript is the body of every hook: it hands over to `sluice hook NAME`
// with git's arguments. exec keeps the process tree flat (the hook is the
// sluice process, so signals and exit status pass straight through). The path
// is single-quoted, which is safe because checkHookBinary refused quotes.
func hookScript(binary, name string) string {
	return fmt.Sprintf("#!/bin/sh\n# Written by sluice; edits are lost.\nexec '%s' hook %s \"$@\"\n", binary, name)
}

func (r *Runner) writeHome(cfg Config) error {
	if strings.ContainsAny(r.homeDir, "\n\r\x00") {
		return fmt.Errorf("git home directory %q contains a line break", r.homeDir)
	}
	if err := os.MkdirAll(r.hooksDir, 0o755); err != nil {
		return fmt.Errorf("create git home: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(r.homeDir, ".gitconfig"), []byte(renderConfig(globalConfig(cfg, r.hooksDir))), 0o644); err != nil {
		return fmt.Errorf("write git config: %w", err)
	}
	for _, name := range HookNames {
		var err error
		if cfg.HookHelper != "" {
			err = symlinkAtomic(cfg.HookHelper, filepath.Join(r.hooksDir, name))
		} else {
			err = writeFileAtomic(filepath.Join(r.hooksDir, name), []byte(hookScript(cfg.HookBinary, name)), 0o755)
		}
		if err != nil {
			return fmt.Errorf("write %s hook: %w", name, err)
		}
	}
	return nil
}

// symlinkAtomic points name at target, replacing whatever name was (a
// script from a start without the helper, or an older link) in one rename,
// so a hook starting meanwhile runs the old or the new program.
func symlinkAtomic(target, name string) error {
	// Nodes may share the directory: the temporary name is this process's.
	tmp := filepath.Join(filepath.Dir(name), fmt.Sprintf(".%s.%d.%d.link", filepath.Base(name), os.Getpid(), time.Now().UnixNano()))
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeFileAtomic replaces name so that a git process starting at the same
// moment (another node's process sharing nothing, or a restart while old
// processes finish) sees either the old or the new file, never half of one.
func writeFileAtomic(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// baseEnv is the environment every process starts from.
func baseEnv(home, path string) []string {
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{
		"PATH=" + path,
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + filepath.Join(home, ".gitconfig"),
		"GIT_TERMINAL_PROMPT=0",
		"LANG=C",
		"LC_ALL=C",
		"GIT_NO_REPLACE_OBJECTS=1",
		// Pathspecs come from users (file paths in URLs); magic like
		// ":(top)" or globs must not change which files they name.
		"GIT_LITERAL_PATHSPECS=1",
		// A command run without a repository starts in HomeDir; discovery
		// must not walk up into whatever repository contains it.
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(home),
		// For the hooks: git ignores it, and sluice-hook, a Go program
		// that makes one blocking exchange, then starts no threads for
		// parallelism it has no use for (~0.25 ms of CPU less per hook,
		// three hooks per push).
		"GOMAXPROCS=1",
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
