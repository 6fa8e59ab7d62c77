package sshd_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// key is a client key pair on disk (for OpenSSH) and in memory (for the
// x/crypto client).
type key struct {
	path   string // private key file, mode 0600
	signer ssh.Signer
	line   string // authorized_keys line
}

func newKey(t *testing.T) *key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return &key{path: path, signer: signer, line: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))}
}

// register adds k as a user key (repoID 0) or an access key.
func register(t *testing.T, n *testbed.Node, k *key, userID, repoID int64, scope store.Scope) *store.SSHKey {
	t.Helper()
	sk := &store.SSHKey{UserID: userID, RepoID: repoID, Scope: scope, Label: "test", PublicKey: k.line,
		Fingerprint: ssh.FingerprintSHA256(k.signer.PublicKey())}
	if err := n.Store().AddSSHKey(context.Background(), sk); err != nil {
		t.Fatal(err)
	}
	return sk
}

// client runs the real OpenSSH client and git with one key.
type client struct {
	t         *testing.T
	key       *key
	knownHost string
	home      string
	// logLevel is OpenSSH's LogLevel: ERROR keeps stderr to the server's
	// messages; INFO also shows authentication banners.
	logLevel string
}

func newClient(t *testing.T, k *key) *client {
	dir := t.TempDir()
	return &client{t: t, key: k, knownHost: filepath.Join(dir, "known_hosts"), home: dir, logLevel: "ERROR"}
}

// sshArgs are the options every ssh invocation uses: this key only, no
// user configuration, the host key pinned on first use in a file of the
// test's own, and (at LogLevel ERROR) no chatter on stderr so messages
// can be compared.
func (c *client) sshArgs() []string {
	return []string{"-F", "/dev/null", "-i", c.key.path, "-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + c.knownHost, "-o", "StrictHostKeyChecking=accept-new",
		"-o", "LogLevel=" + c.logLevel, "-o", "ConnectTimeout=10"}
}

func (c *client) env() []string {
	return append(testbed.GitEnv(c.home),
		"GIT_SSH_COMMAND=ssh "+strings.Join(c.sshArgs(), " "))
}

// git runs git and returns stdout, stderr and the error.
func (c *client) git(dir string, extraEnv []string, args ...string) (string, string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(c.env(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func (c *client) mustGit(dir string, args ...string) string {
	c.t.Helper()
	out, errOut, err := c.git(dir, nil, args...)
	if err != nil {
		c.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// ssh runs the OpenSSH client against the node with extra options and a
// remote command; it returns stdout, stderr and the exit status.
func (c *client) ssh(addr string, stdin io.Reader, opts []string, command ...string) (string, string, int) {
	c.t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		c.t.Fatal(err)
	}
	args := append(c.sshArgs(), "-p", port)
	args = append(args, opts...)
	args = append(args, "git@"+host)
	args = append(args, command...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", args...)
	cmd.Env = testbed.GitEnv(c.home)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("run ssh: %v", err)
	}
	return stdout.String(), stderr.String(), code
}

// goClient connects with the x/crypto client, which can send what OpenSSH
// cannot (NUL bytes, crafted key sequences).
func goClient(t *testing.T, addr string, auths ...ssh.AuthMethod) (*ssh.Client, error) {
	t.Helper()
	return goClientFrom(t, nil, addr, auths...)
}

// goClientFrom is goClient from a local address of the test's choice
// (nil: any), so that one test can be several sources on the loopback.
func goClientFrom(t *testing.T, local net.Addr, addr string, auths ...ssh.AuthMethod) (*ssh.Client, error) {
	t.Helper()
	raw, err := (&net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}).Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	// The deadline bounds the handshake only, as ssh.Dial's Timeout does.
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	conn, chans, reqs, err := ssh.NewClientConn(raw, addr, &ssh.ClientConfig{
		User:            "git",
		Auth:            auths,
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
	})
	if err != nil {
		raw.Close()
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	c := ssh.NewClient(conn, chans, reqs)
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// run executes command in a new session and returns stdout, stderr and
// the exit status (-1 when the session ended without one).
func run(t *testing.T, c *ssh.Client, stdin string, command string) (string, string, int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	s.Stdin = strings.NewReader(stdin)
	err = s.Run(command)
	code := 0
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitStatus()
	case err != nil:
		code = -1
	}
	return stdout.String(), stderr.String(), code
}

// badSigner offers a real public key but cannot prove it holds the
// private half: its signatures are random bytes.
type badSigner struct{ pub ssh.PublicKey }

func (b badSigner) PublicKey() ssh.PublicKey { return b.pub }

func (b badSigner) Sign(io.Reader, []byte) (*ssh.Signature, error) {
	blob := make([]byte, ed25519.SignatureSize)
	if _, err := rand.Read(blob); err != nil {
		return nil, err
	}
	return &ssh.Signature{Format: b.pub.Type(), Blob: blob}, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func mustContain(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("%s = %q, want it to contain %q", what, got, want)
	}
}
