package api_test

import (
	"strings"
	"testing"
)

// TestPermissionMatrix runs endpoints of every kind as each kind of caller
// against a private repository: anonymous callers are asked to sign in,
// callers without access get the same 404 as for a missing repository,
// readers may read but not write (403), writers may write but not
// administer, administrators may do everything.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	r := e.repo("PRJ", "priv")
	e.push(e.workTree(map[string]string{"README.md": "hi\n"}, 1), r.ID, "main")
	e.grant("PRJ", "priv", "reader", "REPO_READ")
	e.grant("PRJ", "priv", "writer", "REPO_WRITE")

	const base = "/rest/api/1.0/projects/PRJ/repos/priv"
	type call struct {
		method, path string
		body         any
	}
	var (
		read        = []call{{"GET", base, nil}, {"GET", base + "/branches", nil}, {"GET", base + "/commits", nil}, {"GET", base + "/browse", nil}, {"GET", base + "/raw/README.md", nil}, {"GET", base + "/archive", nil}, {"GET", base + "/default-branch", nil}, {"GET", base + "/tags", nil}}
		write       = []call{{"POST", base + "/branches", map[string]string{"name": "b-%s", "startPoint": "main"}}, {"POST", base + "/tags", map[string]string{"name": "t-%s", "startPoint": "main"}}}
		adminCalls  = []call{{"PUT", base + "/default-branch", map[string]string{"id": "refs/heads/main"}}, {"GET", base + "/permissions/users", nil}, {"PUT", base, map[string]any{"description": "x"}}}
		globalAdmin = []call{{"GET", "/rest/api/1.0/admin/groups", nil}, {"GET", "/rest/api/1.0/admin/permissions/users", nil}}
	)
	who := []struct {
		name                         string
		authz                        string
		read, write, admin, glbAdmin int
	}{
		{"anonymous", "", 401, 401, 401, 401},
		{"no access", e.bob, 404, 404, 404, 403},
		{"reader", e.reader, 200, 403, 403, 403},
		{"writer", e.writer, 200, 200, 403, 403},
		{"admin", e.admin, 200, 200, 204, 200},
	}
	for _, w := range who {
		t.Run(w.name, func(t *testing.T) {
			check := func(c call, want int) {
				t.Helper()
				body := c.body
				if m, ok := body.(map[string]string); ok {
					cp := map[string]string{}
					for k, v := range m {
						cp[k] = strings.ReplaceAll(v, "%s", strings.ReplaceAll(w.name, " ", "-"))
					}
					body = cp
				}
				res := e.do(c.method, c.path, w.authz, body)
				got := res.status
				if want == 204 && (got == 200 || got == 204) {
					got = 204 // admin calls answer 200 or 204 by kind
				}
				if got != want {
					t.Errorf("%s %s: status %d, want %d (%s)", c.method, c.path, res.status, want, res.body)
				}
				if res.status == 401 && res.header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %s: 401 without WWW-Authenticate", c.method, c.path)
				}
			}
			for _, c := range read {
				check(c, w.read)
			}
			for _, c := range write {
				check(c, w.write)
			}
			for _, c := range adminCalls {
				check(c, w.admin)
			}
			for _, c := range globalAdmin {
				check(c, w.glbAdmin)
			}
		})
	}
}

// TestNoExistenceLeak: a private repository and a missing one answer a
// caller without access identically, status and body.
func TestNoExistenceLeak(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	e.repo("PRJ", "priv")
	for _, authz := range []string{e.bob, ""} {
		for _, suffix := range []string{"", "/branches", "/browse/x", "/commits"} {
			a := e.do("GET", "/rest/api/1.0/projects/PRJ/repos/priv"+suffix, authz, nil)
			b := e.do("GET", "/rest/api/1.0/projects/PRJ/repos/missing"+suffix, authz, nil)
			c := e.do("GET", "/rest/api/1.0/projects/NOPE/repos/missing"+suffix, authz, nil)
			if a.status != b.status || string(a.body) != string(b.body) || a.status != c.status || string(a.body) != string(c.body) {
				t.Errorf("%q: private %d %s, missing %d %s, missing project %d %s", suffix, a.status, a.body, b.status, b.body, c.status, c.body)
			}
			if a.status != 404 && a.status != 401 {
				t.Errorf("%q: status %d", suffix, a.status)
			}
		}
	}
}

