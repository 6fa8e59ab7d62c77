package githttp_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

func TestPushRejections(t *testing.T) {
	f := newFixture(t, serverOptions{maxInputSize: 16 << 10})
	wt := f.seed(2)
	before := f.refs(f.repo)

	t.Run("ref component beginning with a dash", func(t *testing.T) {
		errOut := f.failGit(wt, "push", f.writerURL(), "main:refs/heads/--output=x")
		if !strings.Contains(errOut, "--output=x") || !strings.Contains(errOut, "declined") {
			t.Fatalf("stderr:\n%s", errOut)
		}
	})

	t.Run("malformed commit", func(t *testing.T) {
		// A commit git can walk (tree and parent are fine) but whose author
		// line fsck refuses.
		tree := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main^{tree}"))
		parent := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
		body := fmt.Sprintf("tree %s\nparent %s\nauthor no email here\ncommitter A <a@b> 1 +0000\n\nbroken\n", tree, parent)
		obj := filepath.Join(t.TempDir(), "commit")
		if err := os.WriteFile(obj, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(f.mustGit(wt, "hash-object", "--literally", "-t", "commit", "-w", obj))
		f.mustGit(wt, "update-ref", "refs/heads/broken", id)
		errOut := f.failGit(wt, "push", f.writerURL(), "broken")
		if !strings.Contains(errOut, "fsck") && !strings.Contains(errOut, "unpack") {
			t.Fatalf("stderr:\n%s", errOut)
		}
	})

	t.Run("pack over git.max_input_size", func(t *testing.T) {
		dir := f.mustGitClone(t)
		f.commit(dir, "big.txt", randomText(64<<10))
		errOut := f.failGit(dir, "push", "origin", "main:refs/heads/big")
		if !strings.Contains(errOut, "pack exceeds maximum allowed size") {
			t.Fatalf("stderr:\n%s", errOut)
		}
	})

	if after := f.refs(f.repo); after != before {
		t.Fatalf("refs changed:\n%s\nwant:\n%s", after, before)
	}
	f.fsck(f.repo)
}

// mustGitClone clones the fixture's repository as alice.
func (f *fixture) mustGitClone(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	f.mustGit("", "clone", "-q", f.writerURL(), dir)
	return dir
}

func TestConcurrentPushesToOneBranch(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	for round := 0; round < 2; round++ {
		// Two clones of the server's main, made locally to spare the
		// server work that is not under test.
		f.mustGit(wt, "pull", "-q", "--ff-only", f.writerURL(), "main")
		a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		for _, dir := range []string{a, b} {
			f.mustGit("", "clone", "-q", wt, dir)
			f.mustGit(dir, "remote", "set-url", "origin", f.writerURL())
		}
		heads := []string{
			f.commit(a, "a.txt", fmt.Sprintf("a %d\n", round)),
			f.commit(b, "b.txt", fmt.Sprintf("b %d\n", round)),
		}
		errs := make([]error, 2)
		stderr := make([]string, 2)
		var wg sync.WaitGroup
		for i, dir := range []string{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, stderr[i], errs[i] = f.git(dir, "push", "origin", "main")
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: want exactly one push to win: %v / %v\n%s\n%s", round, errs[0], errs[1], stderr[0], stderr[1])
		}
		winner, loser := 0, 1
		if errs[0] != nil {
			winner, loser = 1, 0
		}
		if !strings.Contains(stderr[loser], "rejected") {
			t.Fatalf("round %d: loser's stderr:\n%s", round, stderr[loser])
		}
		if !strings.Contains(f.refs(f.repo), heads[winner]+" refs/heads/main") {
			t.Fatalf("round %d: main is not the winner's %s:\n%s", round, heads[winner], f.refs(f.repo))
		}
	}
	f.fsck(f.repo)
}

// TestClientDisconnectMidPush sends the ref update and half of its pack,
// then hangs up: git must be stopped and no ref may move.
func TestClientDisconnectMidPush(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	old := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
	f.commit(wt, "big.txt", randomText(256<<10))
	head := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
	pack := packBetween(t, wt, old, head)
	before := f.refs(f.repo)

	cmd := fmt.Sprintf("%s %s refs/heads/main\x00report-status side-band-64k\n", old, head)
	body := fmt.Sprintf("%04x%s0000", len(cmd)+4, cmd) + string(pack)
	conn, err := net.Dial("tcp", f.host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /scm/PROJ/app.git/git-receive-pack HTTP/1.1\r\nHost: %s\r\n"+
		"Authorization: %s\r\nContent-Type: application/x-git-receive-pack-request\r\n"+
		"Content-Length: %d\r\n\r\n", f.host, basic("alice", f.aliceTok), len(body))
	if _, err := conn.Write([]byte(body[:len(body)/2])); err != nil {
		t.Fatal(err)
	}
	// Let git start reading the pack before the connection goes.
	time.Sleep(200 * time.Millisecond)
	conn.Close()

	wait.For(t, "operation to end", 10*time.Second, func() bool { return f.operationLogged("receive-pack") })
	if after := f.refs(f.repo); after != before {
		t.Fatalf("refs changed:\n%s", after)
	}
	// The aborted push's quarantine went with it (git removes it on
	// SIGTERM; housekeeping removes one a SIGKILL left behind).
	if q, _ := filepath.Glob(filepath.Join(f.repos.Path(f.repo.ID), "objects", "*incoming-*")); len(q) > 0 {
		t.Fatalf("quarantine left behind: %q", q)
	}
	// The repository is usable: no lock or half-written ref left behind.
	f.mustGit(wt, "push", "-q", f.writerURL(), "main")
	if !strings.Contains(f.refs(f.repo), head+" refs/heads/main") {
		t.Fatalf("push after the disconnect did not land:\n%s", f.refs(f.repo))
	}
	f.fsck(f.repo)
}

// TestPushStreamsResult checks a complete hand-made push, so that the
// disconnect test above fails for the right reason.
func TestHandMadePush(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	old := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
	head := f.commit(wt, "x.txt", "x\n")
	pack := packBetween(t, wt, old, head)
	cmd := fmt.Sprintf("%s %s refs/heads/main\x00report-status\n", old, head)
	body := fmt.Sprintf("%04x%s0000", len(cmd)+4, cmd) + string(pack)
	code, hdr, resp := f.do("POST", "/scm/PROJ/app.git/git-receive-pack", http.Header{
		"Authorization": {basic("alice", f.aliceTok)},
		"Content-Type":  {"application/x-git-receive-pack-request"},
	}, strings.NewReader(body))
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/x-git-receive-pack-result" ||
		!strings.Contains(resp, "unpack ok") || !strings.Contains(resp, "ok refs/heads/main") {
		t.Fatalf("status %d, content type %q, body %q", code, hdr.Get("Content-Type"), resp)
	}
	if !strings.Contains(f.refs(f.repo), head+" refs/heads/main") {
		t.Fatalf("refs:\n%s", f.refs(f.repo))
	}
}

// packBetween is the pack git would send to move a ref from old to head.
func packBetween(t *testing.T, dir, old, head string) []byte {
	t.Helper()
	cmd := exec.Command("git", "pack-objects", "--stdout", "--revs", "--thin", "-q")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(head + "\n^" + old + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pack-objects: %v", err)
	}
	return out
}

// operationLogged says whether hosting has logged the end of a command
// (gitcmd's own lines name the command too, earlier).
func (s *server) operationLogged(command string) bool {
	for _, line := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(line, `msg="git operation"`) && strings.Contains(line, "command="+command+" ") {
			return true
		}
	}
	return false
}
