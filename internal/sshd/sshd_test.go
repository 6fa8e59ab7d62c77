package sshd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// fixture is a node serving SSH with one private repository PROJ/app,
// seeded with history; alice may write to it, bob may not even read it.
type fixture struct {
	n            *testbed.Node
	repo         *store.Repository
	alice, bob   *store.User
	aliceKey     *key
	bobKey       *key
	alice1, bob1 *client
	wt           string // alice's work tree, pushed to PROJ/app
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{n: testbed.NewNode(t, testbed.NodeOptions{SSH: true})}
	f.repo = f.n.CreateRepo(t, "PROJ", "app")
	f.alice = f.n.CreateUser(t, "alice", "alice-password")
	f.bob = f.n.CreateUser(t, "bob", "bob-password")
	f.n.Grant(t, f.repo, f.alice.ID, store.PermRepoWrite)
	f.aliceKey, f.bobKey = newKey(t), newKey(t)
	register(t, f.n, f.aliceKey, f.alice.ID, 0, "")
	register(t, f.n, f.bobKey, f.bob.ID, 0, "")
	f.alice1, f.bob1 = newClient(t, f.aliceKey), newClient(t, f.bobKey)
	f.wt = testbed.WorkTree(t, 3)
	f.alice1.mustGit(f.wt, "push", "-q", f.n.SSHURL("PROJ", "app"), "main")
	return f
}

func (f *fixture) addr() string { return f.n.App.SSHAddr() }

func TestCloneFetchPushLsRemote(t *testing.T) {
	f := newFixture(t)
	head := strings.TrimSpace(testbed.Git(t, f.wt, "rev-parse", "HEAD"))
	for _, v := range []string{"0", "2"} {
		t.Run("v"+v, func(t *testing.T) {
			c := f.alice1
			proto := "protocol.version=" + v
			// The project key in lower case and no ".git": both accepted.
			url := strings.Replace(strings.TrimSuffix(f.n.SSHURL("PROJ", "app"), ".git"), "/PROJ/", "/proj/", 1)

			out, errOut, err := c.git("", []string{"GIT_TRACE_PACKET=1"}, "-c", proto, "ls-remote", url)
			if err != nil {
				t.Fatalf("ls-remote: %v\n%s", err, errOut)
			}
			mustContain(t, "ls-remote", out, head+"\trefs/heads/main")
			// Protocol v2 travels in the SSH env request; without it git
			// would silently fall back to v0 and this test prove nothing.
			if got := strings.Contains(errOut, "< version 2"); got != (v == "2") {
				t.Errorf("server spoke protocol v2 = %v, want %v", got, v == "2")
			}

			clone := filepath.Join(t.TempDir(), "clone")
			c.mustGit("", "-c", proto, "clone", "-q", url, clone)
			if got := strings.TrimSpace(testbed.Git(t, clone, "rev-parse", "HEAD")); got != head {
				t.Fatalf("cloned HEAD %s, want %s", got, head)
			}

			// Push a commit from the clone, then fetch it into the
			// original work tree.
			if err := os.WriteFile(filepath.Join(clone, "v"+v+".txt"), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
			testbed.Git(t, clone, "add", "-A")
			testbed.Git(t, clone, "commit", "-q", "-m", "over ssh v"+v)
			c.mustGit(clone, "-c", proto, "push", "-q", "origin", "main")
			newHead := strings.TrimSpace(testbed.Git(t, clone, "rev-parse", "HEAD"))
			c.mustGit(f.wt, "-c", proto, "fetch", "-q", url, "main")
			if got := strings.TrimSpace(testbed.Git(t, f.wt, "rev-parse", "FETCH_HEAD")); got != newHead {
				t.Fatalf("fetched %s, want %s", got, newHead)
			}
			head = newHead
		})
	}
	t.Run("archive", func(t *testing.T) {
		out, errOut, err := f.alice1.git(t.TempDir(), nil, "archive", "--remote="+f.n.SSHURL("PROJ", "app"), "--format=tar", "main")
		if err != nil {
			t.Fatalf("archive: %v\n%s", err, errOut)
		}
		mustContain(t, "archive", out, "file0.txt")
	})
}

// TestRefusals runs the scenarios that only read, on one shared node.
func TestRefusals(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"SameAnswerForEveryRefusal", testSameAnswerForEveryRefusal},
		{"BadCommands", testBadCommands},
		{"EnvironmentIgnored", testEnvironmentIgnored},
		{"ShellPtyAndForwardingRefused", testShellPtyAndForwardingRefused},
		{"IdentityFromVerifiedKeyOnly", testIdentityFromVerifiedKeyOnly},
		{"NoKeyMatched", testNoKeyMatched},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}

	// What happened above shows in the node's metrics.
	for _, m := range []struct {
		name, label, value string
	}{
		{"sluice_ssh_connections_total", "", ""},
		{"sluice_ssh_auth_failures_total", "reason", "unknown_key"},
		{"sluice_git_operations_total", "transport", "ssh"},
	} {
		if v := metric(t, f.n, m.name, m.label, m.value); v < 1 {
			t.Errorf("%s{%s=%q} = %v, want at least 1", m.name, m.label, m.value, v)
		}
	}
}

