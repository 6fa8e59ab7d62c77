package repo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Files pages through the paths of every file below the directory path
// ("" for the root) in rev, recursively, relative to that directory and
// in git's order (bytewise by full path), as Bitbucket's files resource
// lists them. It returns at most limit paths from start and whether more
// follow. ls-tree streams, and the process is stopped once the page and
// one probe path are read, so a page near the start of a huge tree costs
// only what it shows.
func (m *Manager) Files(ctx context.Context, id int64, rev, path string, start, limit int) ([]string, bool, error) {
	if err := checkPage(start, limit); err != nil {
		return nil, false, err
	}
	path, err := cleanPath(path)
	if err != nil {
		return nil, false, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, false, err
	}
	oid, typ, _, err := m.treeish(ctx, dir, rev, path)
	if err != nil {
		return nil, false, err
	}
	if typ != "tree" {
		return nil, false, problem.New(problem.Invalid, "path %q is not a directory at %q", path, rev)
	}
	files := []string{}
	seen, more := 0, false
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "ls-tree", Flags: []string{"-r", "-z", "--name-only"}, Args: []string{oid}},
		func(r *bufio.Reader) error {
			for {
				name, err := r.ReadString(0)
				if err == io.EOF && name == "" {
					return nil
				}
				if err != nil {
					return err
				}
				seen++
				if seen <= start {
					continue
				}
				if len(files) == limit {
					more = true
					return errEnough
				}
				files = append(files, strings.TrimSuffix(name, "\x00"))
			}
		})
	if err != nil {
		return nil, false, fmt.Errorf("list files: %w", err)
	}
	return files, more, nil
}

// Tag returns the tag name ("v1.0", not refs/tags/v1.0), its commit
// peeled when annotated; NotFound when there is no such tag.
func (m *Manager) Tag(ctx context.Context, id int64, name string) (Ref, error) {
	if err := checkRev("refs/tags/" + name); err != nil || name == "" {
		return Ref{}, problem.New(problem.NotFound, "tag %q not found", name)
	}
	dir, err := m.dir(id)
	if err != nil {
		return Ref{}, err
	}
	full := "refs/tags/" + name
	// for-each-ref matches whole path components from the left, so
	// refs/tags/v1 would also list refs/tags/v1/rc; only the exact name
	// is kept.
	out, err := m.forEachRef(ctx, dir, "%(refname)%00%(objectname)%00%(*objectname)", full)
	if err != nil {
		return Ref{}, fmt.Errorf("read tag: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\x00")
		if len(f) != 3 || f[0] != full {
			continue
		}
		commit := f[1]
		if f[2] != "" {
			commit = f[2]
		}
		return Ref{Name: full, DisplayID: name, LatestCommit: commit}, nil
	}
	return Ref{}, problem.New(problem.NotFound, "tag %q not found", name)
}

// Change is one file a commit (or a range) changes, from diff-tree's raw
// record.
type Change struct {
	Path       string
	SrcPath    string // renames and copies
	Type       string // ADD, DELETE, MODIFY, MOVE or COPY, Bitbucket's names
	ContentID  string // the new blob ("" for a deletion)
	FromID     string // the old blob ("" for an addition)
	Executable bool   // the new side's mode is 100755
	SrcExec    bool   // the old side's mode is 100755
	Submodule  bool   // a gitlink
}

// Changes lists at most limit files that differ between from and to (from
// empty: to's first parent, or the empty tree for a root commit), with
// renames detected, and whether there were more.
func (m *Manager) Changes(ctx context.Context, id int64, from, to string, limit int) ([]Change, bool, error) {
	// A caller pages by asking for start+limit; the bound is a
	// directory's, as large a change as anyone reviews.
	if limit <= 0 || limit > maxTreeEntries {
		return nil, false, problem.New(problem.Invalid, "invalid limit %d (1 to %d)", limit, maxTreeEntries)
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, false, err
	}
	fromSHA, toSHA, err := m.diffEnds(ctx, dir, from, to)
	if err != nil {
		return nil, false, err
	}
	changes := []Change{}
	more := false
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree", Flags: []string{"-r", "-z", "-M", "--raw", "--no-color", "--no-abbrev"}, Args: []string{fromSHA, toSHA}},
		func(r *bufio.Reader) error {
			next := func() (string, error) {
				s, err := r.ReadString(0)
				if err == io.EOF && s != "" {
					err = io.ErrUnexpectedEOF
				}
				return strings.TrimSuffix(s, "\x00"), err
			}
			for {
				// ":<old mode> <new mode> <old id> <new id> <status>",
				// then the path, or two for R and C.
				rec, err := next()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				f := strings.Fields(strings.TrimPrefix(rec, ":"))
				if len(f) != 5 || f[4] == "" {
					return fmt.Errorf("unexpected raw diff record %q", rec)
				}
				if len(changes) == limit {
					more = true
					return errEnough
				}
				ch := Change{ContentID: f[3], FromID: f[2], Executable: f[1] == "100755", SrcExec: f[0] == "100755",
					Submodule: f[0] == "160000" || f[1] == "160000"}
				switch f[4][0] {
				case 'A':
					ch.Type, ch.FromID = "ADD", ""
				case 'D':
					ch.Type, ch.ContentID = "DELETE", ""
				case 'R':
					ch.Type = "MOVE"
				case 'C':
					ch.Type = "COPY"
				default:
					ch.Type = "MODIFY"
				}
				if ch.Type == "MOVE" || ch.Type == "COPY" {
					if ch.SrcPath, err = next(); err != nil {
						return err
					}
				}
				if ch.Path, err = next(); err != nil {
					return err
				}
				changes = append(changes, ch)
			}
		})
	if err != nil {
		return nil, false, fmt.Errorf("list changes: %w", err)
	}
	return changes, more, nil
}

// maxContaining bounds PullRequestsContaining: more pull requests than
// this holding one commit is a repository no one reviews commit by commit.
const maxContaining = 1000

// PullRequestsContaining lists the numbers of the pull requests whose
// source (refs/pull-requests/N/from) contains commit sha, an id the
// caller has resolved, at most maxContaining of them, highest first.
func (m *Manager) PullRequestsContaining(ctx context.Context, id int64, sha string) ([]int64, error) {
	if !validOID(sha) {
		return nil, problem.New(problem.Invalid, "invalid commit id %q", sha)
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, err
	}
	out, err := m.output(ctx, gitcmd.Cmd{Dir: dir, Name: "for-each-ref",
		Flags: []string{"--format=%(refname)", "--contains=" + sha}, Args: []string{"refs/pull-requests/"}})
	if err != nil {
		return nil, fmt.Errorf("pull requests containing %s: %w", sha, err)
	}
	var nums []int64
	for _, line := range strings.Split(string(out), "\n") {
		n, ok := strings.CutPrefix(line, "refs/pull-requests/")
		if n, ok = strings.CutSuffix(n, "/from"); !ok {
			continue
		}
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > 0 {
			nums = append(nums, v)
		}
	}
	slices.Sort(nums)
	slices.Reverse(nums)
	if len(nums) > maxContaining {
		nums = nums[:maxContaining]
	}
	return nums, nil
}
