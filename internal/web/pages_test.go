package web_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/store"
)

func TestSignInFlow(t *testing.T) {
	n := newNode(t)
	b := newBrowser(t, n.URL)

	if p := b.get("/account"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/login?next=") {
		t.Fatalf("anonymous /account: %d %q, want a redirect to sign in", p.status, p.header.Get("Location"))
	}
	// The sign-in form itself needs its token.
	if p := b.post("/login", url.Values{"username": {"admin"}, "password": {n.AdminPassword}}); p.status != http.StatusForbidden {
		t.Errorf("sign in without csrf: %d, want 403", p.status)
	}
	p := b.submit("/login", "/login", url.Values{"username": {"admin"}, "password": {"wrong"}})
	if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "invalid username or password") {
		t.Errorf("wrong password: %d", p.status)
	}
	p = b.submit("/login", "/login", url.Values{"username": {"admin"}, "password": {n.AdminPassword}, "next": {"//evil.example/"}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/" {
		t.Fatalf("sign in: %d to %q, want 303 to / (an off-site next is ignored)", p.status, p.header.Get("Location"))
	}
	var sessionCookie *http.Cookie
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "sluice_session" {
			sessionCookie = c
		}
	}
	if sessionCookie == nil || !sessionCookie.HttpOnly || sessionCookie.SameSite != http.SameSiteLaxMode || sessionCookie.Path != "/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Lax, Path=/", sessionCookie)
	}
	if sessionCookie.Secure {
		t.Error("session cookie is Secure over plain HTTP; the browser would drop it")
	}
	if p := b.get("/"); p.status != 200 || !strings.Contains(p.body, "Dashboard") || !strings.Contains(p.body, "Administrator") {
		t.Fatalf("dashboard after sign-in: %d", p.status)
	}
	// Sign out ends the session in the database: replaying the old
	// cookie is anonymous.
	if p := b.submit("/logout", "/", url.Values{}); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", p.status)
	}
	replay, _ := http.NewRequest("GET", n.URL+"/account", nil)
	replay.AddCookie(&http.Cookie{Name: "sluice_session", Value: sessionCookie.Value})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("old session cookie after sign-out: %d, want a redirect to sign in", resp.StatusCode)
	}
}

func TestSessionCookieSecureBehindTLS(t *testing.T) {
	n := newNode(t)
	b := newBrowser(t, n.URL)
	// Not a trusted proxy: X-Forwarded-Proto is ignored, so no Secure.
	form := url.Values{"username": {"admin"}, "password": {n.AdminPassword}, "csrf": {b.csrf("/login")}}
	p := b.post("/login", form, "X-Forwarded-Proto", "https")
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "sluice_session" && c.Secure {
			t.Error("untrusted X-Forwarded-Proto made the cookie Secure")
		}
	}
}

func TestCSRFRefused(t *testing.T) {
	n := newNode(t)
	b := newBrowser(t, n.URL)
	b.login("admin", n.AdminPassword)
	token := b.csrf("/account")
	cases := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"no token", url.Values{"name": {"t1"}, "scope": {"read"}}, nil},
		{"wrong token", url.Values{"name": {"t2"}, "scope": {"read"}, "csrf": {token + "x"}}, nil},
		{"another session's token", url.Values{"name": {"t3"}, "scope": {"read"}, "csrf": {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}, nil},
		{"cross-site fetch", url.Values{"name": {"t4"}, "scope": {"read"}, "csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"foreign origin", url.Values{"name": {"t5"}, "scope": {"read"}, "csrf": {token}}, []string{"Origin", "https://evil.example"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := b.post("/account/tokens", tc.form, tc.headers...)
			if p.status != http.StatusForbidden {
				t.Errorf("status %d, want 403", p.status)
			}
		})
	}
	toks, err := n.Store().ListTokens(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 0 {
		t.Errorf("%d tokens created by refused posts", len(toks))
	}
	// The same form with its token works, and shows the secret once.
	p := b.post("/account/tokens", url.Values{"name": {"ci"}, "scope": {"read"}, "days": {"30"}, "csrf": {token}})
	if p.status != 200 || !strings.Contains(p.body, `value="sluice_`) || p.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create token: %d, secret shown: %v", p.status, strings.Contains(p.body, "sluice_"))
	}
	if again := b.get("/account"); strings.Contains(again.body, `value="sluice_`) {
		t.Error("the token secret is shown a second time")
	}
	// GET never changes anything: a GET to a POST-only path is 404/405.
	if p := b.get("/account/tokens"); p.status == 200 {
		t.Errorf("GET /account/tokens: %d", p.status)
	}
}

