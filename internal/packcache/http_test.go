package packcache_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// world is one node with one repository pushed from a generated work tree.
type world struct {
	t    *testing.T
	n    *testbed.Node
	repo *store.Repository
	wt   string // the work tree the history was pushed from
	url  string // clone URL with the admin's credentials
}

func newWorld(t *testing.T, commits int, configure func(*config.Config)) *world {
	t.Helper()
	n := testbed.NewNode(t, testbed.NodeOptions{Configure: configure})
	w := &world{t: t, n: n}
	w.repo = n.CreateRepo(t, "PROJ", "app")
	w.url = n.CloneURL("PROJ", "app", "admin", n.AdminPassword)
	// One thread makes pack-objects deterministic, so a response from the
	// cache and one from git can be compared byte for byte.
	testbed.Git(t, w.path(), "config", "pack.threads", "1")
	w.wt = testbed.WorkTree(t, commits)
	testbed.Git(t, w.wt, "branch", "feature", "HEAD~2")
	testbed.Git(t, w.wt, "tag", "-a", "-m", "release", "v1", "HEAD~1")
	testbed.Git(t, w.wt, "push", "-q", w.url, "main", "feature", "v1")
	return w
}

func (w *world) path() string { return w.n.App.Repos.Path(w.repo.ID) }

func (w *world) rev(r string) string {
	return strings.TrimSpace(testbed.Git(w.t, w.wt, "rev-parse", r))
}

// started is how many upload-pack processes the node has run.
func (w *world) started() float64 { return w.n.App.Git.Started("upload-pack") }

func (w *world) endpoint(suffix string) string {
	return w.n.URL + "/scm/proj/app.git/" + suffix
}

// do sends one smart HTTP request and returns the whole response body.
func (w *world) do(method, suffix, protocol string, body []byte) []byte {
	w.t.Helper()
	resp := w.send(method, suffix, protocol, body)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, suffix, err)
	}
	if resp.StatusCode != http.StatusOK {
		w.t.Fatalf("%s %s: %s: %s", method, suffix, resp.Status, out)
	}
	return out
}

func (w *world) send(method, suffix, protocol string, body []byte) *http.Response {
	w.t.Helper()
	req, err := http.NewRequest(method, w.endpoint(suffix), bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.SetBasicAuth("admin", w.n.AdminPassword)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	}
	if protocol != "" {
		req.Header.Set("Git-Protocol", protocol)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, suffix, err)
	}
	return resp
}

