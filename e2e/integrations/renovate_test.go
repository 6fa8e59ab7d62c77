package integrations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/testbed"
)

// rest calls the node's REST API as the administrator and decodes the
// answer into out (when not nil); it fails the test on any status but want.
func (s *suite) rest(t *testing.T, method, path string, body, out any, want int) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, s.node.URL+path, rd)
	req.SetBasicAuth("admin", s.node.AdminPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, raw.String())
	}
	if out != nil {
		if err := json.Unmarshal(raw.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw.String())
		}
	}
}

// egress is an HTTP proxy that refuses everything and remembers what was
// asked of it. Renovate runs with HTTP(S)_PROXY pointing here and NO_PROXY
// covering 127.0.0.1, so any attempt to reach a public registry, GitHub
// or a preset host lands here and fails the test.
type egress struct {
	mu   sync.Mutex
	seen []string
}

func (e *egress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.seen = append(e.seen, r.Method+" "+r.Host+r.URL.Path)
	e.mu.Unlock()
	http.Error(w, "no traffic beyond 127.0.0.1 in tests", http.StatusForbidden)
}

func (e *egress) requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// renovate runs Renovate end to end against the node: it discovers a
// repository, finds an outdated version of a library (a custom regex
// manager whose datasource is git-tags on another repository of the same
// node, so nothing needs a registry), pushes a branch, opens a pull
// request with the repository's default reviewer, and, once the test has
// posted a SUCCESSFUL build for the branch's head, automerges it on its
// next run.
func (s *suite) renovate(t *testing.T) {
	entry := renovate(t)
	const project = "RENO"
	s.node.CreateProject(t, project)
	var reviewer struct{ ID int64 }
	s.rest(t, "GET", "/rest/api/1.0/users/"+s.other, nil, &reviewer, 200)

	// The library: public, tagged 1.0.0 and 1.2.0.
	s.rest(t, "POST", "/rest/api/1.0/projects/"+project+"/repos", map[string]any{"name": "lib", "public": true}, nil, 201)
	lib := testbed.WorkTree(t, 2)
	libRemote := s.node.CloneURL(project, "lib", "admin", s.node.AdminPassword)
	testbed.Git(t, lib, "tag", "1.0.0", "HEAD~1")
	testbed.Git(t, lib, "tag", "1.2.0")
	testbed.Git(t, lib, "push", "-q", libRemote, "main", "1.0.0", "1.2.0")

	// The application pins lib at 1.0.0 and has a default reviewer.
	s.rest(t, "POST", "/rest/api/1.0/projects/"+project+"/repos", map[string]any{"name": "app"}, nil, 201)
	app := testbed.WorkTree(t, 1)
	if err := os.WriteFile(filepath.Join(app, "versions.txt"), []byte("lib=1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.Git(t, app, "add", "versions.txt")
	testbed.Git(t, app, "commit", "-q", "-m", "pin lib")
	testbed.Git(t, app, "push", "-q", s.node.CloneURL(project, "app", "admin", s.node.AdminPassword), "main")
	s.rest(t, "PUT", "/rest/api/1.0/projects/"+project+"/permissions/users?name="+s.other+"&permission=PROJECT_READ", nil, nil, 204)
	anyRef := map[string]any{"id": "ANY_REF_MATCHER_ID", "type": map[string]string{"id": "ANY_REF"}}
	s.rest(t, "POST", "/rest/default-reviewers/1.0/projects/"+project+"/repos/app/condition", map[string]any{
		"sourceMatcher": anyRef, "targetMatcher": anyRef,
		"reviewers": []map[string]any{{"id": reviewer.ID}}, "requiredApprovals": 0,
	}, nil, 200)

	// The recording proxy.
	eg := &egress{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &http.Server{Handler: eg}
	go proxy.Serve(ln)
	t.Cleanup(func() { proxy.Close() })

	work := t.TempDir()
	config := map[string]any{
		"platform":           "bitbucket-server",
		"endpoint":           s.node.URL,
		"username":           "admin",
		"password":           s.node.AdminPassword,
		"gitAuthor":          "Renovate Bot <renovate@sluice.invalid>",
		"autodiscover":       true,
		"autodiscoverFilter": []string{project + "/app"},
		"onboarding":         false,
		"requireConfig":      "optional",
		// Nothing that would look for a registry, a changelog or a preset.
		"enabledManagers":       []string{"custom.regex"},
		"fetchChangeLogs":       "off",
		"dependencyDashboard":   false,
		"repositoryCache":       "disabled",
		"baseDir":               filepath.Join(work, "base"),
		"cacheDir":              filepath.Join(work, "cache"),
		"prHourlyLimit":         0,
		"prConcurrentLimit":     0,
		"branchConcurrentLimit": 0,
		"automerge":             true,
		"automergeType":         "pr",
		"customManagers": []map[string]any{{
			"customType":          "regex",
			"fileMatch":           []string{`^versions\.txt$`},
			"matchStrings":        []string{`lib=(?<currentValue>\S+)`},
			"depNameTemplate":     "lib",
			"datasourceTemplate":  "git-tags",
			"packageNameTemplate": s.node.URL + "/scm/" + strings.ToLower(project) + "/lib.git",
			"versioningTemplate":  "semver",
		}},
	}
	cfgPath := filepath.Join(work, "config.json")
	b, _ := json.MarshalIndent(config, "", "  ")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(work, "home")
	os.MkdirAll(home, 0o755)
	proxyURL := "http://" + ln.Addr().String()
	runRenovate := func(n int) {
		t.Helper()
		start := time.Now()
		logPath := filepath.Join(work, fmt.Sprintf("renovate-%d.log", n))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", entry)
		cmd.Dir = work
		// Not testbed.GitEnv: its GIT_AUTHOR_* would override Renovate's
		// gitAuthor, and Renovate leaves a branch whose commits it did
		// not author alone ("modified") instead of automerging it.
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "LANG=C",
			"RENOVATE_CONFIG_FILE=" + cfgPath,
			"LOG_LEVEL=debug",
			"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
			"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
			"TMPDIR=" + work,
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		os.WriteFile(logPath, out, 0o644)
		t.Logf("renovate run %d: %s, log %s", n, time.Since(start).Round(time.Millisecond), logPath)
		if err != nil {
			t.Fatalf("renovate run %d: %v\n%s", n, err, tail(out, 80))
		}
		if bytes.Contains(out, []byte(`"level":50`)) || bytes.Contains(out, []byte("ERROR:")) {
			t.Errorf("renovate run %d logged errors:\n%s", n, grepLines(out, "ERROR", 40))
		}
	}

	type prJSON struct {
		ID      int
		Version int
		State   string
		Title   string
		FromRef struct {
			DisplayID    string
			LatestCommit string
		}
		Reviewers []struct {
			User struct{ Name string }
		}
	}
	var page struct{ Values []prJSON }
	prs := func(state string) []prJSON {
		s.rest(t, "GET", "/rest/api/1.0/projects/"+project+"/repos/app/pull-requests?state="+state, nil, &page, 200)
		return page.Values
	}

	// Run 1: discover, branch, pull request; no build yet, so no merge.
	runRenovate(1)
	open := prs("OPEN")
	if len(open) != 1 {
		t.Fatalf("after the first run: %d open pull requests, want 1 (log %s)", len(open), filepath.Join(work, "renovate-1.log"))
	}
	pr := open[0]
	if !strings.HasPrefix(pr.FromRef.DisplayID, "renovate/") || !strings.Contains(pr.Title, "1.2.0") {
		t.Errorf("pull request %q from %q: want a renovate/ branch updating lib to 1.2.0", pr.Title, pr.FromRef.DisplayID)
	}
	if len(pr.Reviewers) != 1 || pr.Reviewers[0].User.Name != s.other {
		t.Errorf("pull request reviewers %+v: want the default reviewer %s", pr.Reviewers, s.other)
	}
	if out, err := testbed.GitErr(t.TempDir(), "ls-remote", s.node.CloneURL(project, "app", "admin", s.node.AdminPassword), "refs/heads/"+pr.FromRef.DisplayID); err != nil || !strings.Contains(out, pr.FromRef.LatestCommit) {
		t.Errorf("branch %s not at the pull request's head: %q %v", pr.FromRef.DisplayID, out, err)
	}

	// The build passes.
	s.rest(t, "POST", "/rest/build-status/1.0/commits/"+pr.FromRef.LatestCommit, map[string]any{
		"state": "SUCCESSFUL", "key": "ci", "name": "CI", "url": "http://ci.invalid/1",
	}, nil, 204)

	// Run 2: sees the green build through stats and merges.
	runRenovate(2)
	merged := prs("MERGED")
	if len(merged) != 1 || merged[0].ID != pr.ID {
		log, _ := os.ReadFile(filepath.Join(work, "renovate-2.log"))
		t.Fatalf("after the second run: merged %+v, want pull request %d; what Renovate said about merging:\n%s",
			merged, pr.ID, grepLines(log, "erge", 60))
	}
	var file bytes.Buffer
	req, _ := http.NewRequest("GET", s.node.URL+"/rest/api/1.0/projects/"+project+"/repos/app/raw/versions.txt?at=refs/heads/main", nil)
	req.SetBasicAuth("admin", s.node.AdminPassword)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		file.ReadFrom(resp.Body)
		resp.Body.Close()
	}
	if file.String() != "lib=1.2.0\n" {
		t.Errorf("versions.txt on main after the merge: %q, want lib=1.2.0", file.String())
	}
	if seen := eg.requests(); len(seen) > 0 {
		t.Errorf("Renovate tried to leave 127.0.0.1: %v", seen)
	}
}

func tail(b []byte, n int) string {
	lines := strings.Split(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func grepLines(b []byte, word string, max int) string {
	var out []string
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.Contains(l, word) {
			end := min(i+8, len(lines))
			out = append(out, lines[i:end]...)
			if len(out) > max {
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