func TestNotFoundIsTheSameForMissingAndPrivate(t *testing.T) {
	n := newNode(t)
	priv := n.CreateRepo(t, "SECRET", "hidden")
	n.CreateUser(t, "bob", "bob-password-123")
	anon := newBrowser(t, n.URL)
	bob := newBrowser(t, n.URL)
	bob.login("bob", "bob-password-123")
	pairs := [][2]string{
		{"/projects/SECRET/repos/" + priv.Slug, "/projects/SECRET/repos/nope"},
		{"/projects/SECRET/repos/" + priv.Slug + "/browse", "/projects/NOPE/repos/nope/browse"},
		{"/projects/SECRET/repos/" + priv.Slug + "/commits", "/projects/SECRET/repos/nope/commits"},
		{"/projects/SECRET/repos/" + priv.Slug + "/raw/README.md", "/projects/SECRET/repos/nope/raw/README.md"},
		{"/projects/SECRET/repos/" + priv.Slug + "/settings", "/projects/SECRET/repos/nope/settings"},
		{"/projects/SECRET", "/projects/NOPE"},
	}
	for _, who := range []*browser{anon, bob} {
		for _, pr := range pairs {
			a, m := who.get(pr[0]), who.get(pr[1])
			if a.status != 404 || m.status != 404 {
				t.Errorf("%s: %d, %s: %d; want 404 for both", pr[0], a.status, pr[1], m.status)
			}
			if a.body != m.body {
				t.Errorf("404 pages differ for %s and %s", pr[0], pr[1])
			}
		}
	}
	// The project listing does not show it either.
	if p := bob.get("/projects"); strings.Contains(p.body, "SECRET") {
		t.Error("a private project is listed")
	}
}

func TestSecurityHeaders(t *testing.T) {
	n := newNode(t)
	b := newBrowser(t, n.URL)
	for _, path := range []string{"/", "/login", "/help", "/nope", "/projects"} {
		p := b.get(path)
		csp := p.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if p.header.Get("X-Frame-Options") != "DENY" || p.header.Get("Referrer-Policy") == "" || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, p.header)
		}
		// No inline script or style that the CSP would block.
		if strings.Contains(p.body, "<script>") || strings.Contains(p.body, " style=") || strings.Contains(p.body, "<style") {
			t.Errorf("%s has inline script or style", path)
		}
	}
	for _, asset := range []string{"style.css", "app.js"} {
		p := b.get("/static/" + asset)
		if p.status != 200 || !strings.Contains(p.header.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %v", asset, p.status, p.header)
		}
	}
	if p := b.get("/static/nope.js"); p.status != 404 {
		t.Errorf("missing asset: %d", p.status)
	}
}

