package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSH transport.
//
// Each operation opens a connection of its own, with a full key exchange
// and public-key authentication, and runs one exec session on it —
// `git-upload-pack '/KEY/slug.git'` or `git-receive-pack …` — because that
// is what git does: every git command starts a new ssh process. The
// server's handshake is therefore part of what an SSH operation costs it,
// as it is for real clients. Protocol v2 is asked for with an "env"
// request GIT_PROTOCOL=version=2 before the exec, as OpenSSH sends it when
// git sets the variable.
//
// The session is stateful, unlike HTTP: the server speaks first (the v0
// ref advertisement or the v2 capabilities), and the client's requests and
// the server's answers alternate on the one stream. The request bodies and
// the parsers are the HTTP client's.

// SSHOptions configure an SSHClient.
type SSHOptions struct {
	// Addr is the server's host:port.
	Addr string
	// User is the SSH user; default "git", as in ssh://git@HOST/….
	User string
	// Signer is the client key.
	Signer ssh.Signer
	// HostKeyCallback checks the server's host key; required, so that
	// skipping the check is a decision the caller writes down.
	HostKeyCallback ssh.HostKeyCallback
	// Agent is sent as the agent capability; default "sluice-loadgen/1".
	Agent string
}

// SSHClient runs git operations over SSH. It is safe for concurrent use.
type SSHClient struct {
	addr string
	cfg  *ssh.ClientConfig
	// proto builds request bodies; it makes no HTTP requests.
	proto *Client
}

// NewSSHClient returns a client for the server at opts.Addr.
func NewSSHClient(opts SSHOptions) (*SSHClient, error) {
	if opts.Signer == nil {
		return nil, errors.New("ssh client: no key")
	}
	if opts.HostKeyCallback == nil {
		return nil, errors.New("ssh client: no host key callback")
	}
	user := opts.User
	if user == "" {
		user = "git"
	}
	agent := opts.Agent
	if agent == "" {
		agent = "sluice-loadgen/1"
	}
	return &SSHClient{
		addr: opts.Addr,
		cfg: &ssh.ClientConfig{
			User:            user,
			Auth:            []ssh.AuthMethod{ssh.PublicKeys(opts.Signer)},
			HostKeyCallback: opts.HostKeyCallback,
			// OpenSSH's order, which git's ssh uses: ed25519 before RSA.
			// x/crypto's default prefers RSA, and a 3072-bit RSA signature
			// costs the server ~5 ms per connection, which real clients
			// of a server that has an ed25519 key never ask for.
			HostKeyAlgorithms: []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256},
			Timeout:           10 * time.Second,
		},
		proto: &Client{agent: agent},
	}, nil
}

// Clone fetches every branch and tag with no haves, as `git clone` does.
// path is the repository's path on the server, "/KEY/slug.git".
func (c *SSHClient) Clone(ctx context.Context, path string, opts CloneOptions) (Result, error) {
	return c.Fetch(ctx, path, FetchOptions{Protocol: opts.Protocol, Verify: opts.Verify})
}

// Fetch negotiates with opts.Haves and downloads and verifies the pack.
func (c *SSHClient) Fetch(ctx context.Context, path string, opts FetchOptions) (Result, error) {
	op := &fetchOp{c: c.proto, where: "ssh://" + c.addr + path, opts: opts, start: time.Now()}
	err := c.fetch(ctx, path, op)
	op.res.Total = time.Since(op.start)
	return op.res, err
}

