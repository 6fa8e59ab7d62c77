package e3

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func TestParseCPULine(t *testing.T) {
	tests := []struct {
		line string
		want time.Duration
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 5 50 1000 30 2 3 4 70 1", 164 * 10 * time.Millisecond},
		{"cpu  100 0 50 1000", 150 * 10 * time.Millisecond},
		{"cpu0 100 0 50 1000 0 0 0 0", 0}, // a single CPU's line
		{"cpu  x 0 50 1000 0", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := parseCPULine(tt.line); got != tt.want {
			t.Errorf("parseCPULine(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
	if machineBusy() <= 0 {
		t.Error("machineBusy reads nothing from /proc/stat")
	}
}

func TestPinnedHostKey(t *testing.T) {
	key := func() ssh.PublicKey {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ssh.NewPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b := key(), key()
	var p pinnedHostKey
	for i, tt := range []struct {
		key     ssh.PublicKey
		wantErr bool
	}{{a, false}, {a, false}, {b, true}, {a, false}} {
		if err := p.check("h", nil, tt.key); (err != nil) != tt.wantErr {
			t.Errorf("check %d: %v, want error %v", i, err, tt.wantErr)
		}
	}
}

func TestSSHClientsNeedAnAddress(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sshClients("", map[string]ssh.Signer{"u": s}); err == nil || !strings.Contains(err.Error(), "no SSH address") {
		t.Errorf("no address: %v", err)
	}
	cs, err := sshClients("127.0.0.1:1", map[string]ssh.Signer{"u": s, "v": s})
	if err != nil || len(cs) != 2 || cs["u"] == nil {
		t.Errorf("clients: %v, %v", cs, err)
	}
	if cs, err := sshClients("127.0.0.1:1", nil); err != nil || cs != nil {
		t.Errorf("no keys: %v, %v", cs, err)
	}
}

func TestInfraDesc(t *testing.T) {
	if got := infraDesc(nil); got != "–" {
		t.Errorf("empty: %q", got)
	}
	if got := infraDesc(map[string]float64{"postgres": 0.123, "haproxy": 0.05}); got != "haproxy 0.05, postgres 0.12" {
		t.Errorf("got %q", got)
	}
}