func TestRepositoryPagesEscapeUserContent(t *testing.T) {
	n := newNode(t)
	r := pushRepo(t, n, "PROJ", "app")
	b := newBrowser(t, n.URL)
	b.login("admin", n.AdminPassword)
	base := "/projects/PROJ/repos/" + r.Slug
	head := strings.TrimSpace(gitRevParse(t, n, r))

	pages := map[string]string{
		"home":        base,
		"tree":        base + "/browse/src",
		"file":        base + "/browse/src/main.go",
		"file at tag": base + "/browse/src/main.go?at=v1.0",
		"file at sha": base + "/browse/src/main.go?at=" + head,
		"markdown":    base + "/browse/docs/guide.md",
		"md source":   base + "/browse/docs/guide.md?view=source",
		"payload":     base + "/browse/" + url.PathEscape(payload+".txt"),
		"commits":     base + "/commits",
		"commits p2":  base + "/commits?start=30",
		"commit":      base + "/commits/" + head,
		"first":       base + "/commits/" + firstCommit(t, n, r),
		"split":       base + "/commits/" + firstCommit(t, n, r) + "?view=split",
		"branches":    base + "/branches",
		"tags":        base + "/tags",
		"settings":    base + "/settings",
		"project":     "/projects/PROJ",
		"dashboard":   "/",
		"account":     "/account",
		"admin":       "/admin",
		"users":       "/admin/users",
		"groups":      "/admin/groups",
		"perms":       "/admin/permissions",
	}
	for name, path := range pages {
		p := b.get(path)
		if p.status != 200 {
			t.Errorf("%s (%s): status %d\n%s", name, path, p.status, p.body)
			continue
		}
		if strings.Contains(p.body, payload) || strings.Contains(p.body, "<script>alert") {
			t.Errorf("%s: unescaped script payload", name)
		}
		for _, bad := range []string{`href="javascript:`, "<img src=x", "<svg"} {
			if strings.Contains(p.body, bad) {
				t.Errorf("%s: %q survived", name, bad)
			}
		}
	}
	home := b.get(base)
	for _, want := range []string{"<strong>bold</strong>", "clone-http", "/scm/proj/app.git"} {
		if !strings.Contains(home.body, want) {
			t.Errorf("repository home lacks %q", want)
		}
	}
	if p := b.get(base + "/commits/" + firstCommit(t, n, r)); !strings.Contains(p.body, "first &lt;script&gt;") {
		t.Error("commit message not shown escaped")
	}
	if p := b.get(base + "/browse/src/main.go"); !strings.Contains(p.body, `<span class="kd">func</span>`) && !strings.Contains(p.body, `class="k`) {
		t.Error("main.go is not highlighted")
	}
	if p := b.get(base + "/commits"); !strings.Contains(p.body, `rel="next"`) {
		t.Error("commits list has no next page")
	}
	if p := b.get(base + "/browse/big/large.txt"); !strings.Contains(p.body, "too large to show") || !strings.Contains(p.body, "/raw/big/large.txt") {
		t.Error("a file over the limit is not degraded to a raw link")
	}
	if p := b.get(base + "/browse/bin/blob.dat"); !strings.Contains(p.body, "binary file") {
		t.Error("binary file not recognised")
	}
	if p := b.get(base + "/browse/nope.txt"); p.status != 404 {
		t.Errorf("missing file: %d", p.status)
	}
	if p := b.get(base + "/browse/src/main.go?at=0000000000000000000000000000000000000000"); p.status != 404 {
		t.Errorf("unknown revision: %d", p.status)
	}
	if p := b.get(base + "/browse/src/main.go?at=--output=/tmp/x"); p.status != 404 {
		t.Errorf("option-like revision: %d", p.status)
	}
}

func TestRawFilesCannotRunInTheOrigin(t *testing.T) {
	n := newNode(t)
	r := pushRepo(t, n, "PROJ", "raw")
	b := newBrowser(t, n.URL)
	b.login("admin", n.AdminPassword)
	base := "/projects/PROJ/repos/" + r.Slug + "/raw/"
	cases := []struct {
		path, ctype string
		attachment  bool
	}{
		{"evil.svg", "text/plain; charset=utf-8", false},
		{"page.html", "text/plain; charset=utf-8", false},
		{"src/main.go", "text/plain; charset=utf-8", false},
		{"bin/blob.dat", "application/octet-stream", true},
		{"big/large.txt", "text/plain; charset=utf-8", false},
	}
	for _, tc := range cases {
		p := b.get(base + tc.path)
		if p.status != 200 {
			t.Errorf("%s: %d", tc.path, p.status)
			continue
		}
		if got := p.header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if got := strings.HasPrefix(p.header.Get("Content-Disposition"), "attachment"); got != tc.attachment {
			t.Errorf("%s: attachment %v, want %v", tc.path, got, tc.attachment)
		}
		if p.header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(p.header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s: headers %v", tc.path, p.header)
		}
	}
	if p := b.get(base + "big/large.txt"); len(p.body) != 70_000*17 {
		t.Errorf("raw large file: %d bytes", len(p.body))
	}
}

