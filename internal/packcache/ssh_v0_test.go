package packcache_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// sshV0Caps are the capabilities git 2.39 asks for over SSH: those of
// v0caps but no-done, which only an HTTP advertisement offers.
const sshV0Caps = "multi_ack_detailed side-band-64k thin-pack ofs-delta deepen-since deepen-not filter agent=git/2.39.5"

// stateful is what a stateful git upload-pack (the one an SSH session ran
// before the cache covered it) answers to stdin.
func (w *world) stateful(protocol string, stdin []byte) []byte {
	w.t.Helper()
	var env []string
	if protocol != "" {
		env = []string{"GIT_PROTOCOL=" + protocol}
	}
	var out bytes.Buffer
	cmd := gitcmd.Cmd{Dir: w.path(), Name: "upload-pack", Env: env, Stdin: bytes.NewReader(stdin), Stdout: &out}
	if err := w.n.App.Git.Run(context.Background(), cmd); err != nil {
		w.t.Fatalf("git upload-pack: %v", err)
	}
	return out.Bytes()
}

// packLookups counts the cache's lookups of upload-pack requests.
func (w *world) packLookups() float64 {
	w.t.Helper()
	mfs, err := w.n.App.Registry.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "sluice_packcache_lookups_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "packs" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// allStarted is how many git processes of any kind the node has started
// (sluice_git_processes_started_total over every command).
func (w *world) allStarted() float64 {
	w.t.Helper()
	mfs, err := w.n.App.Registry.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "sluice_git_processes_started_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestSSHv0 checks protocol v0 and v1 sessions over SSH: single-round
// requests and two-round shallow requests (deepen lines, then the haves
// once the client has the shallow list) are answered from the cache with
// git's bytes (and share entries with HTTP), negotiations fall back to git,
// and the real git client gets the right objects either way.
func TestSSHv0(t *testing.T) {
	w := newWorldWith(t, 30, testbed.NodeOptions{SSH: true})
	c := newSSHClient(t, w)
	head, feature, old := w.rev("main"), w.rev("feature"), w.rev("main~6")
	since := strings.TrimSpace(testbed.Git(t, w.wt, "log", "-1", "--format=%ct", "main~4"))
	shallowCaps := sshV0Caps + " shallow"

	requests := []struct {
		name, protocol string
		body           []byte
	}{
		{"clone", "", pkts("want "+head+" "+sshV0Caps, "want "+feature, "0000", "done")},
		{"v1 clone", "version=1", pkts("want "+head+" "+sshV0Caps, "0000", "done")},
		{"partial", "", pkts("want "+head+" "+sshV0Caps, "filter blob:none", "0000", "done")},
		{"fetch with haves", "", pkts("want "+head+" "+sshV0Caps, "0000", "have "+old, "done")},
		{"shallow clone", "", pkts("want "+head+" "+shallowCaps, "deepen 1", "0000", "done")},
		{"v1 shallow clone", "version=1", pkts("want "+head+" "+shallowCaps, "deepen 1", "0000", "done")},
		{"shallow clone of two refs", "", pkts("want "+head+" "+shallowCaps, "want "+feature, "deepen 3", "0000", "done")},
		{"shallow partial clone", "", pkts("want "+head+" "+shallowCaps, "deepen 2", "filter blob:none", "0000", "done")},
		{"deepen-since", "", pkts("want "+head+" "+shallowCaps, "deepen-since "+since, "0000", "done")},
		{"deepen-not", "", pkts("want "+head+" "+shallowCaps, "deepen-not refs/heads/feature", "0000", "done")},
		// A depth 2 clone at main~4 deepening by 3 (relative): unshallow
		// lines, and haves in the second round.
		{"deepen a shallow clone", "", pkts("want "+head+" "+shallowCaps+" deepen-relative", "shallow "+w.rev("main~5"), "deepen 3", "0000", "have "+w.rev("main~4"), "have "+w.rev("main~5"), "done")},
	}
	for _, tt := range requests {
		t.Run(tt.name, func(t *testing.T) {
			w.t = t
			defer func() { w.t = t }()
			var first, second, want, viaHTTP []byte
			var started float64
			w.stable(func() {
				first = c.sessionWith(t, tt.protocol, tt.body)
				before := w.started()
				second = c.sessionWith(t, tt.protocol, tt.body)
				// The same bytes over HTTP are the same request.
				viaHTTP = w.do(http.MethodPost, "git-upload-pack", tt.protocol, tt.body)
				started = w.started() - before
				want = w.stateful(tt.protocol, tt.body)
			})
			if started != 0 {
				t.Fatalf("a cached session and the same request over HTTP started %v git processes", started)
			}
			if !bytes.Equal(first, second) {
				t.Fatal("hit differs from miss")
			}
			// The deepening shapes really get a shallow list.
			// (Not deepen-since: the test commits share a timestamp, so
			// nothing is cut and its shallow list is empty.)
			if strings.Contains(tt.name, "shallow") || tt.name == "deepen-not" {
				if !bytes.Contains(second, []byte("0034shallow ")) {
					t.Fatalf("no shallow list in the answer to a shallow request: %q", second)
				}
			}
			if !bytes.Equal(withoutProgress(t, want), withoutProgress(t, second)) {
				t.Fatalf("cache answers differently from git:\ngit:   %q\ncache: %q", want, second)
			}
			if !bytes.HasSuffix(second, viaHTTP) || len(viaHTTP) == 0 {
				t.Fatalf("the session's response does not end with the HTTP response %q", viaHTTP)
			}
			// The advertisement is the session's own: no no-done.
			if ad := second[:len(second)-len(viaHTTP)]; bytes.Contains(ad, []byte("no-done")) || !bytes.Contains(ad, []byte(head+" HEAD\x00")) {
				t.Fatalf("session advertisement %q", ad)
			}
		})
	}
	w.t = t

	url := w.n.SSHURL("PROJ", "app")
	v0 := func(args ...string) string {
		return c.git(t, "", append([]string{"-c", "protocol.version=0"}, args...)...)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	t.Run("clone with git", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "c")
		var started float64
		w.stable(func() {
			os.RemoveAll(dir)
			os.RemoveAll(clone)
			v0("clone", "-q", url, clone)
			before := w.started()
			v0("clone", "-q", url, dir)
			started = w.started() - before
		})
		if started != 0 {
			t.Fatalf("a cached SSH v0 clone started %v git processes", started)
		}
		if got := strings.TrimSpace(testbed.Git(t, dir, "rev-parse", "HEAD")); got != head {
			t.Fatalf("clone at %s, want %s", got, head)
		}
	})

	push := func(names ...string) {
		t.Helper()
		for _, name := range names {
			os.WriteFile(filepath.Join(w.wt, name), []byte(name), 0o644)
			testbed.Git(t, w.wt, "add", "-A")
			testbed.Git(t, w.wt, "commit", "-q", "-m", "add "+name)
		}
		testbed.Git(t, w.wt, "push", "-q", w.url, "main")
		w.settle()
	}
	fetched := func(t *testing.T, name string) {
		t.Helper()
		if got := strings.TrimSpace(testbed.Git(t, clone, "rev-parse", "origin/main")); got != w.rev("main") {
			t.Fatalf("fetched %s, want %s", got, w.rev("main"))
		}
		testbed.Git(t, clone, "fsck", "--no-progress")
		if got := testbed.Git(t, clone, "cat-file", "-p", "origin/main:"+name); got != name {
			t.Fatalf("fetched %s = %q", name, got)
		}
	}
	// The clone's tip is close to refs the server still advertises, so
	// git sends a couple of haves and "done" at once: one request.
	push("a.txt", "b.txt")
	t.Run("fetch with a few haves is one request", func(t *testing.T) {
		lookups := w.packLookups()
		c.git(t, clone, "-c", "protocol.version=0", "fetch", "-q", "origin")
		if got := w.packLookups() - lookups; got != 1 {
			t.Fatalf("a single-round fetch made %v pack cache lookups, want 1", got)
		}
		fetched(t, "b.txt")
	})
	// 20 local commits the server lacks make git send a first batch of
	// 16 haves and a flush: a negotiation, left to a stateful git.
	for i := range 20 {
		testbed.Git(t, clone, "commit", "-q", "--allow-empty", "-m", "local "+string(rune('a'+i)))
	}
	push("c.txt")
	t.Run("negotiation falls back to git", func(t *testing.T) {
		lookups, before := w.packLookups(), w.started()
		c.git(t, clone, "-c", "protocol.version=0", "fetch", "-q", "origin")
		if got := w.packLookups() - lookups; got != 0 {
			t.Fatalf("a negotiating fetch made %v pack cache lookups", got)
		}
		if got := w.started() - before; got < 1 {
			t.Fatal("the negotiating fetch ran no git")
		}
		fetched(t, "c.txt")
	})
	t.Run("shallow clone with git", func(t *testing.T) {
		first, dir := filepath.Join(t.TempDir(), "first"), filepath.Join(t.TempDir(), "shallow")
		var started, lookups float64
		w.stable(func() {
			os.RemoveAll(first)
			os.RemoveAll(dir)
			v0("clone", "-q", "--depth", "1", url, first)
			before, lk := w.allStarted(), w.packLookups()
			v0("clone", "-q", "--depth", "1", url, dir)
			started, lookups = w.allStarted()-before, w.packLookups()-lk
		})
		if started != 0 {
			t.Fatalf("a cached shallow SSH v0 clone started %v git processes", started)
		}
		// The shallow list's request and the whole request.
		if lookups != 2 {
			t.Fatalf("a shallow clone made %v pack cache lookups, want 2", lookups)
		}
		for _, d := range []string{first, dir} {
			if got := strings.TrimSpace(testbed.Git(t, d, "rev-list", "--count", "HEAD")); got != "1" {
				t.Fatalf("shallow clone has %s commits", got)
			}
			if got := strings.TrimSpace(testbed.Git(t, d, "rev-parse", "HEAD")); got != w.rev("main") {
				t.Fatalf("shallow clone at %s", got)
			}
			testbed.Git(t, d, "fsck", "--no-progress")
		}
		// Deepening sends shallow lines and deepen, then its haves: two
		// rounds, answered from the cache too.
		lk := w.packLookups()
		c.git(t, dir, "-c", "protocol.version=0", "fetch", "-q", "--deepen", "3")
		if got := w.packLookups() - lk; got != 2 {
			t.Fatalf("deepening made %v pack cache lookups, want 2", got)
		}
		if got := strings.TrimSpace(testbed.Git(t, dir, "rev-list", "--count", "HEAD")); got != "4" {
			t.Fatalf("deepened clone has %s commits", got)
		}
		testbed.Git(t, dir, "fsck", "--no-progress")
	})

	// A shallow request whose second round negotiates (a flush among the
	// haves) goes on with a stateful git after the cached shallow list;
	// the client sees git's bytes, the advertisement and list once.
	t.Run("shallow negotiation falls back to git", func(t *testing.T) {
		tip := w.rev("main")
		body := pkts("want "+tip+" "+shallowCaps, "deepen 2", "0000", "have "+w.rev("main~3"), "0000", "have "+w.rev("main~4"), "done")
		var got, want []byte
		var started float64
		w.stable(func() {
			c.sessionWith(t, "", body)
			before := w.started()
			got = c.sessionWith(t, "", body)
			started = w.started() - before
			want = w.stateful("", body)
		})
		if started != 1 {
			t.Fatalf("a shallow negotiation started %v upload-packs, want 1", started)
		}
		if !bytes.Equal(withoutProgress(t, want), withoutProgress(t, got)) {
			t.Fatalf("fallback answers differently from git:\ngit:     %q\nsession: %q", want, got)
		}
	})
}

// goClient connects with the in-process SSH client: an OpenSSH process per
// client would dominate a storm.
func (c *sshClient) goClient(t *testing.T) *ssh.Client {
	t.Helper()
	cl, err := ssh.Dial("tcp", c.w.n.App.SSHAddr(), &ssh.ClientConfig{
		User:            "git",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(c.signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         10 * time.Second,
	})
	if err != nil {
		t.Fatalf("ssh dial: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestSSHv0CloneStorm sends 50 identical protocol v0 clones over SSH at
// once to a cold cache: one git writes the advertisement and one the pack
// (and, for shallow clones, one the shallow list).
func TestSSHv0CloneStorm(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		testSSHv0Storm(t, func(tip string) []byte { return pkts("want "+tip+" "+sshV0Caps, "0000", "done") }, 2)
	})
	t.Run("shallow", func(t *testing.T) {
		testSSHv0Storm(t, func(tip string) []byte { return pkts("want "+tip+" "+sshV0Caps+" shallow", "deepen 1", "0000", "done") }, 3)
	})
}

func testSSHv0Storm(t *testing.T, request func(tip string) []byte, gits float64) {
	w := newWorldWith(t, 30, testbed.NodeOptions{SSH: true})
	c := newSSHClient(t, w)
	body := request(w.rev("main"))
	// Ten sessions per connection, the server's default bound.
	const clients = 50
	conns := make([]*ssh.Client, clients)
	for i := range conns {
		if i%10 == 0 {
			conns[i] = c.goClient(t)
		} else {
			conns[i] = conns[i-1]
		}
	}
	out := make([][]byte, clients)
	errs := make([]error, clients)
	var started float64
	w.stable(func() {
		before := w.started()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range clients {
			wg.Go(func() {
				s, err := conns[i].NewSession()
				if err != nil {
					errs[i] = err
					return
				}
				defer s.Close()
				s.Stdin = bytes.NewReader(body)
				<-start
				out[i], errs[i] = s.Output("git-upload-pack 'proj/app.git'")
			})
		}
		close(start)
		wg.Wait()
		started = w.started() - before
	})
	for i := range out {
		if errs[i] != nil {
			t.Fatalf("client %d: %v", i, errs[i])
		}
		if !bytes.Equal(out[i], out[0]) || !bytes.Contains(out[i], []byte("PACK")) {
			t.Fatalf("client %d got a different or empty response", i)
		}
	}
	if started != gits {
		t.Fatalf("%d identical SSH clones started %v git processes, want %v", clients, started, gits)
	}
}

// TestSSHv0SlowReaderFreesGit reads a large SSH clone at 1 MB/s: git has
// exited long before the reader is done.
func TestSSHv0SlowReaderFreesGit(t *testing.T) {
	w := newWorldWith(t, 3, testbed.NodeOptions{SSH: true})
	c := newSSHClient(t, w)
	big := make([]byte, 4<<20)
	rand.Read(big) // incompressible: the pack is as large as the blob
	os.WriteFile(filepath.Join(w.wt, "big.bin"), big, 0o644)
	testbed.Git(t, w.wt, "add", "big.bin")
	testbed.Git(t, w.wt, "commit", "-q", "-m", "big")
	testbed.Git(t, w.wt, "push", "-q", w.url, "main")
	w.settle()

	s, err := c.goClient(t).NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Stdin = bytes.NewReader(pkts("want "+w.rev("main")+" "+sshV0Caps, "0000", "done"))
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	before := w.started()
	if err := s.Start("git-upload-pack 'proj/app.git'"); err != nil {
		t.Fatal(err)
	}
	var read int
	buf := make([]byte, 10<<10)
	freedAt := -1
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := io.ReadFull(stdout, buf)
		read += n
		if err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // 10 KiB per 10 ms: 1 MB/s
		// Two gits: the advertisement's and the pack's.
		if w.started()-before >= 2 && running(t, w) == 0 {
			freedAt = read
			break
		}
	}
	if freedAt < 0 {
		t.Fatalf("git still running after the client read %d bytes", read)
	}
	if freedAt > len(big)/2 {
		t.Fatalf("git exited only after the client read %d of %d bytes", freedAt, len(big))
	}
	t.Logf("git exited after the client read %d KiB of ~%d KiB", freedAt>>10, len(big)>>10)
	// The rest still arrives, complete.
	rest, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatalf("session: %v", err)
	}
	if read+len(rest) < len(big) {
		t.Fatalf("session sent %d bytes for a %d-byte blob", read+len(rest), len(big))
	}
}
