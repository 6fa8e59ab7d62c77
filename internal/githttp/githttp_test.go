package githttp_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"github.com/sluice-scm/sluice/internal/auth"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

// fixture is a server with one private repository, a writer and a reader.
type fixture struct {
	*server
	proj           *store.Project
	repo           *store.Repository
	writer, reader *store.User
	// Full-scope tokens of the writer (alice, REPO_WRITE) and the reader
	// (bob, REPO_READ).
	aliceTok, bobTok string
}

const password = "correct horse battery staple"

func newFixture(t *testing.T, opts serverOptions) *fixture {
	s := newServer(t, opts)
	f := &fixture{server: s}
	f.proj = s.createProject("PROJ", false)
	f.repo = s.createRepo(f.proj, "app", false)
	f.writer = s.user("alice", "")
	f.reader = s.user("bob", "")
	s.grant(f.repo, f.writer.ID, store.PermRepoWrite)
	s.grant(f.repo, f.reader.ID, store.PermRepoRead)
	f.aliceTok, _ = s.token(f.writer.ID, store.ScopeWrite, nil)
	f.bobTok, _ = s.token(f.reader.ID, store.ScopeWrite, nil)
	return f
}

func (f *fixture) writerURL() string { return f.url("PROJ", "app", "alice", f.aliceTok) }

// seed puts n commits on main and returns the work tree. It pushes to the
// repository's directory, not through the server: the tests that care
// about pushes make their own, and every server push runs the hooks (this
// test binary, which is slow to start under the race detector).
func (f *fixture) seed(n int) string {
	f.t.Helper()
	wt := f.workTree(n)
	f.mustGit(wt, "push", "-q", f.repos.Path(f.repo.ID), "main")
	return wt
}

func TestCloneFetchPushEveryProtocol(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(3)
	for _, v := range []string{"0", "1", "2"} {
		t.Run("v"+v, func(t *testing.T) {
			proto := "protocol.version=" + v
			clone := filepath.Join(t.TempDir(), "clone")
			// The project key in any case, and the URL without ".git".
			url := strings.Replace(strings.TrimSuffix(f.writerURL(), ".git"), "/PROJ/", "/proj/", 1)
			f.mustGit("", "-c", proto, "clone", "-q", url, clone)
			want := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
			if got := strings.TrimSpace(f.mustGit(clone, "rev-parse", "HEAD")); got != want {
				t.Fatalf("cloned HEAD %s, want %s", got, want)
			}

			// Push from the clone, fetch into the seed tree.
			branch := "topic-v" + v
			f.mustGit(clone, "checkout", "-q", "-b", branch)
			head := f.commit(clone, "v"+v+".txt", "protocol "+v+"\n")
			f.mustGit(clone, "-c", proto, "push", "-q", "origin", branch)
			if !strings.Contains(f.refs(f.repo), head+" refs/heads/"+branch) {
				t.Fatalf("push did not land; refs:\n%s", f.refs(f.repo))
			}
			f.mustGit(wt, "-c", proto, "fetch", "-q", f.writerURL(), branch)
			if got := strings.TrimSpace(f.mustGit(wt, "rev-parse", "FETCH_HEAD")); got != head {
				t.Fatalf("fetched %s, want %s", got, head)
			}
			ls := f.mustGit("", "-c", proto, "ls-remote", f.writerURL())
			if !strings.Contains(ls, head+"\trefs/heads/"+branch) || !strings.Contains(ls, want+"\trefs/heads/main") {
				t.Fatalf("ls-remote:\n%s", ls)
			}
		})
	}
	f.fsck(f.repo)
	if !strings.Contains(f.log.String(), fmt.Sprintf("repo=PROJ/app repo_id=%d", f.repo.ID)) {
		t.Errorf("no operation log line for the repository:\n%s", f.log.String())
	}
}

