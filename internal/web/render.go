package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// assets are the static files, read once at start. The stylesheet gets
// chroma's syntax colours appended, so the page still loads one CSS file.
type assets struct {
	files map[string]asset
}

type asset struct {
	body        []byte
	contentType string
	version     string // short content hash, in the URL for caching
}

func loadAssets() (*assets, error) {
	a := &assets{files: map[string]asset{}}
	css, err := fs.ReadFile(staticFS, "static/style.css")
	if err != nil {
		return nil, err
	}
	syntax, err := fs.ReadFile(staticFS, "static/chroma.css")
	if err != nil {
		return nil, err
	}
	a.add("style.css", append(append(css, '\n'), syntax...), "text/css; charset=utf-8")
	js, err := fs.ReadFile(staticFS, "static/app.js")
	if err != nil {
		return nil, err
	}
	a.add("app.js", js, "text/javascript; charset=utf-8")
	return a, nil
}

func (a *assets) add(name string, body []byte, ct string) {
	sum := sha256.Sum256(body)
	a.files[name] = asset{body: body, contentType: ct, version: hex.EncodeToString(sum[:6])}
}

// url is the versioned address of a static file.
func (a *assets) url(name string) string {
	return "/static/" + name + "?v=" + a.files[name].version
}

func (s *server) serveStatic(w http.ResponseWriter, r *http.Request) {
	f, ok := s.assets.files[r.PathValue("name")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.contentType)
	// The URL carries the content hash, so the file can be cached for
	// good; a new release has new URLs.
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Header().Set("ETag", `"`+f.version+`"`)
	if r.Header.Get("If-None-Match") == `"`+f.version+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Write(f.body)
}

// pages are the parsed templates, one set per page, each with the layout.
type pages struct {
	byName map[string]*template.Template
}

func parsePages(a *assets) (*pages, error) {
	funcs := template.FuncMap{
		"asset":      a.url,
		"repoURL":    repoURL,
		"projectURL": projectURL,
		"browseURL":  browseURL,
		"rawURL":     rawURL,
		"commitsURL": commitsURL,
		"commitURL":  commitURL,
		"short":      shortID,
		"ago":        ago,
		"datetime":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"day":        func(t time.Time) string { return t.Format("2 Jan 2006 15:04") },
		"bytes":      humanBytes,
		"dur":        humanDuration,
		"firstLine":  firstLine,
		"add":        func(a, b int) int { return a + b },
		"add64":      func(a, b int64) int64 { return a + b },
		"join":       path.Join,
		"query":      url.QueryEscape,
		"pathEsc":    escapePath,
		"dict":       dict,
		"split":      splitHunk,
		"ikey":       inlineKey,
		"ckey": func(path, lineType string, line int, fileType string) string {
			return path + "|" + lineType + "|" + strconv.Itoa(line) + "|" + fileType
		},
		"commentLink": commentLink,
		"pullURL":     pullURL,
		"lower":       strings.ToLower,
		"list":        func(v ...string) []string { return v },
		"has":         slices.Contains[[]string],
		"percent": func(a, b int64) string {
			if b == 0 {
				return "–"
			}
			return strconv.FormatFloat(100*float64(a)/float64(b), 'f', 1, 64) + " %"
		},
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("parse layout: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", n, err)
		}
		p.byName[base] = t
	}
	return p, nil
}

// view is what every page template gets: the layout's needs and the page's
// own data in Data.
type view struct {
	Title   string
	User    *store.User
	Admin   bool
	CSRF    string
	Flash   string
	Version string
	Section string
	Data    any
}

// flashMessages are the confirmations a redirect can ask for.
var flashMessages = map[string]string{
	"password":      "Password changed; your other sessions were signed out.",
	"token-revoked": "Token revoked.",
	"key-added":     "SSH key added.",
	"key-deleted":   "SSH key deleted.",
	"saved":         "Saved.",
	"deleted":       "Deleted.",
	"cleared":       "Cache cleared.",
	"merged":        "Pull request merged.",
}

// render writes page name with data.
func (s *server) render(c *call, status int, name, title string, data any) error {
	t, ok := s.pages.byName[name]
	if !ok {
		return fmt.Errorf("no template %q", name)
	}
	v := view{Title: title, User: c.user, CSRF: c.csrf, Flash: flashMessages[c.query("flash")], Version: s.Version, Data: data}
	if c.user != nil {
		v.Admin = s.Auth.IsAdmin(c.ctx, c.p)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	h := c.w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// Pages show private data; shared caches must not keep them.
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "private, no-cache")
	}
	c.wrote = true
	c.w.WriteHeader(status)
	_, err := c.w.Write(buf.Bytes())
	return err
}

// ok renders a page with status 200.
func (c *call) ok(name, title string, data any) error {
	return c.s.render(c, http.StatusOK, name, title, data)
}

func dict(kv ...any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		m[k] = kv[i+1]
	}
	return m
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// escapePath escapes each segment of a repository path for a URL.
func escapePath(p string) string {
	if p == "" {
		return ""
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func projectURL(key string) string { return "/projects/" + url.PathEscape(key) }

func repoURL(r *store.Repository) string {
	return projectURL(r.ProjectKey) + "/repos/" + url.PathEscape(r.Slug)
}

// atQuery is the ?at= part of a revision-bound URL; empty for the default.
func atQuery(at string) string {
	if at == "" {
		return ""
	}
	return "?at=" + url.QueryEscape(at)
}

func browseURL(r *store.Repository, at, p string) string {
	u := repoURL(r) + "/browse"
	if p != "" {
		u += "/" + escapePath(p)
	}
	return u + atQuery(at)
}

func rawURL(r *store.Repository, at, p string) string {
	return repoURL(r) + "/raw/" + escapePath(p) + atQuery(at)
}

func commitsURL(r *store.Repository, at string) string { return repoURL(r) + "/commits" + atQuery(at) }

func commitURL(r *store.Repository, id string) string {
	return repoURL(r) + "/commits/" + url.PathEscape(id)
}

func shortID(id string) string { return id[:min(len(id), 11)] }

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// ago is a rough relative time for listings; the exact time is in the
// element's datetime attribute and title.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return plural(int(d/time.Minute), "minute") + " ago"
	case d < 48*time.Hour:
		return plural(int(d/time.Hour), "hour") + " ago"
	case d < 60*24*time.Hour:
		return plural(int(d/(24*time.Hour)), "day") + " ago"
	default:
		return t.Format("2 Jan 2006")
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// humanDuration shows a duration with the precision a reader can use:
// milliseconds below a second, tenths of seconds below a minute, whole
// seconds beyond.
func humanDuration(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	default:
		return d.Round(time.Second).String()
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTPE"[exp]) + "iB"
}
