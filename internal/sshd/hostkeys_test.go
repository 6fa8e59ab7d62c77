package sshd

import (
	"bytes"
	"context"
	"crypto/rsa"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/store"
)

// TestHostKeysConverge: nodes starting at once on one database end up with
// one key set, and later starts read it back unchanged.
func TestHostKeysConverge(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	const nodes = 4
	var wg sync.WaitGroup
	keys := make([][]ssh.Signer, nodes)
	gen := make([]bool, nodes)
	errs := make([]error, nodes)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], gen[i], errs[i] = loadHostKeys(ctx, db)
		}()
	}
	wg.Wait()
	winners := 0
	for i := range nodes {
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
		if gen[i] {
			winners++
		}
		if !sameKeys(keys[i], keys[0]) {
			t.Fatalf("node %d has other host keys than node 0", i)
		}
	}
	if winners != 1 {
		t.Errorf("%d nodes stored their keys, want exactly 1", winners)
	}
	var types []string
	for _, k := range keys[0] {
		types = append(types, k.PublicKey().Type())
	}
	if len(types) != 2 || types[0] != ssh.KeyAlgoED25519 || types[1] != ssh.KeyAlgoRSA {
		t.Errorf("key types %v, want ed25519 and rsa", types)
	}
	if rk, ok := keys[0][1].PublicKey().(ssh.CryptoPublicKey).CryptoPublicKey().(*rsa.PublicKey); !ok || rk.N.BitLen() != hostKeyRSABits {
		t.Errorf("rsa host key is not %d bits", hostKeyRSABits)
	}

	again, generated, err := loadHostKeys(ctx, db)
	if err != nil || generated || !sameKeys(again, keys[0]) {
		t.Errorf("restart: generated=%v err=%v same=%v", generated, err, sameKeys(again, keys[0]))
	}
}

func TestParseHostKeysRefusesDamage(t *testing.T) {
	for name, text := range map[string]string{
		"empty":   "",
		"garbage": "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEga2V5\n-----END OPENSSH PRIVATE KEY-----\n",
	} {
		if _, err := parseHostKeys(text); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func sameKeys(a, b []ssh.Signer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].PublicKey().Marshal(), b[i].PublicKey().Marshal()) {
			return false
		}
	}
	return true
}