// randomText is n bytes that do not compress.
func randomText(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)[:n]
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t, serverOptions{})
	f.seed(1)
	ctx := context.Background()
	pat := f.user("pat", password)
	f.grant(f.repo, pat.ID, store.PermRepoRead)
	tok, _ := f.token(pat.ID, store.ScopeRead, nil)
	revoked, rt := f.token(pat.ID, store.ScopeRead, nil)
	if err := f.st.RevokeToken(ctx, pat.ID, rt.ID); err != nil {
		t.Fatal(err)
	}
	// Checked before and after it expires; the cases below run meanwhile.
	expiry := time.Now().Add(2 * time.Second)
	expired, _ := f.token(pat.ID, store.ScopeRead, &expiry)
	bearer := func(secret string) http.Header { return http.Header{"Authorization": {"Bearer " + secret}} }
	if code, _, body := f.do("GET", "/scm/PROJ/app.git/info/refs?service=git-upload-pack", bearer(expired), nil); code != http.StatusOK {
		t.Fatalf("token refused before it expired: %d %q", code, body)
	}
	bare := f.url("PROJ", "app", "", "")

	cases := []struct {
		name   string
		args   []string
		ok     bool
		stderr string
	}{
		{"basic password", []string{"ls-remote", f.url("PROJ", "app", "pat", password)}, true, ""},
		{"basic token", []string{"ls-remote", f.url("PROJ", "app", "pat", tok)}, true, ""},
		{"basic token as x-token-auth", []string{"ls-remote", f.url("PROJ", "app", auth.TokenUserName, tok)}, true, ""},
		{"bearer token", []string{"-c", "http.extraHeader=Authorization: Bearer " + tok, "ls-remote", bare}, true, ""},
		{"wrong password", []string{"ls-remote", f.url("PROJ", "app", "pat", "wrong")}, false, "Authentication failed"},
		{"unknown user", []string{"ls-remote", f.url("PROJ", "app", "mallory", password)}, false, "Authentication failed"},
		{"another user's token", []string{"ls-remote", f.url("PROJ", "app", "alice", tok)}, false, "Authentication failed"},
		// With only a header to offer, git answers a 401 by asking for a
		// user name, which the test environment forbids.
		{"wrong bearer", []string{"-c", "http.extraHeader=Authorization: Bearer " + tok + "x", "ls-remote", bare}, false, "could not read Username"},
		{"revoked token", []string{"ls-remote", f.url("PROJ", "app", "pat", revoked)}, false, "Authentication failed"},
		{"revoked bearer", []string{"-c", "http.extraHeader=Authorization: Bearer " + revoked, "ls-remote", bare}, false, "could not read Username"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := f.git("", c.args...)
			if c.ok {
				if err != nil || !strings.Contains(out, "refs/heads/main") {
					t.Fatalf("err %v, out %q, stderr:\n%s", err, out, errOut)
				}
				return
			}
			if err == nil || !strings.Contains(errOut, c.stderr) {
				t.Fatalf("err %v, want stderr with %q:\n%s", err, c.stderr, errOut)
			}
		})
	}

	t.Run("expired token", func(t *testing.T) {
		time.Sleep(time.Until(expiry) + 100*time.Millisecond)
		errOut := f.failGit("", "ls-remote", f.url("PROJ", "app", "pat", expired))
		if !strings.Contains(errOut, "Authentication failed") {
			t.Fatalf("stderr:\n%s", errOut)
		}
		code, hdr, _ := f.do("GET", "/scm/PROJ/app.git/info/refs?service=git-upload-pack", bearer(expired), nil)
		if code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") != `Basic realm="Sluice"` {
			t.Fatalf("status %d, WWW-Authenticate %q", code, hdr.Get("WWW-Authenticate"))
		}
	})
}

