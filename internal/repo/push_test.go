package repo

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// quarantine is a push in progress as pre-receive sees it: the repository
// and an incoming object directory that only the quarantine environment
// shows, as receive-pack sets it up.
type quarantine struct {
	t   *testing.T
	dir string
	env []string
}

func newQuarantine(t *testing.T, m *Manager, id int64) *quarantine {
	t.Helper()
	if err := m.Create(context.Background(), id, "main"); err != nil {
		t.Fatal(err)
	}
	dir := m.Path(id)
	q := filepath.Join(dir, "objects", "tmp_objdir-incoming-test")
	if err := os.MkdirAll(filepath.Join(q, "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &quarantine{t: t, dir: dir, env: []string{
		"GIT_QUARANTINE_PATH=" + q,
		"GIT_OBJECT_DIRECTORY=" + q,
		"GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Join(dir, "objects"),
	}}
}

// git runs the git binary on the repository; in the quarantine when
// incoming is set (like the pushing client's objects), else for real.
func (q *quarantine) git(incoming bool, stdin []byte, args ...string) string {
	q.t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + q.dir}, args...)...)
	cmd.Env = gitEnv(q.t, q.t.TempDir(), "1700000000 +0000")
	if incoming {
		cmd.Env = append(cmd.Env, q.env...)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		q.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// treeObject is a tree's raw content and id, computed here so that
// thousands of trees cost one git process, not one each.
type treeObject struct {
	id      string
	content []byte
}

func makeTree(entries ...string) treeObject {
	// entries: "mode name id", already in git's order.
	var b bytes.Buffer
	for _, e := range entries {
		f := strings.Fields(e)
		raw, _ := hex.DecodeString(f[2])
		b.WriteString(f[0] + " " + f[1] + "\x00")
		b.Write(raw)
	}
	sum := sha1.Sum(append([]byte(fmt.Sprintf("tree %d\x00", b.Len())), b.Bytes()...))
	return treeObject{id: hex.EncodeToString(sum[:]), content: b.Bytes()}
}

// writeTrees stores trees with one hash-object process and checks git
// agrees on their ids.
func (q *quarantine) writeTrees(incoming bool, trees []treeObject) {
	q.t.Helper()
	tmp := q.t.TempDir()
	var paths bytes.Buffer
	for i, tr := range trees {
		p := filepath.Join(tmp, fmt.Sprint(i))
		if err := os.WriteFile(p, tr.content, 0o644); err != nil {
			q.t.Fatal(err)
		}
		paths.WriteString(p + "\n")
	}
	ids := strings.Fields(q.git(incoming, paths.Bytes(), "hash-object", "-w", "-t", "tree", "--stdin-paths"))
	for i, tr := range trees {
		if ids[i] != tr.id {
			q.t.Fatalf("tree %d: git says %s, computed %s", i, ids[i], tr.id)
		}
	}
}

func (q *quarantine) blob(incoming bool, data []byte) string {
	return q.git(incoming, data, "hash-object", "-w", "--stdin")
}

func (q *quarantine) commit(incoming bool, tree string) string {
	return q.git(incoming, []byte("push\n"), "commit-tree", tree)
}

// bomb is a "git bomb": levels trees, each holding width copies of the one
// below; the bottom holds width copies of one blob. width^levels paths,
// levels+1 distinct trees.
func bomb(blob string, levels, width int) []treeObject {
	var entries []string
	for i := 0; i < width; i++ {
		entries = append(entries, "100644 f"+fmt.Sprint(i)+" "+blob)
	}
	trees := []treeObject{makeTree(entries...)}
	for l := 0; l < levels; l++ {
		entries = entries[:0]
		for i := 0; i < width; i++ {
			entries = append(entries, "40000 d"+fmt.Sprint(i)+" "+trees[len(trees)-1].id)
		}
		trees = append(trees, makeTree(entries...))
	}
	return trees
}

// chain is a directory nested depth deep (the root counting as 1) with one
// file at the bottom.
func chain(blob string, depth int) []treeObject {
	trees := []treeObject{makeTree("100644 f " + blob)}
	for len(trees) < depth {
		trees = append(trees, makeTree("40000 d "+trees[len(trees)-1].id))
	}
	return trees
}

func TestCheckPushedObjectsBlobSize(t *testing.T) {
	m := newManager(t)
	q := newQuarantine(t, m, 1)
	ctx := context.Background()
	limits := PushLimits{MaxBlobSize: 1 << 20, MaxTreeDepth: 2048}

	// A 4 MiB blob of zeros compresses to a few KiB: the pack is small,
	// the blob is not.
	zero := q.blob(true, make([]byte, 4<<20))
	root := makeTree("100644 zeros " + zero)
	q.writeTrees(true, []treeObject{root})
	tip := q.commit(true, root.id)
	err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{tip}, limits)
	wantKind(t, err, problem.TooLarge)
	if msg := problem.Message(err); !strings.Contains(msg, "git.max_blob_size") || !strings.Contains(msg, zero) || !strings.Contains(msg, "4194304 bytes") {
		t.Errorf("message %q names neither the limit nor the file", msg)
	}

	// Exactly at the limit is allowed.
	exact := q.blob(true, make([]byte, 1<<20))
	root = makeTree("100644 exact " + exact)
	q.writeTrees(true, []treeObject{root})
	if err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{q.commit(true, root.id)}, limits); err != nil {
		t.Fatalf("blob at the limit: %v", err)
	}

	// A big blob the repository already has is not the push's doing.
	old := q.blob(false, bytes.Repeat([]byte("old\n"), 1<<19))
	oldRoot := makeTree("100644 old " + old)
	q.writeTrees(false, []treeObject{oldRoot})
	main := q.commit(false, oldRoot.id)
	q.git(false, nil, "update-ref", "refs/heads/main", main)
	root = makeTree("100644 new "+exact, "100644 old "+old)
	q.writeTrees(true, []treeObject{root})
	// On top of main, as a push usually is: rev-list's --not --all
	// excludes the trees of the commits the walk meets, not of every ref.
	child := q.git(true, []byte("push\n"), "commit-tree", root.id, "-p", main)
	if err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{child}, limits); err != nil {
		t.Fatalf("push reusing an old big blob: %v", err)
	}

	// Deletions (zero ids) have nothing to check; junk is refused.
	if err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{strings.Repeat("0", 40)}, limits); err != nil {
		t.Fatalf("deletion: %v", err)
	}
	wantKind(t, m.CheckPushedObjects(ctx, q.dir, q.env, []string{"--all"}, limits), problem.Invalid)
	// Without the quarantine the pushed objects are not there: the check
	// must have read them through it.
	if err := m.CheckPushedObjects(ctx, q.dir, nil, []string{tip}, limits); err == nil {
		t.Fatal("check without the quarantine environment passed")
	}
}

