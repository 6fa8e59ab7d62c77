package repo

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ReadRefFiles reads the refs of the bare repository at dir from its files,
// without starting git: packed-refs first, then the loose refs, which win.
// keep, when set, chooses refs by full name; a directory whose name it
// refuses as a prefix (keep(name+"/") false) is not walked. peeled holds
// the peeled targets packed-refs records for the kept annotated tags.
// Symbolic refs, lock files and malformed entries are left out. A ref read
// while git moves it may be missed, never invented: callers use the result
// as a fast path or on a repository nobody writes.
func ReadRefFiles(dir string, keep func(ref string) bool) (refs map[string]string, peeled []string, err error) {
	refs = map[string]string{}
	want := func(ref string) bool { return keep == nil || keep(ref) }
	data, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	switch {
	case err == nil:
		kept := false
		for _, line := range strings.Split(string(data), "\n") {
			switch {
			case line == "" || line[0] == '#':
			case line[0] == '^':
				if kept && validOID(line[1:]) {
					peeled = append(peeled, line[1:])
				}
			default:
				oid, ref, ok := strings.Cut(line, " ")
				kept = ok && validOID(oid) && want(ref)
				if kept {
					refs[ref] = oid
				}
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	}
	err = filepath.WalkDir(filepath.Join(dir, "refs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, rerr := filepath.Rel(dir, path)
		if rerr != nil {
			return nil
		}
		ref := filepath.ToSlash(rel)
		if d.IsDir() {
			if ref != "refs" && !want(ref+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(ref, ".lock") || !want(ref) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil // gone meanwhile (packed, deleted)
		}
		if oid := strings.TrimSpace(string(b)); validOID(oid) {
			refs[ref] = oid
		}
		return nil
	})
	return refs, peeled, err
}
