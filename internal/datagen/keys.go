package datagen

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Load users' SSH keys, for the lab's SSH scripts. Each load user gets one
// Ed25519 key, registered as a user key and kept in a keys file (mode
// 0600, "name base64-seed" lines) next to the tokens file. The keys are
// random, not derived from the data set's seed: a data set can be loaded
// into a real deployment, and a key anyone could re-derive would be a
// back door into every generated project. Caching them keeps re-runs
// idempotent (a key already in the file is re-registered only if the
// database lost it) and costs nothing to regenerate when lost.

// loadUserKeys gives every load user a registered key.
func (g *gen) loadUserKeys(ctx context.Context) error {
	if g.o.LoadUsers == 0 || g.o.KeysFile == "" {
		return nil
	}
	keys, err := readKeySeeds(g.o.KeysFile)
	if err != nil {
		return err
	}
	g.bar.stage("load users' ssh keys", g.o.LoadUsers)
	f, err := os.OpenFile(g.o.KeysFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := 1; i <= g.o.LoadUsers; i++ {
		g.bar.set(i)
		name := LoadUserName(i)
		priv, ok := keys[name]
		if !ok {
			if _, priv, err = ed25519.GenerateKey(rand.Reader); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(f, "%s %s\n", name, base64.StdEncoding.EncodeToString(priv.Seed())); err != nil {
				return err
			}
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			return err
		}
		pub := signer.PublicKey()
		fp := ssh.FingerprintSHA256(pub)
		if _, err := g.d.DB.SSHKeyByFingerprint(ctx, fp); err == nil {
			continue
		} else if problem.KindOf(err) != problem.NotFound {
			return err
		}
		u, err := g.d.DB.UserByName(ctx, name)
		if err != nil {
			return fmt.Errorf("load user %s: %w", name, err)
		}
		if err := g.d.DB.AddSSHKey(ctx, &store.SSHKey{UserID: u.ID, Label: "e3 load",
			PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))), Fingerprint: fp}); err != nil {
			return err
		}
	}
	return f.Close()
}

// readKeySeeds reads a keys file; a missing file is empty.
func readKeySeeds(path string) (map[string]ed25519.PrivateKey, error) {
	m := map[string]ed25519.PrivateKey{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, enc, ok := strings.Cut(line, " ")
		seed, err := base64.StdEncoding.DecodeString(enc)
		if !ok || err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("%s:%d: want \"name base64-seed\"", path, n+1)
		}
		m[name] = ed25519.NewKeyFromSeed(seed)
	}
	return m, nil
}

// ReadKeys returns the load users' SSH keys from a keys file, by user
// name.
func ReadKeys(path string) (map[string]ssh.Signer, error) {
	seeds, err := readKeySeeds(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ssh.Signer, len(seeds))
	for name, priv := range seeds {
		s, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, nil
}
