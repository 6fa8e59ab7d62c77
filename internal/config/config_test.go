package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLayering(t *testing.T) {
	file := writeFile(t, `
[data]
dir = "/srv/sluice"
[server]
http_addr = "127.0.0.1:8000"
trusted_proxies = ["10.0.0.0/8"]
[cache]
max_bytes = "10GiB"
[git]
timeout = "90s"
`)
	cfg, err := Load(file, []string{"SLUICE_SERVER_HTTP_ADDR=127.0.0.1:9000", "SLUICE_CACHE_DIR=/fast/cache", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	// A flag beats env.
	if err := cfg.Set("server.ssh_addr", ""); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"env beats file", cfg.Server.HTTPAddr, "127.0.0.1:9000"},
		{"explicit cache dir wins", cfg.Cache.Dir, "/fast/cache"},
		{"repositories default from data.dir", cfg.Storage.Repositories, "/srv/sluice/repositories"},
		{"database default from data.dir", cfg.Database.URL, "sqlite:///srv/sluice/sluice.db"},
		{"flag empties ssh", cfg.Server.SSHAddr, ""},
		{"list", strings.Join(cfg.Server.TrustedProxies, ","), "10.0.0.0/8"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
	if cfg.Cache.MaxBytes != 10<<30 {
		t.Errorf("size: got %d", cfg.Cache.MaxBytes)
	}
	if cfg.Git.Timeout.Duration != 90*time.Second {
		t.Errorf("duration: got %s", cfg.Git.Timeout)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if cfg.Server.HTTPAddr != "127.0.0.1:7990" || cfg.Server.SSHAddr != "127.0.0.1:7999" {
		t.Errorf("addresses: %q %q", cfg.Server.HTTPAddr, cfg.Server.SSHAddr)
	}
	if cfg.Database.URL != "sqlite://"+filepath.Join(wd, "data", "sluice.db") {
		t.Errorf("database url %q", cfg.Database.URL)
	}
	if cfg.Git.MaxInputSize != 2<<30 {
		t.Errorf("max input size %d", cfg.Git.MaxInputSize)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name, file string
		env        []string
		want       string
	}{
		{"unknown file key", "[server]\nhttp_adr = \"x:1\"\n", nil, "server.http_adr"},
		{"unknown section", "[serverr]\nx = 1\n", nil, "serverr"},
		{"unknown env", "", []string{"SLUICE_CACHE_DIRR=/x"}, "SLUICE_CACHE_DIRR"},
		{"bad size env", "", []string{"SLUICE_GIT_MAX_INPUT_SIZE=lots"}, "SLUICE_GIT_MAX_INPUT_SIZE"},
		{"bad bool env", "", []string{"SLUICE_CACHE_PACKS=maybe"}, "SLUICE_CACHE_PACKS"},
		{"bad duration", "[git]\ntimeout = \"forever\"\n", nil, "forever"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := ""
			if c.file != "" {
				path = writeFile(t, c.file)
			}
			_, err := Load(path, c.env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		key, val, want string
	}{
		{"server.http_addr", "nocolon", "server.http_addr"},
		{"server.trusted_proxies", "not-a-cidr", "server.trusted_proxies"},
		{"database.url", "mysql://x", "database.url"},
		{"throttle.strategy", "magic", "throttle.strategy"},
		{"throttle.target_cpu", "1.5", "throttle.target_cpu"},
		{"cache.min_occurrences", "3", "cache.min_occurrences"},
		{"cache.abandoned_timeout", "-1s", "cache.abandoned_timeout"},
		{"log.level", "loud", "log.level"},
		{"server.ssh_max_unauthenticated_per_source", "0", "server.ssh_max_unauthenticated_per_source"},
		{"server.ssh_max_unauthenticated", "-1", "server.ssh_max_unauthenticated"},
		{"server.ssh_handshake_timeout", "0s", "server.ssh_handshake_timeout"},
		{"server.ssh_auth_timeout", "5s", "server.ssh_auth_timeout"},
	}
	for _, c := range cases {
		cfg := Default()
		if err := cfg.Set(c.key, c.val); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Resolve(); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: got %v", c.key, c.val, err)
		}
	}
	cfg := Default()
	if err := cfg.Set("no.such", "1"); err == nil {
		t.Error("Set of an unknown key succeeded")
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "2GiB": 2 << 30, "512MiB": 512 << 20, "1GB": 1e9, "3 KiB": 3072} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5GiB", "lots"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
	if FormatSize(2<<30) != "2GiB" {
		t.Errorf("FormatSize: %s", FormatSize(2<<30))
	}
}

// TestDocumented keeps docs/configuration.md honest: every key appears.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/configuration.md does not document %s", k)
		}
	}
}

func TestWebhooksAndSMTP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		env     []string
		wantErr string
		allow   string
	}{
		{name: "defaults: nothing allowed, no mail", allow: ""},
		{name: "networks from the file", file: "[webhooks]\nallow_networks = [\"10.20.0.0/16\", \"127.0.0.1\"]\n",
			allow: "10.20.0.0/16,127.0.0.1/32"},
		{name: "networks from env", env: []string{"SLUICE_WEBHOOKS_ALLOW_NETWORKS=192.168.1.7/24"}, allow: "192.168.1.0/24"},
		{name: "bad network", file: "[webhooks]\nallow_networks = [\"intranet\"]\n", wantErr: "webhooks.allow_networks"},
		{name: "smtp complete", file: "[smtp]\nhost = \"mail\"\nport = 587\nfrom = \"sluice@example.com\"\nusername = \"u\"\npassword = \"p\"\n"},
		{name: "smtp without from", file: "[smtp]\nhost = \"mail\"\n", wantErr: "smtp.from"},
		{name: "zero reconcile interval", file: "[node]\nreconcile_interval = \"0s\"\n", wantErr: "node.reconcile_interval"},
		{name: "zero acquire timeout", file: "[database]\nacquire_timeout = \"0s\"\n", wantErr: "database.acquire_timeout"},
		{name: "abandon before the hook timeout", file: "[node]\nabandon_after = \"30s\"\n", wantErr: "node.abandon_after"},
		{name: "smtp bad port", file: "[smtp]\nhost = \"mail\"\nport = 0\nfrom = \"a@b.c\"\n", wantErr: "smtp.port"},
		{name: "smtp user without password", file: "[smtp]\nhost = \"mail\"\nfrom = \"a@b.c\"\nusername = \"u\"\n", wantErr: "smtp.username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			cfg, err := Load(path, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Resolve(); err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate = %v, want an error about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range cfg.WebhookAllow() {
				got = append(got, p.String())
			}
			if strings.Join(got, ",") != tc.allow {
				t.Fatalf("WebhookAllow = %v, want %s", got, tc.allow)
			}
		})
	}
}

// TestTrustedProxyNets: the one parse of server.trusted_proxies that every
// transport uses; single addresses become host prefixes.
func TestTrustedProxyNets(t *testing.T) {
	c := Default()
	c.Server.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1", "2001:db8::7", "10.1.2.3/16"}
	got := c.TrustedProxyNets()
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::7/128", "10.1.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("entry %d: %s, want %s", i, got[i], want[i])
		}
	}
}
