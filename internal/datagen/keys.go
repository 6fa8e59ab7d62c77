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
)

// Load users' SSH keys, for the lab's SSH scripts. Each load user gets one
// Ed25519 key, registered as a user key and kept in a keys file (mode
// 0600, "name base64-seed" lines) next to the tokens file. The keys are
// random, not derived from the data set's seed: a data set can be loaded
// into a real deployment, and a key anyone could re-derive would be a
// back door into every generated project. Caching them keeps re-runs
// idempotent (the importer registers a key only if the node lacks it) and
// costs nothing to regenerate when lost.

// loadUserKeys gives every load user a key: new ones are generated and
// kept, and every key is in the file, since the importer skips a key
// whose fingerprint the node knows.
func (g *gen) loadUserKeys(context.Context) error {
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
		if err := g.emit(keyRec{Type: "ssh_key", User: name, Label: "e3 load",
			PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))}); err != nil {
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