// direct is what git answers to body now, without the cache: the command
// hosting runs, through the node's own git runner.
func (w *world) direct(protocol string, body []byte, advertise bool) []byte {
	w.t.Helper()
	flags := []string{"--stateless-rpc"}
	if advertise {
		flags = append(flags, "--advertise-refs")
	}
	var env []string
	if protocol != "" {
		env = []string{"GIT_PROTOCOL=" + protocol}
	}
	var out bytes.Buffer
	cmd := gitcmd.Cmd{Dir: w.path(), Name: "upload-pack", Flags: flags, Env: env, Stdin: bytes.NewReader(body), Stdout: &out}
	if err := w.n.App.Git.Run(context.Background(), cmd); err != nil {
		w.t.Fatalf("git upload-pack: %v", err)
	}
	if advertise && protocol != "version=2" {
		return append([]byte(pkt("# service=git-upload-pack\n")+"0000"), out.Bytes()...)
	}
	return out.Bytes()
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func pkts(lines ...string) []byte {
	var b strings.Builder
	for _, l := range lines {
		switch l {
		case "0000", "0001":
			b.WriteString(l)
		default:
			b.WriteString(pkt(l + "\n"))
		}
	}
	return []byte(b.String())
}

// withoutProgress drops side-band 2 (progress) packets, whose text depends
// on timing; every other byte must match.
func withoutProgress(t *testing.T, b []byte) []byte {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("truncated pkt-line: %q", b)
		}
		var n int
		if _, err := fmt.Sscanf(string(b[:4]), "%04x", &n); err != nil {
			t.Fatalf("bad pkt-line length %q", b[:4])
		}
		if n < 4 {
			out, b = append(out, b[:4]...), b[4:]
			continue
		}
		if n > len(b) {
			t.Fatalf("pkt-line of %d bytes, %d left", n, len(b))
		}
		if b[4] != 2 {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

const v0caps = "multi_ack_detailed no-done side-band-64k thin-pack ofs-delta deepen-since deepen-not filter agent=git/2.39.5"

// TestMatrix checks, for every request shape, that the cache answers what
// git answers (byte for byte, progress aside) and that the second request
// starts no git process.
func TestMatrix(t *testing.T) {
	w := newWorld(t, 12, nil)
	head, feature, old, tag := w.rev("main"), w.rev("feature"), w.rev("main~6"), w.rev("v1")
	v2 := func(cmd string, args ...string) []byte {
		return pkts(append([]string{"command=" + cmd, "agent=git/2.39.5", "object-format=sha1", "0001"}, append(args, "0000")...)...)
	}
	tests := []struct {
		name      string
		protocol  string
		body      []byte // nil: GET info/refs
		kindRefs  bool
		mustHave  string // a substring the response must hold
		advertise bool
	}{
		{name: "v0 advertisement", advertise: true, kindRefs: true, mustHave: head},
		{name: "v2 capabilities", protocol: "version=2", advertise: true, kindRefs: true, mustHave: "ls-refs"},
		{name: "v0 clone", body: pkts("want "+head+" "+v0caps, "want "+feature, "0000", "done"), mustHave: "PACK"},
		{name: "v0 clone include-tag no-progress", body: pkts("want "+head+" "+v0caps+" include-tag no-progress", "want "+tag, "0000", "done"), mustHave: "PACK"},
		{name: "v0 shallow", body: pkts("want "+head+" "+v0caps, "deepen 1", "0000", "done"), mustHave: "shallow " + head},
		{name: "v0 partial", body: pkts("want "+head+" "+v0caps, "filter blob:none", "0000", "done"), mustHave: "PACK"},
		{name: "v0 fetch with haves", body: pkts("want "+head+" "+v0caps, "0000", "have "+old, "done"), mustHave: "ACK " + old},
		{name: "v1 clone", protocol: "version=1", body: pkts("want "+head+" "+v0caps, "0000", "done"), mustHave: "PACK"},
		{name: "v2 ls-refs", protocol: "version=2", body: v2("ls-refs", "peel", "symrefs", "unborn", "ref-prefix HEAD", "ref-prefix refs/heads/", "ref-prefix refs/tags/"), kindRefs: true, mustHave: "refs/tags/v1"},
		{name: "v2 clone", protocol: "version=2", body: v2("fetch", "thin-pack", "ofs-delta", "want "+head, "want "+feature, "done"), mustHave: "PACK"},
		{name: "v2 shallow", protocol: "version=2", body: v2("fetch", "ofs-delta", "want "+head, "deepen 1", "done"), mustHave: "shallow-info"},
		{name: "v2 partial", protocol: "version=2", body: v2("fetch", "ofs-delta", "no-progress", "want "+head, "filter blob:none", "done"), mustHave: "PACK"},
		{name: "v2 fetch with haves", protocol: "version=2", body: v2("fetch", "ofs-delta", "want "+head, "have "+old, "done"), mustHave: "PACK"},
		{name: "v2 negotiation round", protocol: "version=2", body: v2("fetch", "want "+head, "have "+old), mustHave: "ACK " + old},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.t = t
			get := func() []byte {
				if tt.advertise {
					return w.do(http.MethodGet, "info/refs?service=git-upload-pack", tt.protocol, nil)
				}
				return w.do(http.MethodPost, "git-upload-pack", tt.protocol, tt.body)
			}
			first := get()
			afterMiss := w.started()
			second := get()
			if w.started() != afterMiss {
				t.Fatalf("the second identical request started %v git processes", w.started()-afterMiss)
			}
			if !bytes.Equal(first, second) {
				t.Fatalf("hit differs from miss:\n%q\n%q", first, second)
			}
			if !bytes.Contains(first, []byte(tt.mustHave)) {
				t.Fatalf("response lacks %q: %q", tt.mustHave, first)
			}
			want := w.direct(tt.protocol, tt.body, tt.advertise)
			if !bytes.Equal(withoutProgress(t, want), withoutProgress(t, second)) {
				t.Fatalf("cache answers differently from git:\ngit:   %q\ncache: %q", want, second)
			}
		})
	}
	w.t = t
	st := w.n.App.Cache.Stats()
	if st.Hits < int64(len(tests)) || st.Entries < len(tests) {
		t.Fatalf("stats %+v", st)
	}
}

// TestCloneStartsNoGit clones with the real git client, twice per protocol:
// the second clone is served without a single git process.
func TestCloneStartsNoGit(t *testing.T) {
	w := newWorld(t, 8, nil)
	for _, version := range []string{"0", "2"} {
		t.Run("v"+version, func(t *testing.T) {
			clone := func() string {
				dir := filepath.Join(t.TempDir(), "c")
				testbed.Git(t, "", "-c", "protocol.version="+version, "clone", "-q", w.url, dir)
				return strings.TrimSpace(testbed.Git(t, dir, "rev-parse", "HEAD"))
			}
			if got := clone(); got != w.rev("main") {
				t.Fatalf("clone at %s", got)
			}
			before := w.started()
			if got := clone(); got != w.rev("main") {
				t.Fatalf("cached clone at %s", got)
			}
			if w.started() != before {
				t.Fatalf("a cached clone started %v git processes", w.started()-before)
			}
		})
	}
}

