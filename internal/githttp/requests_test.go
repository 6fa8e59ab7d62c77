package githttp_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/throttle"
)

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// lsRefsV2 is a protocol v2 ls-refs request.
var lsRefsV2 = pkt("command=ls-refs\n") + "0001" + pkt("peel\n") + pkt("ref-prefix refs/heads/\n") + "0000"

func TestRequestBodies(t *testing.T) {
	const limit = 64 << 10
	f := newFixture(t, serverOptions{maxRequestBody: limit})
	f.seed(1)
	auth := basic("alice", f.aliceTok)
	upload := http.Header{"Authorization": {auth}, "Content-Type": {"application/x-git-upload-pack-request"}}
	v2 := http.Header{"Git-Protocol": {"version=2"}}
	with := func(h http.Header, kv ...string) http.Header {
		out := h.Clone()
		for k, v := range v2 {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	// 4 MiB of valid v2 arguments that gzip to a few KiB.
	bomb := gzipped(t, pkt("command=ls-refs\n")+"0001"+strings.Repeat(pkt("peel\n"), (4<<20)/9))
	if len(bomb) > limit {
		t.Fatalf("bomb is %d bytes compressed, want under the limit", len(bomb))
	}

	cases := []struct {
		name   string
		path   string
		hdr    http.Header
		body   string
		status int
		want   string // substring of the body
	}{
		{"v2 ls-refs", "git-upload-pack", with(upload), lsRefsV2, 200, "refs/heads/main"},
		{"gzip v2 ls-refs", "git-upload-pack", with(upload, "Content-Encoding", "gzip"), gzipped(t, lsRefsV2), 200, "refs/heads/main"},
		{"bad length header", "git-upload-pack", with(upload), "zzzz0000", 200, "ERR malformed pkt-line length"},
		{"length 3", "git-upload-pack", with(upload), "0003", 200, "ERR malformed pkt-line length"},
		{"cut inside a pkt-line", "git-upload-pack", with(upload), pkt("command=ls-refs\n")[:10], 200, "ERR request ends inside a pkt-line"},
		{"v0 garbage", "git-upload-pack", upload, "\x00\x01\x02\x03garbage", 200, "ERR malformed pkt-line length"},
		{"over the limit", "git-upload-pack", with(upload), strings.Repeat(pkt("peel\n"), limit/9+1), 200, "ERR request body is larger than 64KiB"},
		{"gzip bomb", "git-upload-pack", with(upload, "Content-Encoding", "gzip"), bomb, 200, "ERR request body is larger than 64KiB"},
		{"not gzip", "git-upload-pack", with(upload, "Content-Encoding", "gzip"), "plain text", 200, "ERR request body is not valid gzip"},
		{"unknown encoding", "git-upload-pack", with(upload, "Content-Encoding", "br"), lsRefsV2, 200, "ERR unsupported content encoding"},
		{"wrong content type", "git-upload-pack", with(upload, "Content-Type", "text/plain"), lsRefsV2, 415, "content type must be application/x-git-upload-pack-request"},
		{"receive-pack type on upload-pack", "git-upload-pack", with(upload, "Content-Type", "application/x-git-receive-pack-request"), lsRefsV2, 415, "content type"},
		{"receive-pack garbage", "git-receive-pack", with(upload, "Content-Type", "application/x-git-receive-pack-request"), "PACKxxxx", 200, "ERR malformed pkt-line length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, hdr, body := f.do("POST", "/scm/PROJ/app.git/"+c.path, c.hdr, strings.NewReader(c.body))
			if code != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("status %d, body %q; want %d with %q", code, body, c.status, c.want)
			}
			if code == 200 && hdr.Get("Content-Type") != "application/x-"+c.path+"-result" {
				t.Fatalf("content type %q", hdr.Get("Content-Type"))
			}
			if hdr.Get("Cache-Control") == "" {
				t.Fatalf("no Cache-Control")
			}
		})
	}
	// Still serving.
	f.mustGit("", "ls-remote", f.writerURL())
}