func TestPublicRepositoryIsReadableAnonymously(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	r := e.repo("PRJ", "open")
	e.push(e.workTree(map[string]string{"README.md": "hi\n"}, 1), r.ID, "main")
	e.must(401, "GET", "/rest/api/1.0/projects/PRJ/repos/open", "", nil)
	e.must(200, "PUT", "/rest/api/1.0/projects/PRJ/repos/open", e.admin, map[string]any{"public": true})
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/open", "", nil)
	e.must(200, "GET", "/rest/api/1.0/projects/PRJ/repos/open/raw/README.md", "", nil)
	e.must(401, "POST", "/rest/api/1.0/projects/PRJ/repos/open/branches", "", map[string]string{"name": "x", "startPoint": "main"})
	e.must(403, "POST", "/rest/api/1.0/projects/PRJ/repos/open/branches", e.bob, map[string]string{"name": "x", "startPoint": "main"})
}

func TestErrorShape(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		method, path, authz string
		body                any
		status              int
	}{
		{"GET", "/rest/api/1.0/projects/NOPE", e.admin, nil, 404},
		{"GET", "/rest/api/1.0/no/such/thing", e.admin, nil, 404},
		{"PATCH", "/rest/api/1.0/projects", e.admin, nil, 405},
		{"POST", "/rest/api/1.0/projects", e.admin, "{not json", 400},
		{"POST", "/rest/api/1.0/projects", e.admin, `{"key": 5}`, 400},
		{"POST", "/rest/api/1.0/projects", e.admin, "", 400},
		{"POST", "/rest/api/1.0/projects", e.admin, `{"key":"` + strings.Repeat("A", 2<<20) + `"}`, 413},
		{"GET", "/rest/api/1.0/users", "", nil, 401},
		{"GET", "/rest/api/1.0/users", "Bearer sluice_not-a-real-token", nil, 401},
		{"GET", "/rest/api/1.0/users", basic("alice", "wrong"), nil, 401},
		{"GET", "/rest/api/1.0/admin/groups", e.alice, nil, 403},
	}
	for _, tt := range tests {
		res := e.do(tt.method, tt.path, tt.authz, tt.body)
		if res.status != tt.status {
			t.Errorf("%s %s: status %d, want %d (%s)", tt.method, tt.path, res.status, tt.status, res.body)
			continue
		}
		if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: content type %q", tt.method, tt.path, ct)
		}
		var eb struct {
			Errors []map[string]any `json:"errors"`
		}
		res.json(t, &eb)
		if len(eb.Errors) != 1 {
			t.Fatalf("%s %s: errors %s", tt.method, tt.path, res.body)
		}
		for _, k := range []string{"context", "message", "exceptionName"} {
			if _, ok := eb.Errors[0][k]; !ok {
				t.Errorf("%s %s: error without %q: %s", tt.method, tt.path, k, res.body)
			}
		}
		if m, _ := eb.Errors[0]["message"].(string); m == "" {
			t.Errorf("%s %s: empty message", tt.method, tt.path)
		}
		if tt.status == 401 && res.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: no WWW-Authenticate", tt.method, tt.path)
		}
		if tt.status == 405 && res.header.Get("Allow") == "" {
			t.Errorf("%s %s: no Allow", tt.method, tt.path)
		}
	}
}

