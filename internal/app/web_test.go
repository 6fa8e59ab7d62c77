package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
)

type fakeListener struct {
	net.Listener
	addr string
}

func (l fakeListener) Addr() net.Addr {
	a, _ := net.ResolveTCPAddr("tcp", l.addr)
	return a
}

func TestBoundBaseURLs(t *testing.T) {
	tests := []struct {
		name                   string
		httpAddr, sshAddr      string
		baseURL, sshBaseURL    string // as configured after Resolve
		boundHTTP, boundSSH    string
		wantHTTP, wantSSHValue string
	}{
		{"derived from port 0", "127.0.0.1:0", "127.0.0.1:0", "http://127.0.0.1:0", "ssh://git@127.0.0.1:0",
			"127.0.0.1:41234", "127.0.0.1:41235", "http://127.0.0.1:41234", "ssh://git@127.0.0.1:41235"},
		{"derived, host-less address keeps its form", ":0", "", "http://:0", "",
			"[::]:7990", "", "http://:7990", ""},
		{"explicit URLs are kept", "127.0.0.1:0", "127.0.0.1:0", "https://git.example.com", "ssh://git@git.example.com:7999",
			"127.0.0.1:41234", "127.0.0.1:41235", "https://git.example.com", "ssh://git@git.example.com:7999"},
		{"fixed port unchanged", "127.0.0.1:7990", "", "http://127.0.0.1:7990", "",
			"127.0.0.1:7990", "", "http://127.0.0.1:7990", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &App{}
			a.Config.Server.HTTPAddr, a.Config.Server.SSHAddr = tc.httpAddr, tc.sshAddr
			a.Config.Server.BaseURL, a.Config.Server.SSHBaseURL = tc.baseURL, tc.sshBaseURL
			a.httpLn = fakeListener{addr: tc.boundHTTP}
			if tc.boundSSH != "" {
				a.sshLn = fakeListener{addr: tc.boundSSH}
			}
			h, s := a.boundBaseURLs()
			if h != tc.wantHTTP || s != tc.wantSSHValue {
				t.Errorf("got %q, %q; want %q, %q", h, s, tc.wantHTTP, tc.wantSSHValue)
			}
		})
	}
}

// A node listening on port 0 shows its bound port in the base URLs.
func TestBaseURLFollowsBoundPort(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Server.SSHAddr = "127.0.0.1:0"
	cfg.Server.SSHBaseURL = "ssh://git@127.0.0.1:0"
	t.Setenv("SLUICE_ADMIN_PASSWORD", "pw-for-tests")
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), Options{Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := a.BaseURL(); got != "http://127.0.0.1:0" {
		t.Errorf("before Listen: %q, want the configured URL", got)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	if got, want := a.BaseURL(), "http://"+a.HTTPAddr(); got != want {
		t.Errorf("BaseURL %q, want %q", got, want)
	}
	if got, want := a.SSHBaseURL(), "ssh://git@"+a.SSHAddr(); got != want {
		t.Errorf("SSHBaseURL %q, want %q", got, want)
	}
}