func TestRoutes(t *testing.T) {
	f := newFixture(t, serverOptions{})
	f.seed(1)
	auth := http.Header{"Authorization": {basic("alice", f.aliceTok)}}
	cases := []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/scm/PROJ/app.git/info/refs?service=git-upload-pack", 200, "# service=git-upload-pack"},
		{"GET", "/scm/proj/app/info/refs?service=git-receive-pack", 200, "# service=git-receive-pack"},
		{"GET", "/scm/PROJ/app.git/info/refs", 404, "dumb HTTP is not supported"},
		{"GET", "/scm/PROJ/app.git/HEAD", 404, "dumb HTTP is not supported"},
		{"GET", "/scm/PROJ/app.git/objects/info/packs", 404, "dumb HTTP is not supported"},
		{"GET", "/scm/PROJ/app.git/info/refs?service=git-upload-archive", 400, "unsupported service"},
		{"POST", "/scm/PROJ/app.git/info/refs?service=git-upload-pack", 405, "method not allowed"},
		{"GET", "/scm/PROJ/app.git/git-upload-pack", 405, "method not allowed"},
		{"GET", "/scm/PROJ/app.git/config", 404, "not found"},
		{"GET", "/scm/PROJ/info/refs?service=git-upload-pack", 404, "not found"},
		{"GET", "/scm/PROJ/app.git/info/refs/x?service=git-upload-pack", 404, "not found"},
		{"GET", "/other/PROJ/app.git/info/refs?service=git-upload-pack", 404, "not found"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			code, hdr, body := f.do(c.method, c.path, auth, nil)
			if code != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("status %d, body %q; want %d with %q", code, body, c.status, c.want)
			}
			if code == 200 {
				svc := c.path[strings.Index(c.path, "service=")+len("service="):]
				if hdr.Get("Content-Type") != "application/x-"+svc+"-advertisement" || !strings.Contains(hdr.Get("Cache-Control"), "no-cache") {
					t.Fatalf("headers %v", hdr)
				}
			}
		})
	}
}

// TestPathsNeverReachTheStore sends path tricks and proves they are refused
// before any repository lookup, let alone the disk.
func TestPathsNeverReachTheStore(t *testing.T) {
	f := newFixture(t, serverOptions{})
	auth := http.Header{"Authorization": {basic("alice", f.aliceTok)}}
	paths := []string{
		"/scm/../../etc/info/refs",
		"/scm/PROJ/../../etc/passwd/info/refs",
		"/scm/PROJ/..%2F..%2Fetc/info/refs",
		"/scm/PROJ/..%2f..%2fetc.git/info/refs",
		"/scm/..%2F../app.git/info/refs",
		"/scm/PROJ/-x/info/refs",
		"/scm/PROJ/-x.git/info/refs",
		"/scm/-X/app.git/info/refs",
		"/scm/PROJ/app%00.git/info/refs",
		"/scm/PROJ/app.git%00/info/refs",
		"/scm/PROJ/.git/info/refs",
		"/scm/PROJ/..git/info/refs",
		"/scm/PROJ/%2e%2e/info/refs",
		"/scm/PROJ//info/refs",
		"/scm/PROJ/a%5Cb/info/refs",
		"/scm/1PROJ/app.git/info/refs",
	}
	before := f.st.lookups.Load()
	for _, p := range paths {
		for _, method := range []string{"GET", "POST"} {
			path := p + "?service=git-upload-pack"
			if method == "POST" {
				path = strings.TrimSuffix(p, "info/refs") + "git-upload-pack"
			}
			code, _, body := f.do(method, path, auth, strings.NewReader("0000"))
			if code != http.StatusNotFound {
				t.Errorf("%s %s: status %d, body %q", method, path, code, body)
			}
		}
	}
	if n := f.st.lookups.Load() - before; n != 0 {
		t.Fatalf("%d repository lookups for invalid paths", n)
	}
	// The counter works: a valid path does look the repository up.
	f.do("GET", "/scm/PROJ/app.git/info/refs?service=git-upload-pack", auth, nil)
	if f.st.lookups.Load() == before {
		t.Fatal("a valid path made no lookup; the counter proves nothing")
	}
}

