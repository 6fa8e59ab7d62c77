package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so tests see each step.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func (b *browser) get(path string) page {
	b.t.Helper()
	req, _ := http.NewRequest("GET", b.base+path, nil)
	return b.do(req)
}

// post submits a form; csrf is added unless the form already has the
// field (an empty value there means "send none").
func (b *browser) post(path string, form url.Values, headers ...string) page {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return b.do(req)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the token from a page's forms.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	p := b.get(path)
	m := csrfRE.FindStringSubmatch(p.body)
	if m == nil {
		b.t.Fatalf("no csrf token on %s (status %d)", path, p.status)
	}
	return m[1]
}

func (b *browser) submit(path, from string, form url.Values) page {
	b.t.Helper()
	form.Set("csrf", b.csrf(from))
	return b.post(path, form)
}

func (b *browser) login(user, pw string) {
	b.t.Helper()
	p := b.submit("/login", "/login", url.Values{"username": {user}, "password": {pw}, "next": {"/"}})
	if p.status != http.StatusSeeOther {
		b.t.Fatalf("sign in as %s: status %d\n%s", user, p.status, p.body)
	}
}

func newNode(t *testing.T) *testbed.Node {
	return testbed.NewNode(t, testbed.NodeOptions{})
}

// payload is what the XSS tests plant in every kind of user content.
const payload = `<script>alert("xss")</script>`

// pushRepo creates PROJ/name and pushes a history whose file names,
// contents and commit messages carry script payloads.
func pushRepo(t *testing.T, n *testbed.Node, key, name string) *store.Repository {
	t.Helper()
	r := n.CreateRepo(t, key, name)
	dir := t.TempDir()
	testbed.Git(t, dir, "init", "-q", "-b", "main")
	files := map[string]string{
		"README.md": "# Hello\n\n" + payload + "\n\n[click](javascript:alert(1))\n\n<img src=x onerror=alert(1)>\n\n" +
			"<svg><script>alert(1)</script></svg>\n\nSome **bold** text.\n",
		"src/main.go":       "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n",
		"evil.svg":          `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>`,
		"page.html":         "<html><body><script>alert(3)</script></body></html>",
		payload + ".txt":    "named badly\n",
		"docs/guide.md":     "Guide with <script>alert(4)</script>\n",
		"bin/blob.dat":      "\x00\x01\x02binary",
		"big/large.txt":     strings.Repeat("0123456789abcdef\n", 70_000), // > 1 MiB
		"big/medium.go":     "package big\n" + strings.Repeat("var x = 1\n", 8000),
		"src/unicode-é.txt": "héllo\n",
	}
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbed.Git(t, dir, "add", "-A")
	testbed.Git(t, dir, "commit", "-q", "-m", "first "+payload)
	for i := range 40 {
		if err := os.WriteFile(filepath.Join(dir, "src/main.go"), []byte("package main\n\n// change "+strings.Repeat("x", i)+"\nfunc main() {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		testbed.Git(t, dir, "commit", "-q", "-am", "change "+strings.Repeat("y", i))
	}
	testbed.Git(t, dir, "tag", "v1.0")
	testbed.Git(t, dir, "checkout", "-q", "-b", "feature")
	if err := os.WriteFile(filepath.Join(dir, "src/feature.go"), []byte("package main\n\n// Feature does "+payload+".\nfunc Feature() int { return 42 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.Git(t, dir, "add", "-A")
	testbed.Git(t, dir, "commit", "-q", "-m", "add the feature")
	testbed.Git(t, dir, "checkout", "-q", "main")
	testbed.Git(t, dir, "push", "-q", n.CloneURL(key, r.Slug, "admin", n.AdminPassword), "main", "feature", "v1.0")
	got, err := n.Store().RepoByID(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func gitRevParse(t *testing.T, n *testbed.Node, r *store.Repository) string {
	t.Helper()
	return testbed.Git(t, n.App.Repos.Path(r.ID), "rev-parse", "refs/heads/main")
}

func firstCommit(t *testing.T, n *testbed.Node, r *store.Repository) string {
	t.Helper()
	return strings.TrimSpace(testbed.Git(t, n.App.Repos.Path(r.ID), "rev-list", "--max-parents=0", "refs/heads/main"))
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