func TestAnonymous(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	pub := f.createProject("PUB", true)
	pubRepo := f.createRepo(pub, "open", true)
	f.grant(pubRepo, f.writer.ID, store.PermRepoWrite)
	f.mustGit(wt, "push", "-q", f.url("PUB", "open", "alice", f.aliceTok), "main")

	t.Run("private repository asks for credentials", func(t *testing.T) {
		for _, svc := range []string{"git-upload-pack", "git-receive-pack"} {
			code, hdr, body := f.do("GET", "/scm/PROJ/app.git/info/refs?service="+svc, nil, nil)
			if code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") != `Basic realm="Sluice"` {
				t.Fatalf("%s: status %d, WWW-Authenticate %q, body %q", svc, code, hdr.Get("WWW-Authenticate"), body)
			}
			// A missing repository looks the same to an anonymous caller.
			code2, _, body2 := f.do("GET", "/scm/PROJ/nope.git/info/refs?service="+svc, nil, nil)
			if code2 != code || body2 != body {
				t.Fatalf("missing repository: %d %q, private one: %d %q", code2, body2, code, body)
			}
		}
		code, hdr, _ := f.do("POST", "/scm/PROJ/app.git/git-upload-pack",
			http.Header{"Content-Type": {"application/x-git-upload-pack-request"}}, strings.NewReader("0000"))
		if code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" {
			t.Fatalf("POST: status %d", code)
		}
		errOut := f.failGit("", "clone", f.url("PROJ", "app", "", ""), filepath.Join(t.TempDir(), "c"))
		if !strings.Contains(errOut, "could not read Username") {
			t.Fatalf("git did not ask for credentials:\n%s", errOut)
		}
	})

	t.Run("public repository", func(t *testing.T) {
		clone := filepath.Join(t.TempDir(), "c")
		f.mustGit("", "clone", "-q", f.url("PUB", "open", "", ""), clone)
		f.commit(clone, "anon.txt", "anonymous\n")
		before := f.refs(pubRepo)
		// Pushing always needs credentials: the 401 makes git ask.
		errOut := f.failGit(clone, "push", "origin", "main")
		if !strings.Contains(errOut, "could not read Username") {
			t.Fatalf("stderr:\n%s", errOut)
		}
		if after := f.refs(pubRepo); after != before {
			t.Fatalf("anonymous push changed refs:\n%s", after)
		}
	})
}

func TestNoAccessLooksLikeMissing(t *testing.T) {
	f := newFixture(t, serverOptions{})
	f.seed(1)
	carol := f.user("carol", "")
	carolTok, _ := f.token(carol.ID, store.ScopeWrite, nil)
	hdr := http.Header{"Authorization": {basic("carol", carolTok)}}
	for _, svc := range []string{"git-upload-pack", "git-receive-pack"} {
		code, _, body := f.do("GET", "/scm/PROJ/app.git/info/refs?service="+svc, hdr, nil)
		code2, _, body2 := f.do("GET", "/scm/PROJ/nope.git/info/refs?service="+svc, hdr, nil)
		if code != http.StatusNotFound || code2 != code || body2 != body {
			t.Fatalf("%s: no access %d %q, missing %d %q", svc, code, body, code2, body2)
		}
	}
	for _, slug := range []string{"app", "nope"} {
		errOut := f.failGit("", "clone", f.url("PROJ", slug, "carol", carolTok), filepath.Join(t.TempDir(), "c"))
		if !strings.Contains(errOut, "remote: repository not found") {
			t.Fatalf("%s: stderr:\n%s", slug, errOut)
		}
	}
}

func TestReadOnlyPushIsForbidden(t *testing.T) {
	f := newFixture(t, serverOptions{})
	wt := f.seed(1)
	f.commit(wt, "more.txt", "more\n")
	readTok, _ := f.token(f.writer.ID, store.ScopeRead, nil)
	before := f.refs(f.repo)
	cases := []struct{ name, url, msg string }{
		{"read-scoped token", f.url("PROJ", "app", "alice", readTok), "remote: this access token only has read scope"},
		{"read-only user", f.url("PROJ", "app", "bob", f.bobTok), "remote: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errOut := f.failGit(wt, "push", c.url, "main")
			if !strings.Contains(errOut, c.msg) || !strings.Contains(errOut, "403") {
				t.Fatalf("stderr:\n%s", errOut)
			}
		})
	}
	if after := f.refs(f.repo); after != before {
		t.Fatalf("refs changed:\n%s", after)
	}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}
