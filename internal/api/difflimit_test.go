package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/gitcmd"
)

// TestDiffMarksTooLargeFiles is issue 14's item 4: a file over
// git.max_diff_blob_size is shown by git as binary, and the diff must say
// it was too large rather than pass it off as a picture.
func TestDiffMarksTooLargeFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *gitcmd.Config) { c.MaxDiffBlobSize = 1024 })
	e.project("PRJ", false)
	r := e.repo("PRJ", "repo")
	work := e.workTree(map[string]string{
		"big.txt":    strings.Repeat("a line of text\n", 300),
		"small.txt":  "one\n",
		"shrink.txt": strings.Repeat("b\n", 1000),
	}, 1)
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("big.txt", strings.Repeat("a line of text\n", 301))
	write("small.txt", "two\n")
	write("pic.bin", "\x00\x01\x02binary\x00")
	// Over the limit on the old side only: still not diffed.
	write("shrink.txt", "b\n")
	e.git(work, "add", "-A")
	e.git(work, "commit", "-q", "-m", "change")
	e.push(work, r.ID, "main")
	sha := e.git(work, "rev-parse", "HEAD")

	type entry struct {
		Destination *struct {
			ToString string `json:"toString"`
		} `json:"destination"`
		Hunks     []any `json:"hunks"`
		Binary    bool  `json:"binary"`
		Truncated bool  `json:"truncated"`
		TooLarge  *bool `json:"tooLarge"`
	}
	var d struct {
		Diffs []entry `json:"diffs"`
	}
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	e.must(200, "GET", base+"/commits/"+sha+"/diff", e.admin, nil).json(t, &d)
	got := map[string]entry{}
	for _, f := range d.Diffs {
		got[f.Destination.ToString] = f
	}
	if len(got) != 4 {
		t.Fatalf("diff lists %d files: %+v", len(got), d.Diffs)
	}
	for _, name := range []string{"big.txt", "shrink.txt"} {
		if f := got[name]; f.TooLarge == nil || !*f.TooLarge || !f.Truncated || len(f.Hunks) != 0 {
			t.Errorf("%s over the limit: %+v", name, f)
		}
	}
	if f := got["pic.bin"]; !f.Binary || f.TooLarge != nil || f.Truncated {
		t.Errorf("small binary file: %+v", f)
	}
	if f := got["small.txt"]; f.Binary || f.TooLarge != nil || len(f.Hunks) != 1 {
		t.Errorf("small text file: %+v", f)
	}

	// One file alone, and a compare, say it too.
	e.must(200, "GET", base+"/commits/"+sha+"/diff?path=big.txt", e.admin, nil).json(t, &d)
	if len(d.Diffs) != 1 || d.Diffs[0].TooLarge == nil || !*d.Diffs[0].TooLarge {
		t.Errorf("path diff: %+v", d.Diffs)
	}
	parent := e.git(work, "rev-parse", "HEAD~1")
	e.must(200, "GET", base+"/compare/diff?from="+sha+"&to="+parent+"&path=shrink.txt", e.admin, nil).json(t, &d)
	if len(d.Diffs) != 1 || d.Diffs[0].TooLarge == nil || !*d.Diffs[0].TooLarge {
		t.Errorf("compare diff: %+v", d.Diffs)
	}
}