// metric sums the samples of a counter family whose label has value
// (every sample when label is "").
func metric(t *testing.T, n *testbed.Node, name, label, value string) float64 {
	t.Helper()
	families, err := n.App.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// testSameAnswerForEveryRefusal: a key of a user without access and a
// repository that does not exist are indistinguishable. (An unknown key
// is told so: testNoKeyMatched.)
func testSameAnswerForEveryRefusal(t *testing.T, f *fixture) {
	cases := []struct {
		name string
		c    *client
		url  string
	}{
		{"user without access", f.bob1, f.n.SSHURL("PROJ", "app")},
		{"missing repository", f.alice1, f.n.SSHURL("PROJ", "nope")},
		{"missing project", f.alice1, f.n.SSHURL("NOPE", "app")},
	}
	var first string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{{"ls-remote", tc.url}, {"push", tc.url, "main"}} {
				_, errOut, err := tc.c.git(f.wt, nil, args...)
				if err == nil {
					t.Fatalf("git %s succeeded", args[0])
				}
				mustContain(t, "stderr", errOut, "repository not found or access denied")
				if args[0] != "ls-remote" {
					continue
				}
				if first == "" {
					first = errOut
				} else if errOut != first {
					t.Errorf("stderr differs from the first case:\n%q\n%q", errOut, first)
				}
			}
		})
	}
}

