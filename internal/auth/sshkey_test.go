package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func authorizedLine(t *testing.T, pub any, comment string) string {
	t.Helper()
	sp, err := ssh.NewPublicKey(pub)
	must(t, err)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	if comment != "" {
		line += " " + comment
	}
	return line
}

func TestParseAuthorizedKeyPolicy(t *testing.T) {
	gen := map[string]func() (any, error){
		"ed25519": func() (any, error) { pub, _, err := ed25519.GenerateKey(rand.Reader); return pub, err },
		"ecdsa-p256": func() (any, error) {
			k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			return &k.PublicKey, err
		},
		"ecdsa-p384": func() (any, error) {
			k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			return &k.PublicKey, err
		},
		"ecdsa-p521": func() (any, error) {
			k, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
			return &k.PublicKey, err
		},
		"rsa-2048": func() (any, error) { k, err := rsa.GenerateKey(rand.Reader, 2048); return &k.PublicKey, err },
		"rsa-1024": func() (any, error) { k, err := rsa.GenerateKey(rand.Reader, 1024); return &k.PublicKey, err },
	}
	for name, ok := range map[string]bool{
		"ed25519": true, "ecdsa-p256": true, "ecdsa-p384": true, "ecdsa-p521": true,
		"rsa-2048": true, "rsa-1024": false,
	} {
		pub, err := gen[name]()
		must(t, err)
		line := authorizedLine(t, pub, "me@laptop")
		key, comment, err := ParseAuthorizedKey("  " + line + "\n")
		if !ok {
			if !problem.Is(err, problem.Invalid) || !strings.Contains(problem.Message(err), "1024 bits") {
				t.Errorf("%s: %v, want invalid naming the size", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if comment != "me@laptop" {
			t.Errorf("%s: comment %q", name, comment)
		}
		if want := authorizedLine(t, pub, ""); strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))) != want {
			t.Errorf("%s: parsed key differs", name)
		}
	}
}

func TestParseAuthorizedKeyRejects(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	good := authorizedLine(t, pub, "")
	pub2, _, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	for name, tc := range map[string]struct{ line, want string }{
		"empty":         {"   ", "empty"},
		"garbage":       {"hello world", "authorized_keys format"},
		"bad base64":    {"ssh-ed25519 AAAA!!!", "authorized_keys format"},
		"options":       {`command="/bin/sh" ` + good, "options"},
		"two keys":      {good + "\n" + authorizedLine(t, pub2, ""), "one line"},
		"certificate":   {certLine(t, pub), "is not accepted"},
		"security key":  {"sk-ssh-ed25519@openssh.com " + base64.StdEncoding.EncodeToString(ssh.Marshal(struct{ Name, Key, App string }{"sk-ssh-ed25519@openssh.com", string(pub), "ssh:"})), "is not accepted"},
		"long":          {good + " " + strings.Repeat("x", maxAuthorizedKeyLen), "longer than"},
		"control chars": {good + " a\x1bb", "control characters"},
	} {
		_, _, err := ParseAuthorizedKey(tc.line)
		if !problem.Is(err, problem.Invalid) || !strings.Contains(problem.Message(err), tc.want) {
			t.Errorf("%s: %v, want invalid saying %q", name, err, tc.want)
		}
	}
}

func TestPublicKeyLogin(t *testing.T) {
	eachStore(t, testPublicKeyLogin)
}

func testPublicKeyLogin(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)

	p, err := w.svc.PublicKey(ctx, w.sshPublic(t, "alice-key"))
	if err != nil {
		t.Fatal(err)
	}
	if *p != (Principal{UserID: w.users["alice"].ID, Name: "alice"}) {
		t.Errorf("user key principal %+v", p)
	}
	p, err = w.svc.PublicKey(ctx, w.sshPublic(t, "key-write"))
	if err != nil {
		t.Fatal(err)
	}
	if p.AccessKeyID == 0 || p.AccessKeyRepoID != w.priv.ID || p.Scope != store.ScopeWrite || p.UserID != 0 {
		t.Errorf("access key principal %+v", p)
	}

	unknown, _, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	unknownKey, err := ssh.NewPublicKey(unknown)
	must(t, err)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	must(t, err)
	weakKey, err := ssh.NewPublicKey(&weak.PublicKey)
	must(t, err)
	// A weak key stored before the policy existed no longer logs in.
	must(t, st.AddSSHKey(ctx, &store.SSHKey{UserID: w.users["alice"].ID, Label: "weak", PublicKey: authorizedLine(t, &weak.PublicKey, ""), Fingerprint: ssh.FingerprintSHA256(weakKey)}))
	for name, key := range map[string]ssh.PublicKey{
		"unknown key":       unknownKey,
		"disabled user key": w.sshPublic(t, "dis-key"),
		"weak stored key":   weakKey,
		"nil":               nil,
	} {
		if _, err := w.svc.PublicKey(ctx, key); !problem.Is(err, problem.Unauthenticated) {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
}

// TestPublicKeyLoginFake covers what needs the fake: call counts, and a
// row the real store would not hold.
func TestPublicKeyLoginFake(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	w := newWorld(t, st)
	for range 3 {
		for _, label := range []string{"alice-key", "key-read"} {
			if _, err := w.svc.PublicKey(ctx, w.sshPublic(t, label)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := st.count("TouchSSHKey"); n != 2 {
		t.Errorf("TouchSSHKey called %d times in a minute, want 2 (once per key)", n)
	}

	// A row whose key does not match its fingerprint is not trusted.
	stored, _, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	presented, _, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	presentedKey, err := ssh.NewPublicKey(presented)
	must(t, err)
	must(t, st.AddSSHKey(ctx, &store.SSHKey{UserID: w.users["alice"].ID, PublicKey: authorizedLine(t, stored, ""), Fingerprint: ssh.FingerprintSHA256(presentedKey)}))
	if _, err := w.svc.PublicKey(ctx, presentedKey); !problem.Is(err, problem.Unauthenticated) {
		t.Errorf("key not matching its row: %v, want unauthenticated", err)
	}
}

// certLine returns an OpenSSH certificate for pub, self-signed, in
// authorized_keys format.
func certLine(t *testing.T, pub ed25519.PublicKey) string {
	t.Helper()
	_, caKey, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	signer, err := ssh.NewSignerFromKey(caKey)
	must(t, err)
	sp, err := ssh.NewPublicKey(pub)
	must(t, err)
	cert := &ssh.Certificate{Key: sp, CertType: ssh.UserCert, ValidBefore: ssh.CertTimeInfinity}
	must(t, cert.SignCert(rand.Reader, signer))
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert)))
}
