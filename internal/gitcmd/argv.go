package gitcmd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/pktline"
)

// Cmd describes one git invocation. See the package doc for the role of each
// part; argv is
//
//	git [--git-dir=Dir] Name Flags... [--end-of-options] Args... [-- Paths...]
//
// except for upload-pack, receive-pack and upload-archive, which take the
// repository as their positional argument instead of --git-dir.
type Cmd struct {
	// Dir is the repository (bare, absolute, server-derived). Empty runs git
	// outside any repository.
	Dir string
	// Name is the subcommand, from the allow-list; a few have a second word
	// ("commit-graph write", "multi-pack-index write").
	Name string
	// Flags are options chosen by the server; each must begin with '-'.
	Flags []string
	// Args are user-influenced values: never beginning with '-', never
	// holding NUL, CR or LF.
	Args []string
	// Paths are pathspecs placed after "--" when non-nil (literal, see
	// GIT_LITERAL_PATHSPECS); they may not hold NUL.
	Paths []string
	// Env may carry only GIT_PROTOCOL, SLUICE_HOOK_*, the quarantine
	// variables and commit identity; anything else is an error.
	Env []string
	// Unbounded exempts an interactive command from the read bounds: the
	// checks a push runs over its quarantined objects keep the push's own
	// limits, since an initial push of a big repository legitimately walks
	// more than a page view may.
	Unbounded bool

	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// subcommand records how git 2.39 parses one subcommand's command line.
type subcommand struct {
	// endOfOptions: the subcommand honours --end-of-options before its
	// positional arguments. Verified for every entry by
	// TestEndOfOptionsAgainstGit.
	endOfOptions bool
	// endOfOptionsWith names a flag without which --end-of-options is not
	// understood: in 2.39 plain rev-parse echoes "--end-of-options" as output
	// and only rev-parse --verify consumes it.
	endOfOptionsWith string
	// repoArg: the repository is the positional argument (the transport
	// services), not --git-dir.
	repoArg bool
	// noArgs: the subcommand takes no positional arguments at all.
	noArgs bool
}

// subcommands is the allow-list: what a git host needs, nothing that opens a
// work tree, runs an editor or pager, or talks to another host.
var subcommands = map[string]subcommand{
	// transport services
	"upload-pack":    {endOfOptions: true, repoArg: true},
	"receive-pack":   {endOfOptions: true, repoArg: true},
	"upload-archive": {repoArg: true}, // parses argv by hand: exactly one argument
	// plumbing for reads
	"rev-parse":        {endOfOptions: true, endOfOptionsWith: "--verify"},
	"for-each-ref":     {endOfOptions: true},
	"show-ref":         {endOfOptions: true},
	"symbolic-ref":     {endOfOptions: true},
	"cat-file":         {endOfOptions: true},
	"log":              {endOfOptions: true},
	"rev-list":         {endOfOptions: true},
	"show":             {endOfOptions: true},
	"diff":             {endOfOptions: true},
	"diff-tree":        {endOfOptions: true},
	"ls-tree":          {endOfOptions: true},
	"merge-base":       {endOfOptions: true},
	"name-rev":         {endOfOptions: true},
	"describe":         {endOfOptions: true},
	"blame":            {endOfOptions: true},
	"grep":             {endOfOptions: true},
	"format-patch":     {endOfOptions: true},
	"archive":          {endOfOptions: true},
	"check-ref-format": {}, // parses argv by hand
	"count-objects":    {noArgs: true},
	"fsck":             {endOfOptions: true},
	"config":           {endOfOptions: true},
	// writes
	"init":                    {endOfOptions: true},
	"update-ref":              {endOfOptions: true},
	"merge-tree":              {endOfOptions: true},
	"commit-tree":             {endOfOptions: true},
	"hash-object":             {endOfOptions: true},
	"mktree":                  {noArgs: true},
	"mktag":                   {noArgs: true},
	"fetch":                   {endOfOptions: true},
	"prune":                   {endOfOptions: true},
	"pack-refs":               {noArgs: true},
	"repack":                  {noArgs: true},
	"commit-graph write":      {noArgs: true},
	"commit-graph verify":     {noArgs: true},
	"multi-pack-index write":  {noArgs: true},
	"multi-pack-index verify": {noArgs: true},
	"multi-pack-index expire": {noArgs: true},
	"multi-pack-index repack": {noArgs: true},
}

// deniedFlags are options that name a program for git to run or a host to
// talk to. Flags are server-chosen, but a flag built by concatenating a user
// value must never be one of these.
var deniedFlags = []string{"--upload-pack", "--receive-pack", "--exec", "--remote", "--open-files-in-pager", "-O"}

// ErrInvalidCmd is wrapped by every validation error.
var ErrInvalidCmd = errors.New("invalid git command")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidCmd, fmt.Sprintf(format, args...))
}

