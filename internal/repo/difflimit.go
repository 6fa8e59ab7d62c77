package repo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/gitcmd"
)

// maxSizePathspecs bounds the pathspecs DiffTooLarge passes to git.
const maxSizePathspecs = 256

// MaxDiffBlobSize is the size over which a file is not diffed
// (git.max_diff_blob_size; 0: no limit).
func (m *Manager) MaxDiffBlobSize() int64 { return m.git.MaxDiffBlobSize() }

// DiffTooLarge reports, among the files that differ between from and to
// (from empty: to's first parent) limited to paths, those whose old or new
// blob is over MaxDiffBlobSize, keyed by both their old and new name, with
// the bigger side's size. Git shows such a file as binary without reading
// it, and a caller that only saw "Binary files differ" could not tell a
// picture from a file it was not allowed to diff. Only sizes are read
// (cat-file --batch-check), never the blobs; paths should be the binary
// files of a diff, so that an ordinary diff costs nothing here.
func (m *Manager) DiffTooLarge(ctx context.Context, id int64, from, to string, paths []string) (map[string]int64, error) {
	limit := m.git.MaxDiffBlobSize()
	if limit <= 0 || len(paths) == 0 {
		return nil, nil
	}
	// The names come from git's own diff output, so they are not checked
	// as a user's path would be; only what cannot be a pathspec is left
	// out. Past a few hundred names the whole diff is listed instead of
	// a command line that long.
	var specs []string
	for _, p := range paths {
		if p != "" && !strings.Contains(p, "\x00") {
			specs = append(specs, p)
		}
	}
	if len(specs) == 0 {
		return nil, nil
	}
	if len(specs) > maxSizePathspecs {
		specs = nil
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, err
	}
	fromSHA, toSHA, err := m.diffEnds(ctx, dir, from, to)
	if err != nil {
		return nil, err
	}
	type change struct {
		blobs []string
		names []string
	}
	var changes []change
	// -M like Diff, so that a renamed file is paired the same way; both
	// names of a rename are among paths when the caller passes what the
	// diff showed.
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree", Flags: []string{"-r", "-z", "-M", "--raw", "--no-color"}, Args: []string{fromSHA, toSHA}, Paths: specs},
		func(r *bufio.Reader) error {
			for {
				// ":<old mode> <new mode> <old id> <new id> <status>\0<path>\0",
				// with a second path for a rename or copy.
				rec, err := r.ReadString(0)
				if err == io.EOF && rec == "" {
					return nil
				}
				if err != nil {
					return err
				}
				f := strings.Fields(strings.TrimSuffix(rec, "\x00"))
				if len(f) != 5 || !strings.HasPrefix(f[0], ":") {
					return fmt.Errorf("unexpected raw diff output %q", rec)
				}
				c := change{}
				for _, oid := range f[2:4] {
					if validOID(oid) && strings.Trim(oid, "0") != "" {
						c.blobs = append(c.blobs, oid)
					}
				}
				n := 1
				if s := f[4][0]; s == 'R' || s == 'C' {
					n = 2
				}
				for range n {
					p, err := r.ReadString(0)
					if err != nil {
						return err
					}
					c.names = append(c.names, strings.TrimSuffix(p, "\x00"))
				}
				changes = append(changes, c)
			}
		})
	if err != nil {
		return nil, fmt.Errorf("diff sizes: %w", err)
	}
	var ids strings.Builder
	for _, c := range changes {
		for _, b := range c.blobs {
			ids.WriteString(b + "\n")
		}
	}
	if ids.Len() == 0 {
		return nil, nil
	}
	sizes := map[string]int64{}
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "cat-file", Flags: []string{"--batch-check=%(objectname) %(objectsize)"}, Stdin: strings.NewReader(ids.String())},
		func(r *bufio.Reader) error {
			for {
				line, err := r.ReadString('\n')
				// A submodule's commit id is "missing" here: it has no size.
				if f := strings.Fields(line); len(f) == 2 {
					if n, perr := strconv.ParseInt(f[1], 10, 64); perr == nil {
						sizes[f[0]] = n
					}
				}
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
			}
		})
	if err != nil {
		return nil, fmt.Errorf("diff sizes: %w", err)
	}
	var big map[string]int64
	for _, c := range changes {
		var most int64
		for _, b := range c.blobs {
			most = max(most, sizes[b])
		}
		if most <= limit {
			continue
		}
		if big == nil {
			big = map[string]int64{}
		}
		for _, name := range c.names {
			big[name] = most
		}
	}
	return big, nil
}
