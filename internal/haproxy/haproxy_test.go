package haproxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRenderIsValid(t *testing.T) {
	if _, err := exec.LookPath(Binary); err != nil {
		missing(t)
	}
	tests := []struct {
		name string
		cfg  Config
		want []string
		not  []string
	}{
		{"http only", Config{HTTPAddr: "127.0.0.1:8080", Nodes: []Node{{"node-1", "127.0.0.1:7990", ""}}},
			[]string{"balance leastconn", "server node-1 127.0.0.1:7990 check", "inter 1000ms fall 2 rise 2"},
			[]string{SSHBackend, "send-proxy-v2"}},
		{"ssh", Config{HTTPAddr: "127.0.0.1:8080", SSHAddr: "127.0.0.1:8022", Balance: "roundrobin", CheckInterval: 200 * time.Millisecond,
			Nodes: []Node{{"node-1", "127.0.0.1:7990", "127.0.0.1:7999"}, {"node-2", "127.0.0.1:7991", "127.0.0.1:7998"}}},
			[]string{"balance roundrobin", "server node-2 127.0.0.1:7998 check port 7991", "send-proxy-v2", "inter 200ms"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := tt.cfg.Render()
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("config lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(text, w) {
					t.Errorf("config has %q:\n%s", w, text)
				}
			}
			path := t.TempDir() + "/haproxy.cfg"
			writeFile(t, path, text)
			if out, err := exec.Command(Binary, "-c", "-f", path).CombinedOutput(); err != nil {
				t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, text)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no bind", Config{Nodes: []Node{{"n", "127.0.0.1:1", ""}}}, "no http bind"},
		{"no nodes", Config{HTTPAddr: "127.0.0.1:1"}, "no nodes"},
		{"bad name", Config{HTTPAddr: "127.0.0.1:1", Nodes: []Node{{"a b", "127.0.0.1:1", ""}}}, "invalid server name"},
		{"ssh without node ssh", Config{HTTPAddr: "127.0.0.1:1", SSHAddr: "127.0.0.1:2", Nodes: []Node{{"n", "127.0.0.1:1", ""}}}, "ssh address"},
		{"ok", Config{HTTPAddr: "127.0.0.1:1", Nodes: []Node{{"n", "127.0.0.1:1", ""}}}, ""},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	in := "# pxname,svname,qcur,status,weight\n" +
		"sluice_http,FRONTEND,,OPEN,\n" +
		"sluice_http,node-1,0,UP,1\n" +
		"sluice_http,node-2,0,UP 1/2,1\n" +
		"sluice_http,BACKEND,0,UP,1\n" +
		"sluice_ssh,node-1,0,DOWN,1\n\n"
	got, err := parseStat(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []ServerState{{"sluice_http", "node-1", "UP"}, {"sluice_http", "node-2", "UP 1/2"}, {"sluice_ssh", "node-1", "DOWN"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if got[1].Up() || !got[0].Up() {
		t.Error("a rising server must not count as up")
	}
	if _, err := parseStat(strings.NewReader("# a,b\n")); err == nil {
		t.Error("a header without status must fail")
	}
}

// TestRouting starts HAProxy in front of two HTTP servers: both get
// marked up and serve traffic; one that fails /readyz is taken out.
func TestRouting(t *testing.T) {
	if _, err := exec.LookPath(Binary); err != nil {
		missing(t)
	}
	var hits [2]atomic.Int64
	var sick atomic.Bool
	var nodes []Node
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" {
				if i == 1 && sick.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				return
			}
			hits[i].Add(1)
		}))
		t.Cleanup(srv.Close)
		nodes = append(nodes, Node{Name: "node-" + string(rune('1'+i)), HTTPAddr: strings.TrimPrefix(srv.URL, "http://")})
	}
	p, err := Start(Config{HTTPAddr: freeAddr(t), Nodes: nodes, Balance: "roundrobin", CheckInterval: 100 * time.Millisecond}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitRouted(ctx, 2); err != nil {
		t.Fatal(err)
	}
	get := func() {
		resp, err := http.Get(p.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for range 4 {
		get()
	}
	if hits[0].Load() != 2 || hits[1].Load() != 2 {
		t.Fatalf("round robin over two up servers: hits %d, %d", hits[0].Load(), hits[1].Load())
	}
	sick.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		states, err := p.Servers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) == 2 && states[0].Up() && states[1].Status == "DOWN" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sick server not taken out: %v", states)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := hits[1].Load()
	for range 4 {
		get()
	}
	if hits[1].Load() != before {
		t.Error("a down server still got requests")
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// missing fails under CI, which installs HAProxy, and skips elsewhere.
// (testbed.Missing, which imports this package, cannot be used here.)
func missing(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal("haproxy is not installed (apt-get install haproxy); CI must install it")
	}
	t.Skip("haproxy is not installed; install it to run this test: apt-get install haproxy")
}
