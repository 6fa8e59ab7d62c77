package githttp_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// postPush posts a receive-pack body as alice and returns the response.
func (f *fixture) postPush(body string) string {
	f.t.Helper()
	code, _, resp := f.do("POST", "/scm/PROJ/app.git/git-receive-pack", http.Header{
		"Authorization": {basic("alice", f.aliceTok)},
		"Content-Type":  {"application/x-git-receive-pack-request"},
	}, strings.NewReader(body))
	if code != http.StatusOK {
		f.t.Fatalf("status %d: %q", code, resp)
	}
	return resp
}

// pushBody is a receive-pack request moving each ref from old to new, with
// pack as its pack.
func pushBody(caps string, pack []byte, cmds ...[3]string) string {
	var b strings.Builder
	for i, c := range cmds {
		line := c[0] + " " + c[1] + " " + c[2]
		if i == 0 {
			line += "\x00" + caps
		}
		line += "\n"
		fmt.Fprintf(&b, "%04x%s", len(line)+4, line)
	}
	b.WriteString("0000")
	b.Write(pack)
	return b.String()
}

// TestRetriedPushIsIdempotent: the same push posted twice, as a load
// balancer resends it when the node that applied it died before
// answering, gets git's own success answer the second time, byte for byte,
// for every report format git negotiates.
func TestRetriedPushIsIdempotent(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	zero := strings.Repeat("0", 40)
	for i, caps := range []string{
		"report-status side-band-64k quiet",
		"report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.39.5",
		"report-status",
		"report-status-v2 side-band quiet",
		"side-band-64k quiet",
	} {
		t.Run(caps, func(t *testing.T) {
			old := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
			head := f.commit(wt, "x.txt", fmt.Sprintf("x %d\n", i))
			tag := fmt.Sprintf("refs/tags/v%d", i)
			body := pushBody(caps, packBetween(t, wt, old, head),
				[3]string{old, head, "refs/heads/main"}, [3]string{zero, head, tag})
			first := f.postPush(body)
			if !strings.Contains(f.refs(f.repo), head+" refs/heads/main") {
				t.Fatalf("first push did not land: %q", first)
			}
			second := f.postPush(body)
			if second != first {
				t.Fatalf("retry answered %q, want git's first answer %q", second, first)
			}
		})
	}
	if !strings.Contains(f.log.String(), "retry_in_place=true") {
		t.Fatalf("no retry logged:\n%s", f.log.String())
	}
	f.fsck(f.repo)
}

// TestRetriedPushConflictStillFails: a replayed push whose ref has moved on
// since is a real conflict, and a push whose refs are only partly in place
// is not a retry: both are git's to refuse, as before.
func TestRetriedPushConflictStillFails(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	base := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
	first := f.commit(wt, "a.txt", "a\n")
	body := pushBody("report-status", packBetween(t, wt, base, first), [3]string{base, first, "refs/heads/main"})
	if resp := f.postPush(body); !strings.Contains(resp, "ok refs/heads/main") {
		t.Fatalf("first push: %q", resp)
	}
	// Someone else moves main on.
	later := f.commit(wt, "b.txt", "b\n")
	f.mustGit(wt, "push", "-q", f.writerURL(), "main")

	resp := f.postPush(body)
	if !strings.Contains(resp, "ng refs/heads/main") {
		t.Fatalf("replay over a moved ref answered %q, want a refusal", resp)
	}
	if !strings.Contains(f.refs(f.repo), later+" refs/heads/main") {
		t.Fatalf("main moved:\n%s", f.refs(f.repo))
	}

	// One ref in place, the other not: git judges, and refuses the stale one.
	next := f.commit(wt, "c.txt", "c\n")
	both := pushBody("report-status", packBetween(t, wt, base, next),
		[3]string{base, later, "refs/heads/main"}, [3]string{strings.Repeat("0", 40), next, "refs/heads/other"})
	resp = f.postPush(both)
	if !strings.Contains(resp, "ng refs/heads/main") || strings.Contains(f.log.String(), "retry_in_place") {
		t.Fatalf("half-applied push answered %q", resp)
	}
}

// resendingProxy stands for a load balancer whose first node applied a
// push and died before answering: it sends every receive-pack POST to the
// server twice and returns only the second answer. Everything else passes
// through once.
type resendingProxy struct {
	upstream string
	resent   atomic.Int64
}

func (p *resendingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	send := func() (*http.Response, error) {
		req, err := http.NewRequest(r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header = r.Header.Clone()
		return http.DefaultTransport.RoundTrip(req)
	}
	resp, err := send()
	if err == nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.resent.Add(1)
		resp, err = send()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// TestGitPushThroughResendingProxy: the real git client, pushing through
// a proxy that resends its push, sees success.
func TestGitPushThroughResendingProxy(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &resendingProxy{upstream: f.base}
	srv := &http.Server{Handler: proxy}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	u, _ := url.Parse(f.writerURL())
	u.Host = ln.Addr().String()
	head := f.commit(wt, "y.txt", "y\n")
	f.mustGit(wt, "branch", "topic")
	f.mustGit(wt, "push", u.String(), "main", "topic")
	if proxy.resent.Load() == 0 {
		t.Fatal("the proxy resent nothing")
	}
	refs := f.refs(f.repo)
	if !strings.Contains(refs, head+" refs/heads/main") || !strings.Contains(refs, head+" refs/heads/topic") {
		t.Fatalf("refs:\n%s", refs)
	}
	f.fsck(f.repo)
}