// TestBadInput: names that attack paths, options, logs or limits are
// refused with 400 and a message naming the field.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.project("PRJ", false)
	r := e.repo("PRJ", "repo")
	e.push(e.workTree(map[string]string{"README.md": "hi\n", "dir/a.txt": "a\n"}, 1), r.ID, "main")

	bad := []string{"../../etc", "..%2F..", "-rf", "a\x00b", "a\rb", "a\nb", strings.Repeat("a", 300), "", ".."}
	for _, v := range bad {
		res := e.do("POST", "/rest/api/1.0/projects", e.admin, map[string]any{"key": v, "name": "n"})
		if res.status != 400 || !strings.Contains(res.message(t), "project key") {
			t.Errorf("project key %q: %d %s", v, res.status, res.body)
		}
		res = e.do("POST", "/rest/api/1.0/projects/PRJ/repos", e.admin, map[string]any{"name": v})
		if res.status != 400 || !strings.Contains(res.message(t), "repository name") {
			t.Errorf("repository name %q: %d %s", v, res.status, res.body)
		}
		if v != "" {
			res = e.do("PUT", "/rest/api/1.0/projects/PRJ/repos/repo", e.admin, map[string]any{"name": v + "x"})
			if res.status != 400 || !strings.Contains(res.message(t), "repository") {
				t.Errorf("rename to %q: %d %s", v+"x", res.status, res.body)
			}
		}
		res = e.do("POST", "/rest/api/1.0/admin/users?name="+urlq(v), e.admin, nil)
		if res.status != 400 || !strings.Contains(res.message(t), "user name") {
			t.Errorf("user name %q: %d %s", v, res.status, res.body)
		}
	}
	// Reserved slugs.
	for _, v := range []string{"rest", "api", "scm", "HEAD"} {
		res := e.do("POST", "/rest/api/1.0/projects/PRJ/repos", e.admin, map[string]any{"name": v})
		if res.status != 400 || !strings.Contains(res.message(t), "reserved") {
			t.Errorf("reserved name %q: %d %s", v, res.status, res.body)
		}
	}
	// Branch and tag names.
	for _, v := range []string{"-x", "a..b", "a b", "x.lock", "refs/heads/-x", "a/-b", "a\x00b", "HEAD", "@", "a~1", "a:b", "a//b", ""} {
		res := e.do("POST", "/rest/api/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]any{"name": v, "startPoint": "main"})
		if res.status != 400 || !strings.Contains(res.message(t), "name") {
			t.Errorf("branch %q: %d %s", v, res.status, res.body)
		}
		res = e.do("POST", "/rest/api/1.0/projects/PRJ/repos/repo/tags", e.admin, map[string]any{"name": v, "startPoint": "main"})
		if res.status != 400 || !strings.Contains(res.message(t), "name") {
			t.Errorf("tag %q: %d %s", v, res.status, res.body)
		}
	}
	for _, v := range []string{"-x", "main..HEAD", "main~1", "main^{tree}", ":/text", "HEAD@{1}"} {
		res := e.do("POST", "/rest/api/1.0/projects/PRJ/repos/repo/branches", e.admin, map[string]any{"name": "ok", "startPoint": v})
		if res.status != 400 || !strings.Contains(res.message(t), "startPoint") {
			t.Errorf("startPoint %q: %d %s", v, res.status, res.body)
		}
	}
	// Paths in browse, raw and archive.
	const base = "/rest/api/1.0/projects/PRJ/repos/repo"
	for _, p := range []string{
		"/browse/..%2F..%2Fetc%2Fpasswd", "/browse/dir/..%2F..%2F..", "/raw/..%2FREADME.md", "/raw/dir%2F..%2FREADME.md",
		"/browse/%2Fetc", "/raw/a%00b", "/browse/dir//a.txt", "/raw/./README.md",
		"/archive?prefix=..%2Fx", "/archive?prefix=-x", "/archive?prefix=%2Fabs", "/archive?prefix=a%0Ab", "/archive?format=rar",
	} {
		res := e.do("GET", base+p, e.admin, nil)
		redirect := res.status == 301 || res.status == 307
		if res.status != 400 && res.status != 404 && !redirect {
			t.Errorf("%s: %d %s", p, res.status, res.body)
		}
		if redirect {
			// ServeMux cleans literal dot segments by redirecting; the
			// target must not escape the repository's URL space.
			if loc := res.header.Get("Location"); !strings.HasPrefix(loc, "/rest/") {
				t.Errorf("%s redirects to %q", p, loc)
			}
		}
	}
	for _, p := range []string{"/browse/../../../../etc/passwd", "/raw/../../README.md"} {
		res := e.do("GET", base+p, e.admin, nil)
		if res.status == 200 {
			t.Errorf("%s: 200 %s", p, res.body)
		}
	}
	// Lookups of malformed names are simply not found.
	for _, p := range []string{"/rest/api/1.0/projects/..%2F..", "/rest/api/1.0/projects/-rf/repos/x", "/rest/api/1.0/projects/PRJ/repos/..%2F..", "/rest/api/1.0/projects/PRJ/repos/a%0Ab"} {
		if res := e.do("GET", p, e.admin, nil); res.status != 404 {
			t.Errorf("%s: %d %s", p, res.status, res.body)
		}
	}
	// Unknown refs and commits.
	for _, p := range []string{
		"/browse?at=nope", "/raw/README.md?at=refs/heads/nope", "/commits?until=nope", "/commits/0123456789abcdef0123456789abcdef01234567",
		"/compare/commits?from=main&to=nope", "/archive?at=nope", "/browse/missing.txt", "/raw/missing.txt",
	} {
		if res := e.do("GET", base+p, e.admin, nil); res.status != 404 {
			t.Errorf("%s: %d %s", p, res.status, res.body)
		}
	}
	e.must(404, "POST", base+"/branches", e.admin, map[string]any{"name": "x", "startPoint": "nope"})
	e.must(400, "POST", base+"/branches", e.admin, map[string]any{"name": "x"})
}