// argv validates c and returns the argument vector after the binary.
func (c *Cmd) argv() ([]string, error) {
	sc, ok := subcommands[c.Name]
	if !ok {
		return nil, invalid("subcommand %q not allowed", c.Name)
	}
	if c.Dir != "" {
		if !filepath.IsAbs(c.Dir) || filepath.Clean(c.Dir) != c.Dir || strings.ContainsAny(c.Dir, "\x00\n\r") {
			return nil, invalid("repository path %q must be absolute and clean", c.Dir)
		}
	} else if sc.repoArg {
		return nil, invalid("%s needs a repository", c.Name)
	}
	for _, f := range c.Flags {
		if err := checkFlag(f); err != nil {
			return nil, err
		}
	}
	if (sc.noArgs || sc.repoArg) && len(c.Args) > 0 {
		return nil, invalid("%s takes no arguments", c.Name)
	}
	for _, a := range c.Args {
		if err := checkArg(a); err != nil {
			return nil, err
		}
	}
	for _, p := range c.Paths {
		if strings.IndexByte(p, 0) >= 0 {
			return nil, invalid("path %q holds NUL", p)
		}
	}

	argv := make([]string, 0, 4+len(c.Flags)+len(c.Args)+len(c.Paths))
	if c.Dir != "" && !sc.repoArg {
		argv = append(argv, "--git-dir="+c.Dir)
	}
	argv = append(argv, strings.Fields(c.Name)...)
	argv = append(argv, c.Flags...)
	positional := c.Args
	if sc.repoArg {
		positional = []string{c.Dir}
	}
	if len(positional) > 0 && sc.endOfOptions && (sc.endOfOptionsWith == "" || slices.Contains(c.Flags, sc.endOfOptionsWith)) {
		argv = append(argv, "--end-of-options")
	}
	argv = append(argv, positional...)
	if c.Paths != nil {
		argv = append(argv, "--")
		argv = append(argv, c.Paths...)
	}
	return argv, nil
}

func checkFlag(f string) error {
	if !strings.HasPrefix(f, "-") || f == "-" || f == "--" || f == "--end-of-options" {
		return invalid("flag %q is not an option", f)
	}
	if strings.IndexByte(f, 0) >= 0 {
		return invalid("flag %q holds NUL", f)
	}
	for _, d := range deniedFlags {
		if f == d || strings.HasPrefix(f, d+"=") || (len(d) == 2 && strings.HasPrefix(f, d)) {
			return invalid("flag %q not allowed", f)
		}
	}
	return nil
}

func checkArg(a string) error {
	if a == "" {
		return invalid("empty argument")
	}
	if a[0] == '-' {
		return invalid("argument %q begins with '-'", a)
	}
	if strings.ContainsAny(a, "\x00\r\n") {
		return invalid("argument %q holds a control character", a)
	}
	return nil
}

// env validates c.Env and returns the full environment for the process.
func (r *Runner) env(extra []string) ([]string, error) {
	env := slices.Clip(r.baseEnv)
	seen := map[string]bool{}
	for _, kv := range extra {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, invalid("environment entry %q is not KEY=VALUE", kv)
		}
		if seen[k] {
			return nil, invalid("environment variable %s given twice", k)
		}
		seen[k] = true
		if err := checkEnv(k, v); err != nil {
			return nil, err
		}
		env = append(env, kv)
	}
	return env, nil
}

// identityVars are allowed so the server can write commits (merges) in a
// user's name; git reads identity only from these or from config.
var identityVars = []string{
	"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
	"GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE",
}

func checkEnv(k, v string) error {
	switch {
	case k == "GIT_PROTOCOL":
		if !pktline.ValidProtocol(v) {
			return invalid("GIT_PROTOCOL value %q", v)
		}
	case strings.HasPrefix(k, "SLUICE_HOOK_"):
		if strings.Trim(k[len("SLUICE_HOOK_"):], "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" || len(k) == len("SLUICE_HOOK_") {
			return invalid("environment variable %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalid("%s holds NUL", k)
		}
	case k == "GIT_QUARANTINE_PATH", k == "GIT_OBJECT_DIRECTORY":
		if !cleanAbs(v) {
			return invalid("%s must be an absolute path", k)
		}
	case k == "GIT_ALTERNATE_OBJECT_DIRECTORIES":
		for _, p := range strings.Split(v, ":") {
			if !cleanAbs(p) {
				return invalid("%s must list absolute paths", k)
			}
		}
	case slices.Contains(identityVars, k):
		if len(v) > 256 || strings.ContainsAny(v, "\x00\r\n<>") {
			return invalid("%s value %q", k, v)
		}
	default:
		return invalid("environment variable %s not allowed", k)
	}
	return nil
}

func cleanAbs(p string) bool {
	return filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsAny(p, "\x00\r\n")
}