func (c *SSHClient) fetch(ctx context.Context, path string, op *fetchOp) (err error) {
	if op.opts.Protocol != V0 && op.opts.Protocol != V2 {
		return fmt.Errorf("unsupported protocol %v", op.opts.Protocol)
	}
	s, err := c.open(ctx, "git-upload-pack", path, op.opts.Protocol, &op.res.Bytes)
	if err != nil {
		return err
	}
	defer func() { err = s.finish(err) }()
	if op.opts.Protocol == V0 {
		adv, err := readRefAdvertisement(s.pkt)
		if err != nil {
			return err
		}
		op.res.Refs = len(adv.refs)
		wants := op.wants(adv.refs)
		op.res.Wants = len(wants)
		if len(wants) == 0 {
			return s.send([]byte("0000")) // nothing wanted
		}
		body, err := c.proto.v0FetchRequest(adv, wants, op.opts.Haves)
		if err != nil {
			return err
		}
		op.res.Haves = len(op.opts.Haves)
		if err := s.send(op.asked(body)); err != nil {
			return err
		}
		common, err := readV0Acks(s.pkt)
		if err != nil {
			return err
		}
		op.res.Common = common
		return op.readPack(&response{pkt: s.pkt})
	}
	caps, err := s.v2Capabilities()
	if err != nil {
		return err
	}
	if err := s.send(c.proto.lsRefsRequest(caps, nil)); err != nil {
		return err
	}
	refs, err := readLsRefs(s.pkt)
	if err != nil {
		return err
	}
	op.res.Refs = len(refs)
	wants := op.wants(refs)
	op.res.Wants = len(wants)
	if len(wants) == 0 {
		return s.send([]byte("0000")) // end of the session, as git ends it
	}
	op.res.Haves = len(op.opts.Haves)
	haves := op.opts.Haves
	if len(haves) > 0 {
		if err := s.send(op.fetchBody(caps, wants, haves, false)); err != nil {
			return err
		}
		common, ready, err := readAcknowledgments(s.pkt)
		if err != nil {
			return err
		}
		op.res.Common = len(common)
		if ready {
			if err := op.readV2Sections(&response{pkt: s.pkt}); err != nil {
				return err
			}
			return s.send([]byte("0000"))
		}
		haves = common
	}
	if err := s.send(op.fetchBody(caps, wants, haves, true)); err != nil {
		return err
	}
	if err := op.readV2Sections(&response{pkt: s.pkt}); err != nil {
		return err
	}
	return s.send([]byte("0000"))
}

// LsRemote lists the repository's refs as `git ls-remote` does.
func (c *SSHClient) LsRemote(ctx context.Context, path string, proto Protocol) (refs []Ref, err error) {
	if proto != V0 && proto != V2 {
		return nil, fmt.Errorf("unsupported protocol %v", proto)
	}
	var n int64
	s, err := c.open(ctx, "git-upload-pack", path, proto, &n)
	if err != nil {
		return nil, err
	}
	defer func() { err = s.finish(err) }()
	if proto == V0 {
		adv, err := readRefAdvertisement(s.pkt)
		if err != nil {
			return nil, err
		}
		return adv.refs, s.send([]byte("0000"))
	}
	caps, err := s.v2Capabilities()
	if err != nil {
		return nil, err
	}
	if err := s.send(c.proto.lsRefsRequest(caps, nil)); err != nil {
		return nil, err
	}
	if refs, err = readLsRefs(s.pkt); err != nil {
		return nil, err
	}
	return refs, s.send([]byte("0000"))
}

// Push adds one generated commit on top of the current tip of branch, as
// Client.Push does over HTTP.
func (c *SSHClient) Push(ctx context.Context, path, branch string, opts PushOptions) (res PushResult, err error) {
	start := time.Now()
	defer func() { res.Total = time.Since(start) }()
	s, err := c.open(ctx, "git-receive-pack", path, V0, &res.Bytes)
	if err != nil {
		return res, err
	}
	defer func() { err = s.finish(err) }()
	adv, err := readRefAdvertisement(s.pkt)
	if err != nil {
		return res, err
	}
	body, err := c.proto.pushRequest(adv, branch, opts, &res)
	if err != nil {
		return res, err
	}
	if err := s.send(body); err != nil {
		return res, err
	}
	// The pack is complete; EOF tells receive-pack nothing else follows.
	s.stdin.Close()
	return res, readPushReport(s.pkt, "refs/heads/"+branch)
}

