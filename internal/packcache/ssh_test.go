package packcache_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// sshClient is the OpenSSH client with a key registered to the admin.
type sshClient struct {
	w      *world
	key    string
	home   string
	signer ssh.Signer
}

func newSSHClient(t *testing.T, w *world) *sshClient {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &sshClient{w: w, key: filepath.Join(dir, "id_ed25519"), home: dir}
	if err := os.WriteFile(c.key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	c.signer = signer
	admin, err := w.n.Store().UserByName(context.Background(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	k := &store.SSHKey{UserID: admin.ID, Label: "test", Fingerprint: ssh.FingerprintSHA256(signer.PublicKey()),
		PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))}
	if err := w.n.Store().AddSSHKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *sshClient) args() []string {
	return []string{"-F", "/dev/null", "-i", c.key, "-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + filepath.Join(c.home, "known_hosts"), "-o", "StrictHostKeyChecking=accept-new",
		"-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"}
}

func (c *sshClient) git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(testbed.GitEnv(c.home), "GIT_SSH_COMMAND=ssh "+strings.Join(c.args(), " "))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// session runs one raw upload-pack session over SSH with protocol v2 and
// returns what the server sent.
func (c *sshClient) session(t *testing.T, stdin []byte) []byte {
	return c.sessionWith(t, "version=2", stdin)
}

// sessionWith runs one raw upload-pack session with the OpenSSH client,
// GIT_PROTOCOL set to protocol unless empty.
func (c *sshClient) sessionWith(t *testing.T, protocol string, stdin []byte) []byte {
	t.Helper()
	host, port, err := net.SplitHostPort(c.w.n.App.SSHAddr())
	if err != nil {
		t.Fatal(err)
	}
	args := append(c.args(), "-p", port)
	if protocol != "" {
		args = append(args, "-o", "SetEnv=GIT_PROTOCOL="+protocol)
	}
	args = append(args, "git@"+host, "git-upload-pack 'proj/app.git'")
	cmd := exec.Command("ssh", args...)
	cmd.Env = testbed.GitEnv(c.home)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("ssh session: %v\n%s", err, errOut.String())
	}
	return out.Bytes()
}

// TestSSHv2 checks protocol v2 over SSH: a session answered from the cache
// equals git's answer to the same commands, a second clone starts no git,
// and a push is seen at once.
func TestSSHv2(t *testing.T) {
	w := newWorldWith(t, 8, testbed.NodeOptions{SSH: true})
	c := newSSHClient(t, w)
	head := w.rev("main")
	v2 := func(cmd string, args ...string) []byte {
		return pkts(append([]string{"command=" + cmd, "agent=git/2.39.5", "object-format=sha1", "0001"}, append(args, "0000")...)...)
	}
	lsRefs := v2("ls-refs", "peel", "symrefs", "ref-prefix HEAD", "ref-prefix refs/heads/")
	fetch := v2("fetch", "ofs-delta", "want "+head, "done")
	stdin := append(append(append([]byte{}, lsRefs...), fetch...), "0000"...)

	var first, second, want []byte
	var started float64
	w.stable(func() {
		first = c.session(t, stdin)
		before := w.started()
		second = c.session(t, stdin)
		started = w.started() - before
		want = append(append(w.direct("version=2", nil, true), w.direct("version=2", lsRefs, false)...), w.direct("version=2", fetch, false)...)
	})
	if started != 0 {
		t.Fatalf("a cached session started %v git processes", started)
	}
	if !bytes.Equal(first, second) {
		t.Fatal("hit differs from miss")
	}
	if !bytes.Equal(withoutProgress(t, want), withoutProgress(t, second)) {
		t.Fatalf("cache answers differently from git:\ngit:   %q\ncache: %q", want, second)
	}

	url := w.n.SSHURL("PROJ", "app")
	clone := func() string {
		dir := filepath.Join(t.TempDir(), "c")
		c.git(t, "", "-c", "protocol.version=2", "clone", "-q", url, dir)
		return strings.TrimSpace(testbed.Git(t, dir, "rev-parse", "HEAD"))
	}
	w.stable(func() {
		clone()
		before := w.started()
		if got := clone(); got != head {
			t.Fatalf("clone at %s, want %s", got, head)
		}
		started = w.started() - before
	})
	if started != 0 {
		t.Fatalf("a cached SSH clone started %v git processes", started)
	}

	os.WriteFile(filepath.Join(w.wt, "ssh.txt"), []byte("over ssh"), 0o644)
	testbed.Git(t, w.wt, "add", "-A")
	testbed.Git(t, w.wt, "commit", "-q", "-m", "over ssh")
	c.git(t, w.wt, "push", "-q", url, "main")
	if got := clone(); got != w.rev("main") {
		t.Fatalf("clone after push at %s, want %s", got, w.rev("main"))
	}
	// Protocol v0 sessions work alongside (see ssh_v0_test.go).
	dir := filepath.Join(t.TempDir(), "v0")
	c.git(t, "", "-c", "protocol.version=0", "clone", "-q", url, dir)
	if got := strings.TrimSpace(testbed.Git(t, dir, "rev-parse", "HEAD")); got != w.rev("main") {
		t.Fatalf("v0 clone at %s", got)
	}
}
