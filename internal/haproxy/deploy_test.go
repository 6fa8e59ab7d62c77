package haproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestShippedConfigSplitsReadsAndWrites runs deploy/haproxy.cfg itself
// (addresses rewritten to two local fake nodes) and checks what the
// operator's guide promises: pushes and other writes reach only nodes
// whose /readyz says "ok", reads also "read-only" ones (whose /readyz is a
// 503); with no node taking writes a push is refused with the read-only
// message; and a node whose database returns takes writes again within
// 2 s.
func TestShippedConfigSplitsReadsAndWrites(t *testing.T) {
	if _, err := exec.LookPath(Binary); err != nil {
		missing(t)
	}
	var state [2]atomic.Value
	var addrs [2]string
	for i := range 2 {
		state[i].Store("ok")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" {
				s := state[i].Load().(string)
				if s != "ok" {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				io.WriteString(w, s+"\n")
				return
			}
			io.WriteString(w, "node"+string(rune('1'+i)))
		}))
		t.Cleanup(srv.Close)
		addrs[i] = strings.TrimPrefix(srv.URL, "http://")
	}
	state[1].Store("read-only")

	shipped, err := os.ReadFile(filepath.Join("..", "..", "deploy", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(shipped)
	// Local only: no syslog socket, no SSH, fewer descriptors than a
	// test process may open, two nodes on random ports.
	cfg = cfg[:strings.Index(cfg, "frontend sluice_ssh")]
	cfg = strings.Replace(cfg, "    log /dev/log local0\n", "", 1)
	cfg = strings.Replace(cfg, "maxconn 20000", "maxconn 200", 1)
	lb := freeAddr(t)
	cfg = strings.Replace(cfg, "bind :80\n", "bind "+lb+"\n", 1)
	cfg = strings.ReplaceAll(cfg, "10.0.0.1:7990", addrs[0])
	cfg = strings.ReplaceAll(cfg, "10.0.0.2:7990", addrs[1])
	cfg = regexp.MustCompile(`(?m)^\s*server node3 .*\n`).ReplaceAllString(cfg, "")
	dir := t.TempDir()
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(Binary, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	cmd := exec.Command(Binary, "-db", "-f", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	do := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+lb+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const (
		fetchAdv = "/scm/p/r.git/info/refs?service=git-upload-pack"
		pushAdv  = "/scm/p/r.git/info/refs?service=git-receive-pack"
	)
	waitFor := func(what string, within time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !ok() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}
	// HAProxy starts with every server up and checks at once (1 s
	// apart); node2 is read-only, so it leaves the write backend after
	// two failed checks.
	waitFor("node2 out of the write backend", 10*time.Second, func() bool {
		for range 4 {
			if _, body := do("GET", pushAdv); body != "node1" {
				return false
			}
		}
		return true
	})

	seen := map[string]int{}
	for range 6 {
		_, body := do("GET", fetchAdv)
		seen[body]++
		_, body = do("POST", "/scm/p/r.git/git-upload-pack")
		seen[body]++
	}
	if seen["node1"] == 0 || seen["node2"] == 0 || len(seen) != 2 {
		t.Errorf("reads went to %v, want node1 and node2 (read-only nodes serve reads)", seen)
	}
	for _, w := range []struct{ method, path string }{
		{"GET", pushAdv},
		{"POST", "/scm/p/r.git/git-receive-pack"},
		{"POST", "/rest/api/1.0/projects"},
		{"DELETE", "/rest/api/1.0/projects/P"},
	} {
		for range 3 {
			if _, body := do(w.method, w.path); body != "node1" {
				t.Errorf("%s %s reached %q, want only node1 (the read-only node2 takes no writes)", w.method, w.path, body)
			}
		}
	}

	// The database is gone for everyone: reads still flow, writes are
	// refused with a message git shows its user.
	state[0].Store("read-only")
	waitFor("no node takes writes", 10*time.Second, func() bool {
		code, _ := do("GET", pushAdv)
		return code == http.StatusServiceUnavailable
	})
	code, body := do("GET", pushAdv)
	if !strings.Contains(body, "read-only: the database is unavailable; pushes are refused until it returns") {
		t.Errorf("push with no writable node: %d %q", code, body)
	}
	if code, body := do("GET", fetchAdv); code != 200 || !strings.HasPrefix(body, "node") {
		t.Errorf("fetch with every node read-only: %d %q", code, body)
	}

	// The database returns: node1 takes writes again within 2 s.
	state[0].Store("ok")
	took := waitFor("node1 back in the write backend", 5*time.Second, func() bool {
		_, body := do("GET", pushAdv)
		return body == "node1"
	})
	if took > 2*time.Second {
		t.Errorf("writes came back %v after the database, want within 2 s", took)
	}

	// A node that cannot serve anything leaves both backends.
	state[1].Store("unavailable")
	waitFor("node2 out of the read backend", 10*time.Second, func() bool {
		for range 4 {
			if _, body := do("GET", fetchAdv); body != "node1" {
				return false
			}
		}
		return true
	})
}
