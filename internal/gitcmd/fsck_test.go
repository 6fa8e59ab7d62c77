package gitcmd

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// client runs the git binary directly, as a user's client would, in a
// repository whose objects the test writes byte by byte.
type client struct {
	t   *testing.T
	dir string
	env []string
}

func newClient(t *testing.T) *client {
	c := &client{t: t, dir: filepath.Join(t.TempDir(), "client.git"),
		env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}}
	c.git(nil, "init", "-q", "--bare", c.dir)
	return c
}

func (c *client) git(stdin []byte, args ...string) []byte {
	c.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = c.env
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// object writes raw bytes as an object of type typ, unchecked.
func (c *client) object(typ string, body []byte) string {
	c.t.Helper()
	return strings.TrimSpace(string(c.git(body, "--git-dir="+c.dir, "hash-object", "-t", typ, "--literally", "-w", "--stdin")))
}

// pack is a pack of exactly oids, without the reachability walk that
// would stumble over a malformed tree on the client side.
func (c *client) pack(oids ...string) []byte {
	c.t.Helper()
	return c.git([]byte(strings.Join(oids, "\n")+"\n"), "--git-dir="+c.dir, "pack-objects", "-q", "--stdout")
}

func entry(mode, name, oid string) []byte {
	raw, err := hex.DecodeString(oid)
	if err != nil || len(raw) != 20 {
		panic("bad oid " + oid)
	}
	return append([]byte(mode+" "+name+"\x00"), raw...)
}

func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// push speaks the push protocol to receive-pack run by r: one command
// creating ref at commit, then the pack. It returns receive-pack's report.
func push(t *testing.T, r *Runner, repo, ref, commit string, pack []byte) string {
	t.Helper()
	var in bytes.Buffer
	in.WriteString(pktLine(strings.Repeat("0", 40) + " " + commit + " " + ref + "\x00report-status\n"))
	in.WriteString("0000")
	in.Write(pack)
	var out, stderr bytes.Buffer
	// receive-pack exits 0 after reporting a refused pack; the report
	// decides.
	_ = r.Run(context.Background(), Cmd{Dir: repo, Name: "receive-pack", Stdin: &in, Stdout: &out, Stderr: &stderr})
	// git 2.39 skips an fsck id it does not know with only a warning, so
	// a misspelt id would silently not apply.
	if strings.Contains(stderr.String(), "unknown msg id") {
		t.Fatalf("git does not know an id of the global config: %s", stderr.String())
	}
	return out.String()
}

// TestFsckRefusesMalformedTrees pushes one tree per fsck message id that
// fsckConfig raises: each push must be refused and leave no ref, where git
// 2.39's defaults let most of them in with a warning. A well-formed tree
// pushed the same way is accepted, which also shows git knows every id
// in the generated config (it dies on an unknown one).
func TestFsckRefusesMalformedTrees(t *testing.T) {
	r := newRunner(t, "")
	server := makeRepo(t, r)
	c := newClient(t)
	blob := c.object("blob", []byte("content\n"))
	zero := strings.Repeat("0", 40)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	cases := []struct {
		id   string
		tree []byte // nil: the commit names a tree id that does not parse
	}{
		{"", entry("100644", "f", blob)}, // the control: well formed
		{"badFilemode", entry("100666", "f", blob)},
		{"badFilemode", entry("123456", "f", blob)},
		{"zeroPaddedFilemode", entry("0100644", "f", blob)},
		{"emptyName", entry("100644", "", blob)},
		{"fullPathname", entry("100644", "a/b", blob)},
		{"hasDot", entry("100644", ".", blob)},
		{"hasDotdot", entry("100644", "..", blob)},
		{"hasDotgit", entry("100644", ".git", blob)},
		{"nullSha1", entry("160000", "sub", zero)},
		{"duplicateEntries", cat(entry("100644", "a", blob), entry("100644", "a", blob))},
		{"treeNotSorted", cat(entry("100644", "b", blob), entry("100644", "a", blob))},
		{"badTree", []byte("100644 f")},
		{"badTreeSha1", nil},
	}
	covered := map[string]bool{}
	for i, tc := range cases {
		covered[tc.id] = true
		oids := []string{blob}
		treeLine := "tree not-an-object-id\n"
		if tc.tree != nil {
			tree := c.object("tree", tc.tree)
			oids = append(oids, tree)
			treeLine = "tree " + tree + "\n"
		}
		commit := c.object("commit", []byte(treeLine+
			"author A U Thor <a@example.com> 1700000000 +0000\n"+
			"committer A U Thor <a@example.com> 1700000000 +0000\n\n"+tc.id+"\n"))
		oids = append(oids, commit)
		ref := fmt.Sprintf("refs/heads/case-%d", i)
		report := push(t, r, server.dir, ref, commit, c.pack(oids...))

		_, err := r.Output(context.Background(), Cmd{Dir: server.dir, Name: "rev-parse", Flags: []string{"--verify", "-q"}, Args: []string{ref}})
		created := err == nil
		if tc.id == "" {
			if !strings.Contains(report, "unpack ok") || !created {
				t.Fatalf("well-formed tree refused: %q", report)
			}
			continue
		}
		if strings.Contains(report, "unpack ok") || created {
			t.Errorf("%s: push accepted (report %q, ref created %v)", tc.id, report, created)
		}
	}
	for _, m := range fsckTreeErrors {
		if !covered[m.id] {
			t.Errorf("no push tests %s", m.id)
		}
	}
}

// TestFsckRefusesMalformedTreesOnFetch is the same for the server's own
// fetches between repositories (fork sync), which fetch.fsck governs.
func TestFsckRefusesMalformedTreesOnFetch(t *testing.T) {
	r := newRunner(t, "")
	server := makeRepo(t, r)
	c := newClient(t)
	blob := c.object("blob", []byte("content\n"))
	tree := c.object("tree", entry("100666", "f", blob))
	commit := c.object("commit", []byte("tree "+tree+"\n"+
		"author A U Thor <a@example.com> 1700000000 +0000\n"+
		"committer A U Thor <a@example.com> 1700000000 +0000\n\nbad mode\n"))
	c.git(nil, "--git-dir="+c.dir, "update-ref", "refs/heads/bad", commit)

	var stderr bytes.Buffer
	err := r.Run(context.Background(), Cmd{Dir: server.dir, Name: "fetch", Flags: []string{"-q"},
		Args: []string{c.dir, "+refs/heads/bad:refs/heads/bad"}, Stderr: &stderr})
	if err == nil {
		t.Fatalf("fetch of a tree with mode 100666 succeeded: %s", stderr.String())
	}
	if !strings.Contains(err.Error()+stderr.String(), "badFilemode") {
		t.Errorf("fetch failed for another reason: %v\n%s", err, stderr.String())
	}
	if _, err := r.Output(context.Background(), Cmd{Dir: server.dir, Name: "rev-parse", Flags: []string{"--verify", "-q"}, Args: []string{"refs/heads/bad"}}); err == nil {
		t.Error("the refused fetch created the ref")
	}
}

// TestFsckConfigEntries checks both directions a bad object can enter a
// repository carry every id.
func TestFsckConfigEntries(t *testing.T) {
	got := map[string]bool{}
	for _, e := range globalConfig(Config{}, "/hooks") {
		if e.value == "error" {
			got[e.section+"."+e.key] = true
		}
	}
	for _, m := range fsckTreeErrors {
		for _, s := range []string{`receive "fsck"`, `fetch "fsck"`} {
			if !got[s+"."+m.id] {
				t.Errorf("%s.%s = error missing from the global config", s, m.id)
			}
		}
	}
}