func testBadCommands(t *testing.T, f *fixture) {
	dir := t.TempDir()
	marker := func(name string) string { return filepath.Join(dir, name) }
	cases := []struct {
		name, command, marker string
	}{
		{"upload-pack option", "git-upload-pack '--upload-pack=touch " + marker("a") + "'", marker("a")},
		{"help", "git-upload-pack '--help'", ""},
		{"unquoted help", "git-upload-pack --help", ""},
		{"semicolon", "git-upload-pack '/PROJ/app.git'; touch " + marker("b"), marker("b")},
		{"quoted semicolon", "git-upload-pack '/PROJ/app.git;touch " + marker("c") + "'", marker("c")},
		{"command substitution", "git-upload-pack '$(touch " + marker("d") + ")'", marker("d")},
		{"backticks", "git-upload-pack '`touch " + marker("e") + "`'", marker("e")},
		{"newline", "git-upload-pack '/PROJ/app.git'\ntouch " + marker("f"), marker("f")},
		{"unbalanced quote", "git-upload-pack '/PROJ/app.git", ""},
		{"escaped quote", `git-upload-pack '/PROJ/app'\''.git'`, ""},
		{"dot dot", "git-upload-pack '/PROJ/../PROJ/app.git'", ""},
		{"other program", "touch " + marker("g"), marker("g")},
		{"git with space", "git upload-pack '/PROJ/app.git'", ""},
		{"two arguments", "git-upload-pack '/PROJ/app.git' '/PROJ/app.git'", ""},
		{"no argument", "git-upload-pack", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := f.alice1.ssh(f.addr(), nil, nil, tc.command)
			if code != 1 {
				t.Errorf("exit status %d, want 1 (stderr %q)", code, errOut)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			mustContain(t, "stderr", errOut, "sluice accepts only")
			if tc.marker != "" && fileExists(tc.marker) {
				t.Errorf("%s was created", tc.marker)
			}
		})
	}
	// OpenSSH cannot put a NUL in a command; the x/crypto client can.
	t.Run("NUL", func(t *testing.T) {
		c, err := goClient(t, f.addr(), ssh.PublicKeys(f.aliceKey.signer))
		if err != nil {
			t.Fatal(err)
		}
		_, errOut, code := run(t, c, "", "git-upload-pack '/PROJ/app.git\x00--help'")
		if code != 1 || !strings.Contains(errOut, "sluice accepts only") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

// testEnvironmentIgnored: env requests other than GIT_PROTOCOL have no
// effect. Each would be visible if applied: LD_PRELOAD of a missing
// library makes the dynamic loader complain, and the GIT_CONFIG_* trio
// would hide every branch from the advertisement.
func testEnvironmentIgnored(t *testing.T, f *fixture) {
	opts := []string{
		"-o", "SetEnv=LD_PRELOAD=/nonexistent/sluice-test.so GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=uploadpack.hideRefs GIT_CONFIG_VALUE_0=refs GIT_SSH_COMMAND=false GIT_PROTOCOL=version=0:../x",
	}
	out, errOut, code := f.alice1.ssh(f.addr(), strings.NewReader("0000"), opts, "git-upload-pack '/PROJ/app.git'")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	mustContain(t, "advertisement", out, "refs/heads/main")
	if strings.Contains(errOut, "LD_PRELOAD") || strings.Contains(errOut, "ld.so") {
		t.Errorf("LD_PRELOAD reached a process: %q", errOut)
	}
}

func testShellPtyAndForwardingRefused(t *testing.T, f *fixture) {
	t.Run("shell", func(t *testing.T) {
		_, errOut, code := f.alice1.ssh(f.addr(), nil, []string{"-T"})
		if code == 0 {
			t.Error("shell succeeded")
		}
		mustContain(t, "stderr", errOut, "sluice does not provide shell access")
	})
	t.Run("pty", func(t *testing.T) {
		// -tt insists on a pty; OpenSSH treats the refusal as fatal, so
		// the command never runs.
		out, errOut, code := f.alice1.ssh(f.addr(), strings.NewReader("0000"), []string{"-tt"}, "git-upload-pack '/PROJ/app.git'")
		mustContain(t, "stderr", errOut, "PTY allocation request failed")
		if code == 0 || out != "" {
			t.Errorf("exit %d, stdout %q", code, out)
		}
	})
	t.Run("remote forward", func(t *testing.T) {
		_, errOut, code := f.alice1.ssh(f.addr(), nil, []string{"-N", "-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:9"})
		if code == 0 {
			t.Error("remote forwarding succeeded")
		}
		mustContain(t, "stderr", errOut, "forwarding failed")
	})
	t.Run("local forward", func(t *testing.T) {
		c, err := goClient(t, f.addr(), ssh.PublicKeys(f.aliceKey.signer))
		if err != nil {
			t.Fatal(err)
		}
		if conn, err := c.Dial("tcp", f.n.App.HTTPAddr()); err == nil {
			conn.Close()
			t.Fatal("direct-tcpip channel opened")
		}
		if ln, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
			ln.Close()
			t.Fatal("tcpip-forward accepted")
		}
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.RequestSubsystem("sftp"); err == nil {
			t.Error("sftp subsystem accepted")
		}
	})
}

// testIdentityFromVerifiedKeyOnly is the CVE-2024-45337 regression: the
// real OpenSSH client offers alice's public key, which the server accepts
// as registered, but cannot sign with it (the private half is missing);
// it then authenticates with bob's key. The session must be bob's.
func testIdentityFromVerifiedKeyOnly(t *testing.T, f *fixture) {
	bobRepo := f.n.CreateRepo(t, "BOB", "private")
	f.n.Grant(t, bobRepo, f.bob.ID, store.PermRepoRead)

	offerOnly := filepath.Join(t.TempDir(), "alice_offered")
	if err := os.WriteFile(offerOnly+".pub", []byte(f.aliceKey.line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, f.bobKey)
	opts := []string{"-v", "-o", "IdentityFile=" + offerOnly, "-o", "IdentityFile=" + f.bobKey.path}
	// The first -i in sshArgs is bob's; put alice's offer first instead.
	c.key = &key{path: offerOnly}
	_, errOut, code := c.ssh(f.addr(), strings.NewReader("0000"), opts, "git-upload-pack '/BOB/private.git'")
	if code != 0 {
		t.Fatalf("bob's repository: exit %d; the session is not bob's\n%s", code, errOut)
	}
	// The test proves something only if alice's key really was offered
	// and accepted before bob's authenticated.
	aliceFP := ssh.FingerprintSHA256(f.aliceKey.signer.PublicKey())
	bobFP := ssh.FingerprintSHA256(f.bobKey.signer.PublicKey())
	accepted := strings.Index(errOut, "Server accepts key: "+offerOnly+" ED25519 "+aliceFP)
	authed := strings.Index(errOut, "Authenticated")
	if accepted < 0 || authed < accepted || !strings.Contains(errOut[accepted:], bobFP) {
		t.Fatalf("alice's key was not offered and accepted before bob's authenticated:\n%s", errOut)
	}
	_, errOut, code = c.ssh(f.addr(), strings.NewReader("0000"), opts, "git-upload-pack '/PROJ/app.git'")
	if code != 1 || !strings.Contains(errOut, "repository not found or access denied") {
		t.Errorf("alice's repository: exit %d; the session is alice's\n%s", code, errOut)
	}

	// Offering alice's key alone, unproven, gives no session at all: ssh
	// exits 255, its own status for a connection it could not make.
	_, errOut, code = c.ssh(f.addr(), strings.NewReader("0000"), []string{"-o", "IdentityFile=" + offerOnly}, "git-upload-pack '/PROJ/app.git'")
	if code != 255 || !strings.Contains(errOut, "Permission denied") {
		t.Errorf("unproven key alone: exit %d\n%s", code, errOut)
	}

	// A forged signature is not an offer but an attack: the connection
	// ends.
	if _, err := goClient(t, f.addr(), ssh.PublicKeys(badSigner{pub: f.aliceKey.signer.PublicKey()})); err == nil {
		t.Error("a forged signature authenticated")
	}
}

func TestDisabledUserStopsAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A connection opened while alice was active...
	c, err := goClient(t, f.addr(), ssh.PublicKeys(f.aliceKey.signer))
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, c, "0000", "git-upload-pack '/PROJ/app.git'"); code != 0 {
		t.Fatalf("before: exit %d: %s", code, errOut)
	}
	f.alice.Active = false
	if err := f.n.Store().UpdateUser(ctx, f.alice); err != nil {
		t.Fatal(err)
	}
	// ...serves her nothing once she is disabled, and neither does a new one.
	if _, errOut, code := run(t, c, "0000", "git-upload-pack '/PROJ/app.git'"); code != 1 || !strings.Contains(errOut, "repository not found or access denied") {
		t.Errorf("same connection: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, err := f.alice1.git("", nil, "ls-remote", f.n.SSHURL("PROJ", "app")); err == nil || !strings.Contains(errOut, "repository not found or access denied") {
		t.Errorf("new connection: err %v, stderr %q", err, errOut)
	}
	// Deleting the user makes the key unknown, and the client is told.
	if err := f.n.Store().DeleteUser(ctx, f.alice.ID); err != nil {
		t.Fatal(err)
	}
	f.alice1.logLevel = "INFO"
	if _, errOut, err := f.alice1.git("", nil, "ls-remote", f.n.SSHURL("PROJ", "app")); err == nil || !strings.Contains(errOut, "none of the SSH keys this client offered is registered") {
		t.Errorf("deleted user: err %v, stderr %q", err, errOut)
	}
}

func TestAccessKeys(t *testing.T) {
	f := newFixture(t)
	other := f.n.CreateRepo(t, "PROJ", "other")
	readKey, writeKey := newKey(t), newKey(t)
	register(t, f.n, readKey, 0, f.repo.ID, store.ScopeRead)
	register(t, f.n, writeKey, 0, f.repo.ID, store.ScopeWrite)
	reader, writer := newClient(t, readKey), newClient(t, writeKey)

	clone := filepath.Join(t.TempDir(), "clone")
	reader.mustGit("", "clone", "-q", f.n.SSHURL("PROJ", "app"), clone)
	testbed.Git(t, clone, "commit", "-q", "--allow-empty", "-m", "ci")
	if _, errOut, err := reader.git(clone, nil, "push", "-q", "origin", "main"); err == nil {
		t.Error("read-only access key pushed")
	} else if strings.Contains(errOut, "repository not found") {
		t.Errorf("read-only push refused as not found: %q", errOut)
	}
	writer.mustGit(clone, "push", "-q", "origin", "main")
	// An access key reaches its own repository and nothing else.
	if _, errOut, err := writer.git("", nil, "ls-remote", f.n.SSHURL("PROJ", other.Slug)); err == nil || !strings.Contains(errOut, "repository not found or access denied") {
		t.Errorf("other repository: err %v, stderr %q", err, errOut)
	}
}

// TestHostKeyStableAcrossRestart: a client that pinned the host key keeps
// connecting after the node restarts on the same database.
func TestHostKeyStableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	opts := testbed.NodeOptions{SSH: true, Configure: func(c *config.Config) { c.Data.Dir = dir }}
	n := testbed.NewNode(t, opts)
	u := n.CreateUser(t, "alice", "alice-password")
	k := newKey(t)
	register(t, n, k, u.ID, 0, "")
	n.Grant(t, n.CreateRepo(t, "PROJ", "app"), u.ID, store.PermRepoRead)
	c := newClient(t, k)
	before := fingerprints(n)
	// The repository is empty: ls-remote succeeds with no output.
	c.mustGit("", "ls-remote", n.SSHURL("PROJ", "app"))
	n.Stop()

	n = testbed.NewNode(t, opts)
	if after := fingerprints(n); after != before {
		t.Fatalf("host keys changed across restart:\n%s\n%s", before, after)
	}
	// known_hosts holds the key for 127.0.0.1:OLDPORT; pin it for the new
	// port too and insist on it.
	kh, err := os.ReadFile(c.knownHost)
	if err != nil {
		t.Fatal(err)
	}
	_, newPort, _ := strings.Cut(n.App.SSHAddr(), ":")
	var pinned []string
	for _, line := range strings.Split(strings.TrimSpace(string(kh)), "\n") {
		_, rest, _ := strings.Cut(line, " ")
		pinned = append(pinned, "[127.0.0.1]:"+newPort+" "+rest)
	}
	if err := os.WriteFile(c.knownHost, []byte(strings.Join(pinned, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := c.git("", []string{"GIT_SSH_COMMAND=ssh " + strings.Join(c.sshArgs(), " ") + " -o StrictHostKeyChecking=yes"},
		"ls-remote", n.SSHURL("PROJ", "app")); err != nil {
		t.Fatalf("ls-remote after restart with the pinned host key: %v\n%s", err, errOut)
	}
}

func fingerprints(n *testbed.Node) string {
	var fps []string
	for _, k := range n.App.SSH.HostKeys() {
		fps = append(fps, k.Type()+" "+ssh.FingerprintSHA256(k))
	}
	return strings.Join(fps, "\n")
}