func TestAccountSSHKeys(t *testing.T) {
	n := newNode(t)
	b := newBrowser(t, n.URL)
	b.login("admin", n.AdminPassword)
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " laptop"
	if p := b.submit("/account/keys", "/account", url.Values{"key": {"ssh-rsa AAAA nonsense"}}); p.status != 400 {
		t.Errorf("bad key: %d", p.status)
	}
	if p := b.submit("/account/keys", "/account", url.Values{"key": {line}}); p.status != http.StatusSeeOther {
		t.Fatalf("add key: %d\n%s", p.status, p.body)
	}
	keys, err := n.Store().ListSSHKeys(context.Background(), 1)
	if err != nil || len(keys) != 1 || keys[0].Label != "laptop" || keys[0].Fingerprint != ssh.FingerprintSHA256(sshPub) {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	// html/template writes "+" (common in fingerprints) as "&#43;".
	if p := b.get("/account"); !strings.Contains(html.UnescapeString(p.body), keys[0].Fingerprint) {
		t.Error("key not listed")
	}
	// Another user cannot delete it.
	n.CreateUser(t, "eve", "eve-password-123")
	eve := newBrowser(t, n.URL)
	eve.login("eve", "eve-password-123")
	if p := eve.submit("/account/keys/"+itoa64(keys[0].ID)+"/delete", "/account", url.Values{}); p.status != 404 {
		t.Errorf("other user's delete: %d", p.status)
	}
	if p := b.submit("/account/keys/"+itoa64(keys[0].ID)+"/delete", "/account", url.Values{}); p.status != http.StatusSeeOther {
		t.Errorf("delete key: %d", p.status)
	}
	if keys, _ := n.Store().ListSSHKeys(context.Background(), 1); len(keys) != 0 {
		t.Error("key not deleted")
	}
}

func TestCreateProjectAndRepository(t *testing.T) {
	n := newNode(t)
	b := newBrowser(t, n.URL)
	b.login("admin", n.AdminPassword)
	if p := b.submit("/projects", "/projects", url.Values{"key": {"WEB"}, "name": {"Web <b>team</b>"}}); p.status != http.StatusSeeOther {
		t.Fatalf("create project: %d\n%s", p.status, p.body)
	}
	if p := b.submit("/projects/WEB/repos", "/projects/WEB", url.Values{"name": {"site"}, "branch": {"main"}}); p.status != http.StatusSeeOther ||
		p.header.Get("Location") != "/projects/WEB/repos/site" {
		t.Fatalf("create repo: %d %q", p.status, p.header.Get("Location"))
	}
	p := b.get("/projects/WEB/repos/site")
	if p.status != 200 || !strings.Contains(p.body, "This repository is empty") {
		t.Errorf("empty repository home: %d", p.status)
	}
	if p := b.get("/projects/WEB"); strings.Contains(p.body, "<b>team</b>") {
		t.Error("project name not escaped")
	}
	// A reader who may not write sees no settings and cannot post them.
	r, err := n.Store().RepoBySlug(context.Background(), "WEB", "site")
	if err != nil {
		t.Fatal(err)
	}
	u := n.CreateUser(t, "reader", "reader-password-1")
	n.Grant(t, r, u.ID, store.PermRepoRead)
	rd := newBrowser(t, n.URL)
	rd.login("reader", "reader-password-1")
	if p := rd.get("/projects/WEB/repos/site"); p.status != 200 || strings.Contains(p.body, "/settings") {
		t.Errorf("reader's view: %d, settings link shown: %v", p.status, strings.Contains(p.body, "/settings"))
	}
	if p := rd.submit("/projects/WEB/repos/site/settings/delete", "/projects/WEB/repos/site", url.Values{"confirm": {"site"}}); p.status != 403 {
		t.Errorf("reader deleting: %d, want 403", p.status)
	}
	// The admin deletes it.
	if p := b.submit("/projects/WEB/repos/site/settings/delete", "/projects/WEB/repos/site/settings", url.Values{"confirm": {"site"}}); p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d\n%s", p.status, p.body)
	}
	if p := b.get("/projects/WEB/repos/site"); p.status != 404 {
		t.Errorf("deleted repository: %d", p.status)
	}
}
