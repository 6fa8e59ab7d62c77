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
	t     *testing.T
	n     *testbed.Node
	repo  *store.Repository
	wt    string // the work tree the history was pushed from
	url   string // clone URL with the admin's credentials
	token string
}

func newWorld(t *testing.T, commits int, configure func(*config.Config)) *world {
	t.Helper()
	return newWorldWith(t, commits, testbed.NodeOptions{Configure: configure})
}

func newWorldWith(t *testing.T, commits int, opts testbed.NodeOptions) *world {
	t.Helper()
	n := testbed.NewNode(t, opts)
	w := &world{t: t, n: n}
	w.repo = n.CreateRepo(t, "PROJ", "app")
	// A token, not the password: argon2id on every one of hundreds of
	// requests would dominate the tests' time.
	admin, err := n.Store().UserByName(context.Background(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	w.token = n.Token(t, admin.ID, store.ScopeAdmin)
	w.url = n.CloneURL("PROJ", "app", "admin", w.token)
	// One thread makes pack-objects deterministic, so a response from the
	// cache and one from git can be compared byte for byte.
	testbed.Git(t, w.path(), "config", "pack.threads", "1")
	w.wt = testbed.WorkTree(t, commits)
	testbed.Git(t, w.wt, "branch", "feature", "HEAD~2")
	testbed.Git(t, w.wt, "tag", "-a", "-m", "release", "v1", "HEAD~1")
	testbed.Git(t, w.wt, "push", "-q", w.url, "main", "feature", "v1")
	w.settle()
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
	req.SetBasicAuth("admin", w.token)
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

// withoutProgress demultiplexes a response: pkt-lines outside the side-band
// are kept as they are, band 1 (the pack) is joined into one stream and
// band 2 (progress) dropped. Progress text and where git cuts the pack into
// packets depend on timing; everything else must match byte for byte.
func withoutProgress(t *testing.T, b []byte) []byte {
	t.Helper()
	var out, pack []byte
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
		switch b[4] {
		case 1:
			pack = append(pack, b[5:n]...)
		case 2:
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return append(append(out, "\n--- pack ---\n"...), pack...)
}

// settle waits until no ref transaction is pending. Pushes also queue a
// housekeeping job (app delays it by 30 s); its pack-refs moves the refs
// generation whenever it runs, so assertions that a request starts no git
// use stable, which retries when the generation moved under them.
func (w *world) settle() {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.state().Pending > 0 {
		if time.Now().After(deadline) {
			w.t.Fatalf("ref transaction still pending: %+v", w.state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *world) state() store.RepoState {
	w.t.Helper()
	st, err := w.n.Store().RepoState(context.Background(), w.repo.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// stable runs fn until it ran while the repository's refs generation stayed
// put (a delayed housekeeping job may move it at any time), at most three
// times.
func (w *world) stable(fn func()) {
	w.t.Helper()
	for range 3 {
		w.settle()
		gen := w.state().Generation
		fn()
		if st := w.state(); st.Generation == gen && st.Pending == 0 {
			return
		}
	}
	w.t.Fatal("the refs generation kept moving")
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
			var first, second, want []byte
			var started float64
			w.stable(func() {
				first = get()
				before := w.started()
				second = get()
				started = w.started() - before
				want = w.direct(tt.protocol, tt.body, tt.advertise)
			})
			if started != 0 {
				t.Fatalf("the second identical request started %v git processes", started)
			}
			if !bytes.Equal(first, second) {
				t.Fatalf("hit differs from miss:\n%q\n%q", first, second)
			}
			if !bytes.Contains(first, []byte(tt.mustHave)) {
				t.Fatalf("response lacks %q: %q", tt.mustHave, first)
			}
			if !bytes.Equal(withoutProgress(t, want), withoutProgress(t, second)) {
				t.Fatalf("cache answers differently from git:\ngit:   %q\ncache: %q", want, second)
			}
		})
	}
	w.t = t
	// A second request can arrive while the first one's producer is still
	// sealing the entry (its client already has every byte): it then
	// follows that producer ("coalesced") instead of hitting the sealed
	// file. Either way it started no git, which each case checked.
	st := w.n.App.Cache.Stats()
	if st.Hits+st.Coalesced < int64(len(tests)) {
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
			w.stable(func() {
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
			if got, want := testbed.Git(t, dir, "for-each-ref"), testbed.Git(t, w.path(), "for-each-ref"); got != want {
				t.Fatalf("%s, v%s: cloned refs\n%s\nwant\n%s", step, version, got, want)
			}
		}
	}
	commit := func(msg string) {
		os.WriteFile(filepath.Join(w.wt, "change.txt"), []byte(msg), 0o644)
		testbed.Git(t, w.wt, "add", "-A")
		testbed.Git(t, w.wt, "commit", "-q", "-m", msg)
	}
	// Each change is checked at once, racing the housekeeping it
	// queues, and again when that has settled and the cache is warm.
	step := func(name string, args ...string) {
		t.Helper()
		testbed.Git(t, w.wt, append([]string{"push", "-q"}, args...)...)
		check(name)
		w.settle()
		check(name + ", settled")
	}
	check("initial")

	commit("pushed")
	step("push", w.url, "main")
	step("branch delete", w.url, ":feature")
	testbed.Git(t, w.wt, "tag", "v2")
	step("tag push", w.url, "v2")
	testbed.Git(t, w.wt, "reset", "-q", "--hard", "HEAD~2")
	commit("rewritten")
	step("force push", "-f", w.url, "main")
	if hits := w.n.App.Cache.Stats().Hits; hits == 0 {
		t.Fatal("no request was served from the cache")
	}

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
	w := newWorld(t, 3, nil)
	big := make([]byte, 8<<20)
	rand.Read(big) // incompressible: the pack is as large as the blob
	os.WriteFile(filepath.Join(w.wt, "big.bin"), big, 0o644)
	testbed.Git(t, w.wt, "add", "big.bin")
	testbed.Git(t, w.wt, "commit", "-q", "-m", "big")
	testbed.Git(t, w.wt, "push", "-q", w.url, "main")
	w.settle()

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

// TestAdminAPI reads the stats and clears a repository's entries through
// the REST admin endpoints, which only administrators may use.
func TestAdminAPI(t *testing.T) {
	w := newWorld(t, 3, nil)
	w.do(http.MethodPost, "git-upload-pack", "", pkts("want "+w.rev("main")+" "+v0caps, "0000", "done"))
	call := func(method, path, user, secret string) (int, string) {
		req, _ := http.NewRequest(method, w.n.URL+"/rest/sluice/1.0/admin/cache"+path, nil)
		req.SetBasicAuth(user, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	w.n.CreateUser(t, "dev", "dev-password")
	if code, _ := call(http.MethodGet, "", "dev", "dev-password"); code != http.StatusForbidden {
		t.Fatalf("non-admin got %d", code)
	}
	if code, _ := call(http.MethodDelete, "/repos/PROJ/app", "dev", "dev-password"); code != http.StatusForbidden {
		t.Fatalf("non-admin delete got %d", code)
	}
	code, body := call(http.MethodGet, "", "admin", w.token)
	if code != http.StatusOK || !strings.Contains(body, `"entries":1`) {
		t.Fatalf("stats: %d %s", code, body)
	}
	code, body = call(http.MethodDelete, "/repos/PROJ/app", "admin", w.token)
	if code != http.StatusOK || !strings.Contains(body, `"removedEntries":1`) {
		t.Fatalf("clear: %d %s", code, body)
	}
	if code, _ := call(http.MethodDelete, "/repos/PROJ/missing", "admin", w.token); code != http.StatusNotFound {
		t.Fatalf("clear of a missing repository got %d", code)
	}
	if n := w.n.App.Cache.Stats().Entries; n != 0 {
		t.Fatalf("%d entries left", n)
	}
}

// TestHitHasContentLength: a hit over HTTP is one unchunked response of
// known length (the only kind net/http can send with sendfile), while a
// miss streams chunked as git produces it.
func TestHitHasContentLength(t *testing.T) {
	w := newWorld(t, 6, nil)
	head := w.rev("main")
	body := pkts("command=fetch", "agent=git/2.39.5", "object-format=sha1", "0001", "ofs-delta", "want "+head, "done", "0000")
	w.stable(func() {
		miss := w.send(http.MethodPost, "git-upload-pack", "version=2", body)
		missBody, _ := io.ReadAll(miss.Body)
		miss.Body.Close()
		if miss.ContentLength != -1 {
			t.Fatalf("miss: Content-Length %d, want a streamed (chunked) response", miss.ContentLength)
		}
		// The miss's client has every byte before its producer has sealed
		// the entry; a request in between follows the producer, streamed.
		// Only a hit on the sealed entry knows its length.
		deadline := time.Now().Add(10 * time.Second)
		for {
			hit := w.send(http.MethodPost, "git-upload-pack", "version=2", body)
			hitBody, _ := io.ReadAll(hit.Body)
			hit.Body.Close()
			if !bytes.Equal(hitBody, missBody) {
				t.Fatalf("hit differs from the miss: %d bytes, %d", len(hitBody), len(missBody))
			}
			if hit.ContentLength == int64(len(hitBody)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("hit: Content-Length %d for %d bytes", hit.ContentLength, len(hitBody))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestFlushPlacementNotShared: a stateless git answers v0 haves round by
// round and stops at the first flush without "done", so a request with a
// flush among its haves gets no pack where the same request without it
// does. They must not share an entry, or the first could poison the second.
func TestFlushPlacementNotShared(t *testing.T) {
	w := newWorld(t, 8, nil)
	head, old := w.rev("main"), w.rev("main~3")
	flushed := pkts("want "+head+" "+v0caps, "0000", "have "+old, "0000", "done")
	plain := pkts("want "+head+" "+v0caps, "0000", "have "+old, "done")
	w.stable(func() {
		w.do(http.MethodPost, "git-upload-pack", "", flushed)
		w.do(http.MethodPost, "git-upload-pack", "", flushed) // now cached
		got := w.do(http.MethodPost, "git-upload-pack", "", plain)
		want := w.direct("", plain, false)
		if !bytes.Contains(got, []byte("PACK")) || !bytes.Equal(withoutProgress(t, want), withoutProgress(t, got)) {
			t.Fatalf("the request without a flush got another request's answer:\ngit:   %q\ncache: %q", want, got)
		}
	})
}