// TestNeverStale changes refs in every way a push can and checks that the
// next clone and ls-remote, over both protocols, see the change.
func TestNeverStale(t *testing.T) {
	w := newWorld(t, 6, nil)
	truth := func() string { return testbed.Git(t, "", "ls-remote", w.path()) }
	check := func(step string) {
		t.Helper()
		for _, version := range []string{"0", "2"} {
			got := testbed.Git(t, "", "-c", "protocol.version="+version, "ls-remote", w.url)
			if want := truth(); got != want {
				t.Fatalf("%s, v%s: ls-remote\n%s\nwant\n%s", step, version, got, want)
			}
			dir := filepath.Join(t.TempDir(), "c")
			testbed.Git(t, "", "-c", "protocol.version="+version, "clone", "-q", "--mirror", w.url, dir)
			if got, want := testbed.Git(t, dir, "for-each-ref"), testbed.Git(t, w.path(), "for-each-ref", "--exclude=refs/pull-requests"); got != want {
				t.Fatalf("%s, v%s: cloned refs\n%s\nwant\n%s", step, version, got, want)
			}
		}
	}
	commit := func(msg string) {
		os.WriteFile(filepath.Join(w.wt, "change.txt"), []byte(msg), 0o644)
		testbed.Git(t, w.wt, "add", "-A")
		testbed.Git(t, w.wt, "commit", "-q", "-m", msg)
	}
	check("initial") // warms every entry
	check("warm")

	commit("pushed")
	testbed.Git(t, w.wt, "push", "-q", w.url, "main")
	check("push")

	testbed.Git(t, w.wt, "push", "-q", w.url, ":feature")
	check("branch delete")

	testbed.Git(t, w.wt, "tag", "v2")
	testbed.Git(t, w.wt, "push", "-q", w.url, "v2")
	check("tag push")

	testbed.Git(t, w.wt, "reset", "-q", "--hard", "HEAD~2")
	commit("rewritten")
	testbed.Git(t, w.wt, "push", "-q", "-f", w.url, "main")
	check("force push")

	if ev := w.n.App.Cache.Stats().Evictions["refs_changed"]; ev == 0 {
		t.Fatal("ref changes freed no entries")
	}
}

// TestCloneStorm sends 50 identical clone requests at once: one git.
func TestCloneStorm(t *testing.T) {
	w := newWorld(t, 30, nil)
	body := pkts("want "+w.rev("main")+" "+v0caps, "0000", "done")
	before := w.started()
	const clients = 50
	var wg sync.WaitGroup
	out := make([][]byte, clients)
	start := make(chan struct{})
	for i := range clients {
		wg.Go(func() {
			<-start
			out[i] = w.do(http.MethodPost, "git-upload-pack", "", body)
		})
	}
	close(start)
	wg.Wait()
	if got := w.started() - before; got != 1 {
		t.Fatalf("%d identical clones started %v git processes, want 1", clients, got)
	}
	for i := range out {
		if !bytes.Equal(out[i], out[0]) || !bytes.Contains(out[i], []byte("PACK")) {
			t.Fatalf("client %d got a different or empty response", i)
		}
	}
}

// TestSlowReaderFreesGit reads a large clone at 1 MB/s and checks that git
// has exited long before the reader is done.
func TestSlowReaderFreesGit(t *testing.T) {
	w := newWorld(t, 1, nil)
	big := make([]byte, 8<<20)
	rand.Read(big) // incompressible: the pack is as large as the blob
	os.WriteFile(filepath.Join(w.wt, "big.bin"), big, 0o644)
	testbed.Git(t, w.wt, "add", "big.bin")
	testbed.Git(t, w.wt, "commit", "-q", "-m", "big")
	testbed.Git(t, w.wt, "push", "-q", w.url, "main")

	body := pkts("want "+w.rev("main")+" "+v0caps, "0000", "done")
	before := w.started()
	resp := w.send(http.MethodPost, "git-upload-pack", "", body)
	defer resp.Body.Close()
	var read int
	buf := make([]byte, 10<<10)
	freedAt := -1
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := io.ReadFull(resp.Body, buf)
		read += n
		if err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // 10 KiB per 10 ms: 1 MB/s
		if w.started() > before && running(t, w) == 0 {
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
}

func running(t *testing.T, w *world) float64 {
	t.Helper()
	mfs, err := w.n.App.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_git_processes_running" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no sluice_git_processes_running gauge")
	return 0
}

// TestCacheOff checks the switch the benchmarks use: with packs off every
// clone runs git.
func TestCacheOff(t *testing.T) {
	w := newWorld(t, 3, func(c *config.Config) { c.Cache.Packs = false })
	body := pkts("want "+w.rev("main")+" "+v0caps, "0000", "done")
	before := w.started()
	a := w.do(http.MethodPost, "git-upload-pack", "", body)
	b := w.do(http.MethodPost, "git-upload-pack", "", body)
	if w.started()-before != 2 {
		t.Fatalf("started %v git processes, want 2", w.started()-before)
	}
	if !bytes.Equal(withoutProgress(t, a), withoutProgress(t, b)) {
		t.Fatal("git answered differently twice")
	}
}