func TestCheckPushedObjectsTreeDepth(t *testing.T) {
	m := newManager(t)
	q := newQuarantine(t, m, 1)
	ctx := context.Background()
	limits := PushLimits{MaxBlobSize: 1 << 20, MaxTreeDepth: 2048}
	blob := q.blob(true, []byte("x\n"))

	// 5,000 levels, as in the report, against the default limit.
	deep := chain(blob, 5000)
	q.writeTrees(true, deep)
	start := time.Now()
	err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{q.commit(true, deep[len(deep)-1].id)}, limits)
	wantKind(t, err, problem.Forbidden)
	if msg := problem.Message(err); !strings.Contains(msg, "git.max_tree_depth (2048)") || !strings.Contains(msg, "5000") {
		t.Errorf("message %q does not name the limit and the depth", msg)
	}

	// A bomb of 10 levels of 10 entries (10^10 paths, 11 distinct trees)
	// costs eleven reads: depth 11 passes the default and fails at 10.
	b := bomb(blob, 10, 10)
	q.writeTrees(true, b)
	tip := q.commit(true, b[len(b)-1].id)
	if err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{tip}, limits); err != nil {
		t.Fatalf("bomb under the default depth: %v", err)
	}
	wantKind(t, m.CheckPushedObjects(ctx, q.dir, q.env, []string{tip}, PushLimits{MaxTreeDepth: 10}), problem.Forbidden)
	if err := m.CheckPushedObjects(ctx, q.dir, q.env, []string{tip}, PushLimits{MaxTreeDepth: 11}); err != nil {
		t.Fatalf("bomb at exactly the depth: %v", err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("the checks took %v", el)
	}

	// A deep tree pushed without a commit (a tag of a tree) is checked too.
	tagged := chain(blob, 30)
	q.writeTrees(true, tagged)
	tag := q.git(true, []byte(fmt.Sprintf("object %s\ntype tree\ntag t\ntagger A <a@example.com> 1700000000 +0000\n\nt\n", tagged[len(tagged)-1].id)), "mktag")
	wantKind(t, m.CheckPushedObjects(ctx, q.dir, q.env, []string{tag}, PushLimits{MaxTreeDepth: 20}), problem.Forbidden)
}

func TestTreeHeights(t *testing.T) {
	children := map[string][]string{
		"root": {"a", "b", "old"},
		"a":    {"c"},
		"b":    {"c"},
		"c":    {},
	}
	h := treeHeights(children)
	for id, want := range map[string]int{"root": 3, "a": 2, "c": 1, "old": 1} {
		if got := h(id); got != want {
			t.Errorf("height(%s) = %d, want %d", id, got, want)
		}
	}
}
