package api_test

import (
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/gitcmd"
)

// TestArchiveOverReadMemoryLimit: git archive reads every blob under
// core.bigFileThreshold whole, so a compressed-to-nothing file of zeros
// bigger than git.read_memory_limit makes it run out of address space.
// The answer must be 413 naming the setting, not a 500 or a cut archive
// sent as a success.
func TestArchiveOverReadMemoryLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gitcmd.Config) { c.ReadMemoryLimit = 64 << 20 })
	e.project("PRJ", false)
	r := e.repo("PRJ", "repo")
	work := e.workTree(map[string]string{"zeros.bin": strings.Repeat("\x00", 96<<20)}, 1)
	e.push(work, r.ID, "main")

	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	for _, format := range []string{"tar", "zip"} {
		res := e.must(413, "GET", base+"/archive?format="+format, e.admin, nil)
		if msg := res.message(t); !strings.Contains(msg, "git.read_memory_limit") {
			t.Errorf("%s: message %q does not name git.read_memory_limit", format, msg)
		}
	}
	// Reads that fit still work under the same limit.
	e.must(200, "GET", base+"/browse", e.admin, nil)
}