// sshSession is one exec session on a connection of its own.
type sshSession struct {
	conn   *ssh.Client
	sess   *ssh.Session
	stdin  io.WriteCloser
	pkt    *pktReader
	stderr *boundedBuffer
	// stop cancels the close-on-cancel hook.
	stop func() bool
}

// validSSHPath accepts the repository paths git puts in an exec request
// ("/KEY/slug.git"): the path is quoted into the command line, so it must
// hold nothing a quote or the server's parser would treat specially.
func validSSHPath(p string) bool {
	if p == "" || len(p) > 512 || strings.Contains(p, "..") || strings.HasPrefix(p, "-") {
		return false
	}
	for _, r := range p {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-~", r)
		if !ok {
			return false
		}
	}
	return true
}

// open dials, authenticates and starts service on path.
func (c *SSHClient) open(ctx context.Context, service, path string, proto Protocol, n *int64) (*sshSession, error) {
	if !validSSHPath(path) {
		return nil, fmt.Errorf("invalid repository path %q", path)
	}
	tcp, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	// Closing the socket is the one way to interrupt both the handshake
	// and a blocked read when ctx ends.
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	fail := func(err error) (*sshSession, error) {
		stop()
		tcp.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	conn, chans, reqs, err := ssh.NewClientConn(tcp, c.addr, c.cfg)
	if err != nil {
		return fail(fmt.Errorf("ssh handshake: %w", err))
	}
	client := ssh.NewClient(conn, chans, reqs)
	sess, err := client.NewSession()
	if err != nil {
		client.Close()
		return fail(fmt.Errorf("ssh session: %w", err))
	}
	if proto == V2 {
		if err := sess.Setenv("GIT_PROTOCOL", "version=2"); err != nil {
			client.Close()
			return fail(fmt.Errorf("ssh env GIT_PROTOCOL: %w", err))
		}
	}
	s := &sshSession{conn: client, sess: sess, stderr: &boundedBuffer{max: 4096}, stop: stop}
	stdin, err1 := sess.StdinPipe()
	stdout, err2 := sess.StdoutPipe()
	if err := errors.Join(err1, err2); err != nil {
		client.Close()
		return fail(err)
	}
	sess.Stderr = s.stderr
	s.stdin = stdin
	s.pkt = newPktReader(&countingReader{r: stdout, n: n})
	if err := sess.Start(service + " '" + path + "'"); err != nil {
		client.Close()
		return fail(fmt.Errorf("ssh exec: %w", err))
	}
	return s, nil
}

func (s *sshSession) send(b []byte) error {
	_, err := s.stdin.Write(b)
	return err
}

// v2Capabilities reads the capability advertisement the server sends
// first.
func (s *sshSession) v2Capabilities() (map[string]string, error) {
	kind, line, err := s.pkt.line()
	if err != nil {
		return nil, fmt.Errorf("read capabilities: %w", err)
	}
	return readV2Capabilities(s.pkt, kind, line)
}

// finish ends the session: it closes stdin, waits for the exit status and
// closes the connection. When the operation failed and the server wrote
// to stderr, the server's words are the better error: a refused exec or a
// throttle refusal ends the stream early, and the read error alone would
// only say "EOF".
func (s *sshSession) finish(opErr error) error {
	defer s.stop()
	defer s.conn.Close()
	defer s.pkt.release()
	s.stdin.Close()
	waited := make(chan error, 1)
	go func() { waited <- s.sess.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-time.After(10 * time.Second):
		werr = errors.New("ssh: no exit status")
	}
	msg := strings.TrimSpace(s.stderr.String())
	switch {
	case opErr != nil && msg != "":
		return &RemoteError{Message: msg}
	case opErr != nil:
		return opErr
	case werr != nil && msg != "":
		return &RemoteError{Message: msg}
	case werr != nil:
		return fmt.Errorf("ssh: %w", werr)
	}
	return nil
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
