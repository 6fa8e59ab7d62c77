package sshd

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// HostKeysSetting is the store setting that holds the host keys: the
// private keys as OpenSSH PEM blocks, one after the other.
const HostKeysSetting = "ssh.host_keys"

// hostKeyRSABits is the size of the RSA host key kept for clients without
// ed25519. 3072 bits is what ssh-keygen generates by default since
// OpenSSH 8.0 (and NIST SP 800-57's 128-bit security level).
const hostKeyRSABits = 3072

// loadHostKeys returns the cluster's host keys, generating and storing them
// on first start. Every node reads the same setting, so the fingerprint a
// client pins is the same on every node and after every restart; nodes
// starting at once all generate, exactly one PutSettingIfAbsent wins, and
// every node then uses the winner's keys.
func loadHostKeys(ctx context.Context, st store.Store) (keys []ssh.Signer, generated bool, err error) {
	v, err := st.GetSetting(ctx, HostKeysSetting)
	if err == nil {
		keys, err := parseHostKeys(v)
		return keys, false, err
	}
	if !problem.Is(err, problem.NotFound) {
		return nil, false, fmt.Errorf("read host keys: %w", err)
	}
	pemText, err := generateHostKeys()
	if err != nil {
		return nil, false, err
	}
	stored, err := st.PutSettingIfAbsent(ctx, HostKeysSetting, pemText)
	if err != nil {
		return nil, false, fmt.Errorf("store host keys: %w", err)
	}
	if !stored {
		// Another node won the race: use its keys, not ours.
		if pemText, err = st.GetSetting(ctx, HostKeysSetting); err != nil {
			return nil, false, fmt.Errorf("read host keys: %w", err)
		}
	}
	keys, err = parseHostKeys(pemText)
	return keys, stored, err
}

func generateHostKeys() (string, error) {
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate ed25519 host key: %w", err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, hostKeyRSABits)
	if err != nil {
		return "", fmt.Errorf("generate rsa host key: %w", err)
	}
	var b strings.Builder
	for _, k := range []crypto.PrivateKey{edKey, rsaKey} {
		block, err := ssh.MarshalPrivateKey(k, "sluice host key")
		if err != nil {
			return "", fmt.Errorf("encode host key: %w", err)
		}
		b.Write(pem.EncodeToMemory(block))
	}
	return b.String(), nil
}

// parseHostKeys reads the setting's PEM blocks. A setting without an
// ed25519 key is refused: every modern client prefers one, and silently
// serving a different key set than the other nodes would make clients
// see a changed host key.
func parseHostKeys(text string) ([]ssh.Signer, error) {
	var keys []ssh.Signer
	rest := []byte(text)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		signer, err := ssh.ParsePrivateKey(pem.EncodeToMemory(block))
		if err != nil {
			return nil, fmt.Errorf("parse host key from setting %q: %w", HostKeysSetting, err)
		}
		keys = append(keys, signer)
	}
	hasEd := false
	for _, k := range keys {
		hasEd = hasEd || k.PublicKey().Type() == ssh.KeyAlgoED25519
	}
	if !hasEd {
		return nil, fmt.Errorf("setting %q holds no ed25519 host key", HostKeysSetting)
	}
	return keys, nil
}