// TestErrorsGitPrints refuses admission and checks that every git client
// path shows the message: as a status on GET info/refs, inside the protocol
// on POST.
func TestErrorsGitPrints(t *testing.T) {
	var refuseAdvert, refuseRPC atomic.Bool
	f := newFixture(t, serverOptions{admit: func(tk throttle.Ticket) error {
		advertisement := strings.HasSuffix(tk.Command, "-advertisement")
		if (advertisement && refuseAdvert.Load()) || (!advertisement && refuseRPC.Load()) {
			return &problem.Error{Kind: problem.Throttled, Message: "server is busy", RetryAfter: 7}
		}
		return nil
	}})
	wt := f.seed(1)
	f.commit(wt, "new.txt", "new\n")
	before := f.refs(f.repo)

	refuseRPC.Store(true)
	for _, v := range []string{"0", "1", "2"} {
		errOut := f.failGit("", "-c", "protocol.version="+v, "clone", f.writerURL(), filepath.Join(t.TempDir(), "c"))
		if !strings.Contains(errOut, "remote error: server is busy (retry in 7s)") {
			t.Errorf("clone v%s: stderr:\n%s", v, errOut)
		}
	}
	errOut := f.failGit("", "-c", "protocol.version=2", "ls-remote", f.writerURL())
	if !strings.Contains(errOut, "remote error: server is busy") {
		t.Errorf("ls-remote v2: stderr:\n%s", errOut)
	}
	// send-pack asked for side-band: the message comes on band 3.
	errOut = f.failGit(wt, "push", f.writerURL(), "main")
	if !strings.Contains(errOut, "remote: server is busy (retry in 7s)") {
		t.Errorf("push: stderr:\n%s", errOut)
	}

	refuseRPC.Store(false)
	refuseAdvert.Store(true)
	code, hdr, body := f.do("GET", "/scm/PROJ/app.git/info/refs?service=git-upload-pack",
		http.Header{"Authorization": {basic("alice", f.aliceTok)}}, nil)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "7" || body != "server is busy\n" {
		t.Errorf("GET info/refs: status %d, Retry-After %q, body %q", code, hdr.Get("Retry-After"), body)
	}
	errOut = f.failGit(wt, "push", f.writerURL(), "main")
	if !strings.Contains(errOut, "remote: server is busy") || !strings.Contains(errOut, "429") {
		t.Errorf("push: stderr:\n%s", errOut)
	}
	if after := f.refs(f.repo); after != before {
		t.Fatalf("refs changed:\n%s", after)
	}
}

// TestGitSendsGzip makes the real client send an upload-pack request big
// enough that it compresses it (remote-curl gzips bodies over 1 KiB): a
// fetch of 30 branches into an empty repository, 30 want lines, in every
// protocol version.
func TestGitSendsGzip(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	for i := 0; i < 30; i++ {
		f.commit(wt, "n.txt", fmt.Sprintf("%d\n", i))
		f.mustGit(wt, "branch", fmt.Sprintf("b%02d", i))
	}
	// Straight into the repository: through the server, each of the 30
	// ref updates would run the hooks (this test binary) twice.
	f.mustGit(wt, "push", "-q", f.repos.Path(f.repo.ID), "refs/heads/*:refs/heads/*")
	want := f.refs(f.repo)
	for _, v := range []string{"0", "1", "2"} {
		dir := t.TempDir()
		f.mustGit(dir, "init", "-q", "--bare")
		before := f.gzipRequests.Load()
		f.mustGit(dir, "-c", "protocol.version="+v, "fetch", "-q", f.writerURL(), "+refs/heads/*:refs/heads/*")
		if f.gzipRequests.Load() == before {
			t.Fatalf("v%s: git sent no gzip request; the test proves nothing", v)
		}
		got, _, err := f.git(dir, "for-each-ref", "--format=%(objectname) %(refname)")
		if err != nil || got != want {
			t.Fatalf("v%s: fetched refs:\n%s\nwant:\n%s", v, got, want)
		}
	}
}
