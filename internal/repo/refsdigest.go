package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// RefsDigest returns a digest of repository id's refs as the ref files
// hold them now: HEAD, packed-refs and every loose ref under refs/, names
// and contents, read without starting git. It is what the pack cache
// compares when the database cannot give it the refs generation (an
// outage): equal digests mean equal refs. The converse does not hold —
// packing refs changes the files and the digest but not the refs — which
// errs on the safe side: a cache entry is then not served, never served
// stale. A ref file being replaced while it is read gives a digest no
// entry has, the same safe way.
func (m *Manager) RefsDigest(id int64) (string, error) {
	return refsDigest(m.Path(id))
}

func refsDigest(dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"HEAD", "packed-refs"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !(name == "packed-refs" && errors.Is(err, fs.ErrNotExist)) {
			return "", fmt.Errorf("read %s: %w", name, err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	// WalkDir visits names in lexical order, so the digest does not
	// depend on the order the directory lists them in.
	err := filepath.WalkDir(filepath.Join(dir, "refs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.HasSuffix(d.Name(), ".lock") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read refs: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
