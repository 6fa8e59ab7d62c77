package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
)

// run runs the command tree as `sluice args…` would, in this process.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		t.Logf("sluice %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), err
}

// TestDatagenImports: `sluice datagen` loads its data set through the
// importer, a re-run creates nothing, and `--out` plus `admin import`
// give a second node the same data.
func TestDatagenImports(t *testing.T) {
	dir := t.TempDir()
	data, cache := filepath.Join(dir, "data"), filepath.Join(dir, "histories")
	args := []string{"datagen", "--data", data, "--profile", "small", "--scale", "0.001", "--seed", "3", "--histories", "2",
		"--commits", "220", "--load-users", "2", "--history-cache", cache}
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	// small × 0.001: 3 users (+2 load users), 6 groups (+ e3-load), 2
	// projects, 6 repositories, 118 pull requests, 486 comments.
	if !strings.Contains(out, "created 5 users, 7 groups, 2 projects, 6 repositories (2 seed histories), 118 pull requests, 486 comments") {
		t.Fatalf("first run: %s", out)
	}
	if out, err = run(t, args...); err != nil || !strings.Contains(out, "created 0 users, 0 groups, 0 projects, 0 repositories (2 seed histories), 0 pull requests, 0 comments") {
		t.Fatalf("second run: %s, %v", out, err)
	}
	tokens, err := os.ReadFile(filepath.Join(data, "e3-tokens"))
	if err != nil || strings.Count(string(tokens), "\n") != 2 {
		t.Fatalf("tokens file %q, %v", tokens, err)
	}

	// A fork has its seed's history on disk.
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(data, "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.RepoBySlug(ctx, "P00000", "repo-000002")
	if err != nil || r.ForkOf == 0 {
		t.Fatalf("repository 2: %+v, %v", r, err)
	}
	ids, err := db.NameIDs(ctx, store.BulkRepos)
	if err != nil {
		t.Fatal(err)
	}
	var path string
	filepath.WalkDir(filepath.Join(data, "repositories"), func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() && e.Name() == strconv.FormatInt(r.ID, 10)+".git" {
			path = p
		}
		return nil
	})
	if got, err := exec.Command("git", "-C", path, "rev-list", "--count", "main").Output(); err != nil || strings.TrimSpace(string(got)) != "220" {
		t.Fatalf("fork %s (of %d repositories) history: %q, %v", path, len(ids), got, err)
	}

	// The same data set through a file, into another node.
	file := filepath.Join(dir, "ds.ndjson")
	if out, err := run(t, append(args[:len(args):len(args)], "--out", file)...); err != nil || !strings.Contains(out, "wrote ") {
		t.Fatalf("--out: %s, %v", out, err)
	}
	out, err = run(t, "admin", "import", "--data", filepath.Join(dir, "other"), "--tokens", filepath.Join(dir, "tokens"), file)
	if err != nil || !strings.Contains(out, "imported 5 users, 7 groups, 2 projects, 6 repositories, 118 pull requests, 486 comments, 2 tokens, 0 ssh keys") {
		t.Fatalf("admin import: %s, %v", out, err)
	}
}
