package loadgen

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// sshGitServer runs the real git upload-pack and receive-pack behind an
// in-process SSH server over the gitServer's repositories: just enough of
// what Sluice's sshd does (one exec per session, GIT_PROTOCOL from an env
// request) to exercise the client.
type sshGitServer struct {
	*gitServer
	addr   string
	client ssh.Signer
	// protocols records the GIT_PROTOCOL of each exec.
	mu        sync.Mutex
	protocols []string
}

func newSSHGitServer(t *testing.T) *sshGitServer {
	t.Helper()
	s := &sshGitServer{gitServer: newGitServer(t)}
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	_, clientPriv, _ := ed25519.GenerateKey(rand.Reader)
	host, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	s.client, err = ssh.NewSignerFromKey(clientPriv)
	if err != nil {
		t.Fatal(err)
	}
	want := string(s.client.PublicKey().Marshal())
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) != want {
			return nil, errors.New("unknown key")
		}
		return nil, nil
	}}
	cfg.AddHostKey(host)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.serveConn(c, cfg) })
		}
	})
	return s
}

func (s *sshGitServer) serveConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "no")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		s.serveSession(ch, creqs)
	}
}

func (s *sshGitServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var proto string
	for req := range reqs {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			ok := ssh.Unmarshal(req.Payload, &kv) == nil && kv.Name == "GIT_PROTOCOL"
			if ok {
				proto = kv.Value
			}
			req.Reply(ok, nil)
		case "exec":
			var cmd struct{ Command string }
			if ssh.Unmarshal(req.Payload, &cmd) != nil {
				req.Reply(false, nil)
				return
			}
			req.Reply(true, nil)
			s.mu.Lock()
			s.protocols = append(s.protocols, proto)
			s.mu.Unlock()
			status := s.exec(ch, cmd.Command, proto)
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
			return
		default:
			req.Reply(false, nil)
		}
	}
}

// exec runs "git-upload-pack '/name'" or git-receive-pack on the channel.
func (s *sshGitServer) exec(ch ssh.Channel, command, proto string) uint32 {
	service, quoted, _ := strings.Cut(command, " ")
	name := strings.TrimPrefix(strings.Trim(quoted, "'"), "/")
	dir := s.path(name)
	if _, err := os.Stat(dir); err != nil || (service != "git-upload-pack" && service != "git-receive-pack") {
		ch.Stderr().Write([]byte("repository not found\n"))
		return 1
	}
	cmd := exec.Command("git", strings.TrimPrefix(service, "git-"), dir)
	cmd.Env = append(os.Environ(), "HOME="+s.home, "GIT_CONFIG_NOSYSTEM=1")
	if proto != "" {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+proto)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
	if err := cmd.Run(); err != nil {
		return 1
	}
	return 0
}

