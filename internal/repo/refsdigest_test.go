package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRefsDigest(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest := func() string {
		t.Helper()
		d, err := refsDigest(dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	write("HEAD", "ref: refs/heads/main\n")
	write("refs/heads/main", "1111111111111111111111111111111111111111\n")
	first := digest()
	if again := digest(); again != first {
		t.Fatalf("digest of unchanged refs changed: %s, %s", first, again)
	}
	write("refs/heads/main.lock", "2222222222222222222222222222222222222222\n")
	if d := digest(); d != first {
		t.Error("a lock file changed the digest")
	}
	for _, tc := range []struct{ name, content string }{
		{"refs/heads/main", "2222222222222222222222222222222222222222\n"},
		{"refs/tags/v1", "2222222222222222222222222222222222222222\n"},
		{"packed-refs", "3333333333333333333333333333333333333333 refs/heads/old\n"},
		{"HEAD", "ref: refs/heads/other\n"},
	} {
		before := digest()
		write(tc.name, tc.content)
		if digest() == before {
			t.Errorf("writing %s left the digest unchanged", tc.name)
		}
	}
	if _, err := refsDigest(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing repository has a digest")
	}
}
