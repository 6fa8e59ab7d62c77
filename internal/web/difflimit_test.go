package web_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// TestCommitDiffSaysFileTooLarge: a file over git.max_diff_blob_size is
// binary to git; the commit page says it was too large to show, and a
// small binary file stays a binary file.
func TestCommitDiffSaysFileTooLarge(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{Configure: func(c *config.Config) { c.Git.MaxDiffBlobSize = 1024 }})
	r := n.CreateRepo(t, "PROJ", "big")
	dir := t.TempDir()
	testbed.Git(t, dir, "init", "-q", "-b", "main")
	for name, body := range map[string]string{
		"big.txt": strings.Repeat("a line of text\n", 300),
		"pic.bin": "\x00\x01\x02binary",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbed.Git(t, dir, "add", "-A")
	testbed.Git(t, dir, "commit", "-q", "-m", "add")
	testbed.Git(t, dir, "push", "-q", n.CloneURL("PROJ", r.Slug, "admin", n.AdminPassword), "main")
	head := testbed.Git(t, dir, "rev-parse", "HEAD")

	b := newBrowser(t, n.URL)
	b.login("admin", n.AdminPassword)
	p := b.get("/projects/PROJ/repos/" + r.Slug + "/commits/" + strings.TrimSpace(head))
	if p.status != 200 {
		t.Fatalf("commit page: %d\n%s", p.status, p.body)
	}
	if n := strings.Count(p.body, "File too large to display (limit 1.0 KiB)"); n != 1 {
		t.Errorf("too-large notice shown %d times, want once (big.txt)\n%s", n, p.body)
	}
	if n := strings.Count(p.body, "Binary file."); n != 1 {
		t.Errorf("binary notice shown %d times, want once (pic.bin)", n)
	}
}
