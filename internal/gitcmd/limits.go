package gitcmd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// bounded lists the interactive commands: the ones a page view, a REST
// read, a pull request diff or a merge runs on the node's behalf, whose
// memory and time a hostile repository (a 4 GiB blob of zeros, a tree
// bomb) could otherwise drive without limit. They run under
// Config.ReadMemoryLimit and Config.ReadTimeout. Clones and pushes
// (upload-pack, receive-pack, upload-archive and their pack-objects and
// index-pack children), housekeeping and fork fetches keep Config.Timeout
// and no memory bound: their cost grows with the repository by design and
// the throttle and its cgroup already bound them.
var bounded = map[string]bool{
	"rev-parse": true, "for-each-ref": true, "show-ref": true, "symbolic-ref": true,
	"cat-file": true, "log": true, "rev-list": true, "show": true,
	"diff": true, "diff-tree": true, "ls-tree": true, "merge-base": true,
	"name-rev": true, "describe": true, "blame": true, "grep": true,
	"format-patch": true, "archive": true, "merge-tree": true,
}

// ErrMemoryLimit is wrapped by the error of a bounded process that ran
// out of address space under Config.ReadMemoryLimit.
var ErrMemoryLimit = errors.New("git process exceeded its memory limit")

// limitScript is run by /bin/sh as the exec wrapper of a bounded process:
// it sets RLIMIT_AS (ulimit -v, in KiB; dash and bash set the soft and hard
// limit together) and replaces itself with git, so the pid, process group,
// niceness and exit status are git's own. The limit and git's argv are
// positional parameters, never parsed by the shell.
const limitScript = `ulimit -v "$1" || exit 126; shift; exec "$@"`

// shellPath is the shell that runs limitScript; every POSIX system has it
// and the hook scripts already rely on it.
const shellPath = "/bin/sh"

// readBounds are what the bounded commands run with.
type readBounds struct {
	memory    int64         // RLIMIT_AS in bytes; 0: none
	timeout   time.Duration // 0: Config.Timeout
	configArg []string      // -c settings that keep git's own caches under memory
}

func newReadBounds(cfg Config) readBounds {
	b := readBounds{memory: cfg.ReadMemoryLimit, timeout: cfg.ReadTimeout}
	if b.memory > 0 {
		// Git maps pack files in windows of core.packedGitWindowSize (1 GiB
		// by default on 64-bit) up to core.packedGitLimit (32 GiB): under
		// an address-space limit the very first window of a big pack could
		// fail. A quarter of the limit for mapped packs and a sixteenth
		// (at most 32 MiB, git's 32-bit default) per window leave the rest
		// for the objects git inflates; git unmaps old windows to stay
		// under packedGitLimit, so reads of any pack still work. The delta
		// base cache (96 MiB by default) is held to an eighth likewise.
		window := min(b.memory/16, 32<<20)
		b.configArg = append(b.configArg,
			"-c", "core.packedGitWindowSize="+strconv.FormatInt(max(window, 64<<10), 10),
			"-c", "core.packedGitLimit="+strconv.FormatInt(max(b.memory/4, 1<<20), 10),
			"-c", "core.deltaBaseCacheLimit="+strconv.FormatInt(min(b.memory/8, 96<<20), 10),
		)
	}
	if cfg.MaxDiffBlobSize > 0 {
		// Git treats a blob over core.bigFileThreshold as binary in a diff
		// without reading it (and streams it in cat-file and archive), so
		// a huge file costs a size lookup instead of its size in memory.
		b.configArg = append(b.configArg, "-c", "core.bigFileThreshold="+strconv.FormatInt(cfg.MaxDiffBlobSize, 10))
	}
	return b
}

// isBounded reports whether c runs under the read bounds.
func isBounded(c Cmd) bool { return bounded[c.Name] && !c.Unbounded }

// wrap returns the path and argv that start git (argv without "git")
// under the memory bound.
func (r *Runner) wrap(argv []string) (string, []string) {
	kib := strconv.FormatInt(max(r.read.memory/1024, 1), 10)
	return shellPath, append([]string{"sh", "-c", limitScript, "sluice-git-limit", kib, r.binary}, argv...)
}

// memoryFailure reports whether a bounded git process that exited with
// code (or died of signal sig) and stderr failed for lack of address
// space. Git dies with "Out of memory, malloc failed" or "mmap failed:
// Cannot allocate memory" when an allocation it checks fails; one it
// does not check (in zlib or a library) ends in SIGSEGV or SIGABRT, which
// under an address-space limit is the same cause.
func memoryFailure(stderr string, sig syscall.Signal) bool {
	if sig == syscall.SIGSEGV || sig == syscall.SIGABRT || sig == syscall.SIGBUS {
		return true
	}
	s := strings.ToLower(stderr)
	for _, m := range []string{"out of memory", "cannot allocate memory", "mmap failed", "unable to create thread"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// boundError turns a bounded process's failure for its memory or time
// bound into a TooLarge problem naming the limit, so that every caller
// answers 413 with the reason instead of 500.
func (r *Runner) boundError(name string, err error, timedOut, outOfMemory bool) error {
	switch {
	case outOfMemory:
		return problem.Wrap(problem.TooLarge, fmt.Errorf("%w: %w", ErrMemoryLimit, err),
			fmt.Sprintf("this content is too large to show: git needed more memory than git.read_memory_limit (%s) allows", formatBytes(r.read.memory)))
	case timedOut:
		return problem.Wrap(problem.TooLarge, err,
			fmt.Sprintf("this content is too large to show: git took longer than git.read_timeout (%s)", r.readTimeout()))
	}
	return err
}

// readTimeout is the wall-clock bound of the bounded commands.
func (r *Runner) readTimeout() time.Duration {
	if r.read.timeout > 0 && (r.timeout <= 0 || r.read.timeout < r.timeout) {
		return r.read.timeout
	}
	return r.timeout
}

// MaxDiffBlobSize is the largest blob the bounded commands diff
// (Config.MaxDiffBlobSize, 0 when unlimited); a bigger one shows as binary,
// and callers mark it too large to diff.
func (r *Runner) MaxDiffBlobSize() int64 { return r.maxDiffBlob }

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