func (s *sshGitServer) sshClient(t *testing.T, signer ssh.Signer) *SSHClient {
	t.Helper()
	c, err := NewSSHClient(SSHOptions{Addr: s.addr, Signer: signer, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSSHClone(t *testing.T) {
	s := newSSHGitServer(t)
	dir := s.repo("r.git", 30)
	want := s.countObjects(dir)
	c := s.sshClient(t, s.client)
	for _, proto := range []Protocol{V0, V2} {
		t.Run(proto.String(), func(t *testing.T) {
			res, err := c.Clone(testContext(t), "/r.git", CloneOptions{Protocol: proto})
			if err != nil {
				t.Fatal(err)
			}
			if int(res.Objects) != want || res.Wants != 3 {
				t.Errorf("objects %d (want %d), wants %d (want 3)", res.Objects, want, res.Wants)
			}
			if res.PackBytes < 32 || res.Bytes <= res.PackBytes || res.TTFB <= 0 || res.TTFB > res.Total {
				t.Errorf("pack bytes %d, bytes %d, ttfb %s, total %s", res.PackBytes, res.Bytes, res.TTFB, res.Total)
			}
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.Join(s.protocols, ",") != ",version=2" {
		t.Errorf("GIT_PROTOCOL per exec = %q, want none for v0 and version=2 for v2", s.protocols)
	}
}

func TestSSHFetchWithHaves(t *testing.T) {
	s := newSSHGitServer(t)
	dir := s.repo("r.git", 30)
	c := s.sshClient(t, s.client)
	have := s.git(dir, "rev-parse", "main~5")
	for _, proto := range []Protocol{V0, V2} {
		res, err := c.Fetch(testContext(t), "/r.git", FetchOptions{Protocol: proto, Haves: []string{have}})
		if err != nil {
			t.Fatalf("%v: %v", proto, err)
		}
		full := s.countObjects(dir)
		if res.Common != 1 || int(res.Objects) >= full || res.Objects == 0 {
			t.Errorf("%v: common %d, objects %d of %d", proto, res.Common, res.Objects, full)
		}
	}
}

func TestSSHLsRemoteAndPush(t *testing.T) {
	s := newSSHGitServer(t)
	dir := s.repo("r.git", 5)
	c := s.sshClient(t, s.client)
	ctx := testContext(t)
	for _, proto := range []Protocol{V0, V2} {
		refs, err := c.LsRemote(ctx, "/r.git", proto)
		if err != nil {
			t.Fatalf("%v: %v", proto, err)
		}
		names := map[string]string{}
		for _, r := range refs {
			names[r.Name] = r.OID
		}
		if names["refs/heads/main"] != s.git(dir, "rev-parse", "main") || names["refs/tags/v1"] == "" {
			t.Errorf("%v: refs %v", proto, refs)
		}
	}
	for range 2 { // create the branch, then move it
		res, err := c.Push(ctx, "/r.git", "load/1", PushOptions{FileSize: 300})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.git(dir, "rev-parse", "load/1"); got != res.New || res.PackBytes == 0 {
			t.Errorf("branch at %s, pushed %s (%d pack bytes)", got, res.New, res.PackBytes)
		}
	}
	if out := s.git(dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("fsck: %s", out)
	}
}

func TestSSHErrors(t *testing.T) {
	s := newSSHGitServer(t)
	s.repo("r.git", 3)
	c := s.sshClient(t, s.client)
	ctx := testContext(t)

	// The server's stderr is the error when it refuses the exec.
	_, err := c.Clone(ctx, "/missing.git", CloneOptions{Protocol: V2})
	var re *RemoteError
	if !errors.As(err, &re) || re.Message != "repository not found" {
		t.Errorf("missing repository: %v", err)
	}
	// A path that would need quoting never reaches the server.
	for _, p := range []string{"/r.git' ; id '", "/../r.git", "-r.git", "", "/r\n.git"} {
		if _, err := c.LsRemote(ctx, p, V2); err == nil || !strings.Contains(err.Error(), "invalid repository path") {
			t.Errorf("path %q: %v", p, err)
		}
	}
	// A key the server does not know fails the handshake.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(other)
	if _, err := s.sshClient(t, signer).LsRemote(ctx, "/r.git", V2); err == nil || !strings.Contains(err.Error(), "handshake") {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := NewSSHClient(SSHOptions{Addr: s.addr, Signer: s.client}); err == nil {
		t.Error("client without a host key callback")
	}
	// A cancelled context ends the operation.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Clone(cctx, "/r.git", CloneOptions{Protocol: V2}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled clone: %v", err)
	}
}

// TestSSHRun drives concurrent SSH clones through Run, as the benchmark
// does.
func TestSSHRun(t *testing.T) {
	s := newSSHGitServer(t)
	s.repo("r.git", 10)
	c := s.sshClient(t, s.client)
	rep := Run(testContext(t), Spec{Workers: 3, MaxOps: 6, Op: func(ctx context.Context, _ int) (int64, error) {
		res, err := c.Clone(ctx, "/r.git", CloneOptions{Protocol: V2})
		return res.Bytes, err
	}})
	if rep.Ops != 6 || rep.Errors != 0 {
		t.Fatalf("ops %d, errors %q", rep.Ops, rep.ErrorSamples)
	}
}
