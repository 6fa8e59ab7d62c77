package web_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// The browser tests drive Debian's Chromium through chromedp against a
// real node. Without Chromium they fail under CI (which installs it: a
// silently skipped browser test proves nothing) and skip elsewhere, saying
// what to install.
//
// Screenshots of the main pages go to docs/screenshots when
// SLUICE_UPDATE_SCREENSHOTS=1, otherwise to a temporary directory so that
// `make test` leaves the tree clean.

type chrome struct {
	t      *testing.T
	ctx    context.Context
	base   string
	shots  string
	alerts atomic.Int32
}

func startChrome(t *testing.T, base string) *chrome {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/chromium"); serr != nil {
			testbed.Missing(t, "Chromium", "apt-get install chromium")
		}
		path = "/usr/bin/chromium"
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root in CI containers
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	// Start the browser with a context without deadline (see chromedp.Run).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	c := &chrome{t: t, ctx: ctx, base: base, shots: t.TempDir()}
	if os.Getenv("SLUICE_UPDATE_SCREENSHOTS") == "1" {
		c.shots = filepath.Join("..", "..", "docs", "screenshots")
		if err := os.MkdirAll(c.shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Any script that runs alert() (every payload does) is a failure.
	dialogs := chromedp.Events(ctx, cdppage.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			c.alerts.Add(1)
			t.Errorf("a script ran a dialog: %q", ev.Message)
			chromedp.Call(ctx, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return c
}

// do runs steps with a per-step timeout, so a broken page fails the test
// instead of hanging it.
func (c *chrome) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](c *chrome, what string, a chromedp.Action[T]) T {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	return v
}

func (c *chrome) open(path string) {
	c.t.Helper()
	c.do("open "+path, chromedp.Navigate(c.base+path), chromedp.WaitReady(chromedp.CSS("footer")))
}

func (c *chrome) text(sel string) string {
	c.t.Helper()
	return run(c, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

func (c *chrome) screenshot(name string) {
	c.t.Helper()
	png := run(c, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(c.shots, name+".png"), png, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

func TestBrowser(t *testing.T) {
	n := newNode(t)
	r := pushRepo(t, n, "DEMO", "webapp")
	rita := n.CreateUser(t, "rita", "rita-password-1")
	n.Grant(t, r, rita.ID, store.PermRepoWrite)
	c := startChrome(t, n.URL)

	// Sign in.
	c.open("/login")
	c.screenshot("signin")
	c.do("sign in",
		chromedp.SendKeys(chromedp.CSS("#username"), "admin"),
		chromedp.SendKeys(chromedp.CSS("#password"), n.AdminPassword),
		chromedp.Submit(chromedp.CSS("#password")),
		chromedp.WaitVisible(chromedp.CSS("#recent")),
	)
	if h := c.text("main h1"); h != "Dashboard" {
		t.Fatalf("after sign-in the page says %q", h)
	}

	// Create a project and a repository through the forms.
	c.open("/projects")
	c.do("create project",
		chromedp.Click(chromedp.CSS("details.panel summary")),
		chromedp.SendKeys(chromedp.CSS("#pkey"), "NEW"),
		chromedp.SendKeys(chromedp.CSS("#pname"), "New project"),
		chromedp.Submit(chromedp.CSS("#pkey")),
		chromedp.WaitVisible(chromedp.CSS("#new-repo")),
	)
	c.do("create repository",
		chromedp.Click(chromedp.CSS("#new-repo summary")),
		chromedp.SendKeys(chromedp.CSS("#rname"), "fresh"),
		chromedp.Submit(chromedp.CSS("#rname")),
		chromedp.WaitVisible(chromedp.CSS("#empty-title")),
	)
	if loc := run(c, "location", chromedp.Location()); !strings.HasSuffix(loc, "/projects/NEW/repos/fresh") {
		t.Errorf("after creating a repository the browser is at %s", loc)
	}

	// Browse the pushed repository: README rendered, payloads inert.
	base := "/projects/DEMO/repos/" + r.Slug
	c.open(base)
	if got := c.text(".markdown strong"); got != "bold" {
		t.Errorf("README bold text: %q", got)
	}
	c.screenshot("repository")
	c.open(base + "/browse/src/main.go")
	if got := c.text("#L4 .src"); !strings.Contains(got, "func main()") {
		t.Errorf("line 4 of main.go: %q", got)
	}
	if n := run(c, "highlight spans", chromedp.Evaluate[int](`document.querySelectorAll("table.code span").length`)); n == 0 {
		t.Error("main.go is not highlighted")
	}
	c.screenshot("file")
	c.open(base + "/commits")
	c.screenshot("commits")
	// The latest commit: a small diff (the first one adds a 1 MiB file,
	// too big for a readable screenshot).
	c.open(base + "/commits/" + strings.TrimSpace(gitRevParse(t, n, r)))
	c.screenshot("commit")
	// The diff toggle works from the keyboard (the "v" shortcut).
	c.do("toggle diff view", chromedp.KeyEvent("v"), chromedp.WaitVisible(chromedp.CSS("table.diff.split")))
	c.open(base + "/browse/" + strings.ReplaceAll(payload, " ", "%20") + ".txt")
	c.open(base + "/browse/docs/guide.md")

	// The raw SVG is shown as text, not run.
	c.do("open raw svg", chromedp.Navigate(c.base+base+"/raw/evil.svg"))
	if body := run(c, "raw svg body", chromedp.Evaluate[string](`document.body.innerText`)); !strings.Contains(body, "<script>") {
		t.Errorf("raw SVG not shown as text: %q", body)
	}

	// A POST without the CSRF token is refused, even from the site itself.
	c.open("/account")
	status := run(c, "csrf-less post", chromedp.Evaluate[int](
		`fetch("/account/tokens", {method: "POST", body: new URLSearchParams({name: "x", scope: "read"})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Errorf("POST without CSRF token: %d, want 403", status)
	}
	c.screenshot("account")
	c.open("/admin")
	c.screenshot("admin")
	c.open("/help")

	// Pull request: open, comment inline, approve (as a reviewer), merge.
	c.open(base + "/pull-requests/new?from=feature&to=main")
	c.do("create pull request", chromedp.Click(chromedp.CSS("#create-pr")), chromedp.WaitVisible(chromedp.CSS("#pr-merge")))
	prURL := run(c, "location", chromedp.Location())
	c.open(strings.TrimPrefix(prURL, c.base) + "/diff")
	c.do("open inline comment form", chromedp.Click(chromedp.CSS("tr.add td.ln a")), chromedp.WaitVisible(chromedp.CSS("#inline-text")))
	c.do("comment inline",
		chromedp.SendKeys(chromedp.CSS("#inline-text"), "Why 42? "+payload),
		chromedp.Click(chromedp.CSS("#inline-submit")),
		chromedp.WaitVisible(chromedp.CSS("article.comment")),
	)
	if got := c.text("article.comment .markdown"); !strings.Contains(got, "Why 42?") {
		t.Errorf("inline comment shows %q", got)
	}
	c.screenshot("pull-request-diff")
	c.do("sign out", chromedp.Click(chromedp.CSS("header .who button")), chromedp.WaitVisible(chromedp.CSS("a[href='/login']")))
	c.open("/login")
	c.do("sign in as reviewer",
		chromedp.SendKeys(chromedp.CSS("#username"), "rita"),
		chromedp.SendKeys(chromedp.CSS("#password"), "rita-password-1"),
		chromedp.Submit(chromedp.CSS("#password")),
		chromedp.WaitVisible(chromedp.CSS("#recent")),
	)
	c.open(strings.TrimPrefix(prURL, c.base))
	// Wait for what only the page after the review has: #merge is on the
	// page before it too (a writer may merge without approvals), and a
	// screenshot taken while the form's navigation runs can hang.
	c.do("approve", chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS(`button[value="UNAPPROVED"]`)))
	c.screenshot("pull-request")
	// Likewise: the approval left a flash on the page, so wait for the
	// merge form to go instead.
	c.do("merge", chromedp.Click(chromedp.CSS("#merge")), chromedp.WaitNotPresent(chromedp.CSS("#merge")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if got := c.text(".prstate"); got != "merged" {
		t.Errorf("after merging the pull request is %q", got)
	}

	// Phone-sized screen.
	c.do("phone viewport", chromedp.EmulateViewport(390, 844))
	c.open(base)
	c.screenshot("repository-phone")

	// Sign out.
	c.do("sign out", chromedp.Click(chromedp.CSS("header .who button")), chromedp.WaitVisible(chromedp.CSS("a[href='/login']")))
	if c.alerts.Load() != 0 {
		t.Errorf("%d script dialogs ran", c.alerts.Load())
	}
}
