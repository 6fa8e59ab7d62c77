package repo

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// The read helpers below serve the REST API. Each one is bounded: pages are
// capped at MaxPageLimit, listings at fixed entry counts, and every command's
// output at maxMetadataOutput, so no request can make the server hold an
// unbounded amount of git output. User values are validated (validRev,
// cleanPath, cleanPrefix), revisions are resolved to object ids first, and
// only object ids and validated paths reach the git commands that do the
// work.
//
// Object ids a user names directly are only honoured in a fork when they
// are reachable from the fork's own refs: the fork can read its parent's
// objects through alternates, but must not show them (see the package
// comment).

// MaxPageLimit is the largest page any listing returns, as in Bitbucket's
// REST API.
const MaxPageLimit = 1000

// maxTreeEntries bounds one directory listing. Git allows more; no
// directory a person browses has that many entries.
const maxTreeEntries = 100_000

// Ref is a branch or a tag.
type Ref struct {
	Name         string // full name: refs/heads/main
	DisplayID    string // short name: main
	LatestCommit string // the commit the ref points at, tags peeled
	IsDefault    bool   // the branch HEAD points at
}

// Signature is who made a commit and when.
type Signature struct {
	Name  string
	Email string
	Time  time.Time // in the author's or committer's own time zone
}

// Commit is a commit's metadata.
type Commit struct {
	ID        string
	DisplayID string // abbreviated ID
	Parents   []string
	Author    Signature
	Committer Signature
	Message   string
}

// TreeEntry is one entry of a directory listing.
type TreeEntry struct {
	Path string // name relative to the listed directory
	Type string // "FILE", "DIRECTORY" or "SUBMODULE"
	Mode string // git mode, e.g. "100644", "100755", "120000", "040000"
	Size int64  // blob size; -1 for directories and submodules
	ID   string // object id (the submodule's commit for SUBMODULE)
}

// FileStat is one file of a diff stat.
type FileStat struct {
	Path    string
	OldPath string // set when the file was renamed or copied
	Added   int
	Deleted int
	Binary  bool
}

// displayLen is the length of abbreviated ids, as Bitbucket shows them.
const displayLen = 11

func checkPage(start, limit int) error {
	if start < 0 || limit <= 0 || limit > MaxPageLimit {
		return problem.New(problem.Invalid, "invalid page: start %d, limit %d (limit must be 1 to %d)", start, limit, MaxPageLimit)
	}
	return nil
}

// dir returns the path of repository id after checking it exists.
func (m *Manager) dir(id int64) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	if !m.Exists(id) {
		return "", problem.New(problem.NotFound, "repository %d not found", id)
	}
	return m.Path(id), nil
}

// object looks spec up through gitcmd's pool of cat-file processes; the
// spec travels on the process's stdin, never on a command line. found is
// false for a missing or ambiguous name.
func (m *Manager) object(ctx context.Context, dir, spec string) (oid, typ string, size int64, found bool, err error) {
	cf, release, err := m.git.CatFile(ctx, dir)
	if err != nil {
		return "", "", 0, false, fmt.Errorf("look up object: %w", err)
	}
	defer release()
	info, err := cf.Info(spec)
	if errors.Is(err, gitcmd.ErrObjectNotFound) {
		return "", "", 0, false, nil
	}
	if err != nil {
		return "", "", 0, false, fmt.Errorf("look up object: %w", err)
	}
	return info.OID, info.Type, info.Size, true, nil
}

// resolve turns a user's revision into a commit id. In a fork, a raw object
// id must be reachable from the fork's own refs.
func (m *Manager) resolve(ctx context.Context, dir, rev string) (string, error) {
	if err := checkRev(rev); err != nil {
		return "", err
	}
	oid, _, _, found, err := m.object(ctx, dir, rev+"^{commit}")
	if err != nil {
		return "", err
	}
	if !found {
		return "", problem.New(problem.NotFound, "revision %q not found", rev)
	}
	if isHex(rev, 4, 64) && hasAlternates(dir) {
		ok, err := m.reachable(ctx, dir, oid)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", problem.New(problem.NotFound, "revision %q not found", rev)
		}
	}
	return oid, nil
}

// ResolveCommit returns the id of the commit rev names. rev is an object id
// (full or abbreviated), HEAD, or a ref name; NotFound if it names nothing.
func (m *Manager) ResolveCommit(ctx context.Context, id int64, rev string) (string, error) {
	dir, err := m.dir(id)
	if err != nil {
		return "", err
	}
	return m.resolve(ctx, dir, rev)
}

// DefaultBranch returns the branch HEAD points at ("main"), "" if HEAD is
// detached. The branch need not exist yet.
func (m *Manager) DefaultBranch(ctx context.Context, id int64) (string, error) {
	dir, err := m.dir(id)
	if err != nil {
		return "", err
	}
	return m.symbolicHead(ctx, dir)
}

// forEachRef runs for-each-ref with a server-chosen format over the given
// patterns and returns the raw output.
func (m *Manager) forEachRef(ctx context.Context, dir, format string, patterns ...string) ([]byte, error) {
	return m.output(ctx, gitcmd.Cmd{Dir: dir, Name: "for-each-ref", Flags: []string{"--format=" + format}, Args: patterns})
}

// Refs lists branches (kind "heads") or tags (kind "tags") whose short name
// contains filter (case-insensitively), sorted by name, and returns the page
// [start, start+limit) and the number of matches.
func (m *Manager) Refs(ctx context.Context, id int64, kind, filter string, start, limit int) ([]Ref, int, error) {
	return m.RefsOrdered(ctx, id, kind, filter, OrderByName, start, limit)
}

// RefsOrdered is Refs in the given order.
func (m *Manager) RefsOrdered(ctx context.Context, id int64, kind, filter string, order RefOrder, start, limit int) ([]Ref, int, error) {
	if kind != "heads" && kind != "tags" {
		return nil, 0, problem.New(problem.Invalid, "invalid ref kind %q", kind)
	}
	if err := checkPage(start, limit); err != nil {
		return nil, 0, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, 0, err
	}
	head, err := m.symbolicHead(ctx, dir)
	if err != nil {
		return nil, 0, err
	}
	prefix := "refs/" + kind + "/"
	filter = strings.ToLower(filter)
	var refs []Ref
	total := 0
	// Filtering happens here, streaming, because for-each-ref patterns
	// match prefixes and globs, not substrings; only the page is kept.
	err = m.scan(ctx, gitcmd.Cmd{
		Dir:   dir,
		Name:  "for-each-ref",
		Flags: append(order.sortFlags(), "--format=%(refname)%00%(objectname)%00%(*objectname)"),
		Args:  []string{prefix},
	}, func(r *bufio.Reader) error {
		for {
			line, err := r.ReadString('\n')
			if err == io.EOF && line == "" {
				return nil
			}
			if err != nil && err != io.EOF {
				return err
			}
			f := strings.Split(strings.TrimSuffix(line, "\n"), "\x00")
			if len(f) != 3 {
				return fmt.Errorf("read refs: unexpected line %q", line)
			}
			short := strings.TrimPrefix(f[0], prefix)
			if filter != "" && !strings.Contains(strings.ToLower(short), filter) {
				continue
			}
			total++
			if total <= start || len(refs) >= limit {
				continue
			}
			commit := f[1]
			if f[2] != "" {
				commit = f[2] // an annotated tag: show the tagged commit
			}
			refs = append(refs, Ref{
				Name:         f[0],
				DisplayID:    short,
				LatestCommit: commit,
				IsDefault:    kind == "heads" && short == head,
			})
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read refs: %w", err)
	}
	return refs, total, nil
}

// logFormat prints the fields of Commit, each terminated by NUL; a commit
// message cannot contain NUL, so the fields cannot be confused. With
// tformat, git adds a newline after each commit.
const logFormat = "--format=tformat:%H%x00%P%x00%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd%x00%B%x00"

// logCommits runs git log with the given flags and revisions and parses
// at most limit commits.
func (m *Manager) logCommits(ctx context.Context, dir string, flags, args, paths []string, limit int) ([]Commit, error) {
	cmd := gitcmd.Cmd{
		Dir:   dir,
		Name:  "log",
		Flags: append([]string{logFormat, "--date=raw", "--no-color"}, flags...),
		Args:  args,
		Paths: paths,
	}
	commits := []Commit{}
	err := m.scan(ctx, cmd, func(r *bufio.Reader) error {
		for len(commits) < limit {
			c, err := readCommit(r)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			commits = append(commits, c)
		}
		return errEnough
	})
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	return commits, nil
}

func readCommit(r *bufio.Reader) (Commit, error) {
	var f [9]string
	for i := range f {
		s, err := r.ReadString(0)
		if err != nil {
			if i == 0 && err == io.EOF && strings.TrimSpace(s) == "" {
				return Commit{}, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Commit{}, err
		}
		f[i] = strings.TrimSuffix(s, "\x00")
	}
	f[0] = strings.TrimPrefix(f[0], "\n") // tformat's separator
	c := Commit{
		ID:        f[0],
		DisplayID: f[0][:min(displayLen, len(f[0]))],
		Parents:   strings.Fields(f[1]),
		Author:    Signature{Name: f[2], Email: f[3], Time: parseRawDate(f[4])},
		Committer: Signature{Name: f[5], Email: f[6], Time: parseRawDate(f[7])},
		Message:   f[8],
	}
	if c.Parents == nil {
		c.Parents = []string{}
	}
	if !validOID(c.ID) {
		return Commit{}, fmt.Errorf("unexpected log output %q", f[0])
	}
	return c, nil
}

// parseRawDate parses git's raw date, "1700000000 +0100".
func parseRawDate(s string) time.Time {
	secs, zone, _ := strings.Cut(s, " ")
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}
	}
	t := time.Unix(n, 0)
	if len(zone) == 5 && (zone[0] == '+' || zone[0] == '-') {
		hh, err1 := strconv.Atoi(zone[1:3])
		mm, err2 := strconv.Atoi(zone[3:5])
		if err1 == nil && err2 == nil {
			off := hh*3600 + mm*60
			if zone[0] == '-' {
				off = -off
			}
			return t.In(time.FixedZone(zone, off))
		}
	}
	return t.UTC()
}

// Log lists the commits reachable from rev, newest first, touching path if
// path is not empty, skipping start and returning at most limit.
func (m *Manager) Log(ctx context.Context, id int64, rev, path string, start, limit int) ([]Commit, error) {
	if err := checkPage(start, limit); err != nil {
		return nil, err
	}
	path, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, err
	}
	sha, err := m.resolve(ctx, dir, rev)
	if err != nil {
		return nil, err
	}
	var paths []string
	if path != "" {
		paths = []string{path}
	}
	return m.logCommits(ctx, dir, pageFlags(start, limit), []string{sha}, paths, limit)
}

func pageFlags(start, limit int) []string {
	return []string{"--skip=" + strconv.Itoa(start), "--max-count=" + strconv.Itoa(limit)}
}

// Commit returns the commit rev names.
func (m *Manager) Commit(ctx context.Context, id int64, rev string) (*Commit, error) {
	dir, err := m.dir(id)
	if err != nil {
		return nil, err
	}
	sha, err := m.resolve(ctx, dir, rev)
	if err != nil {
		return nil, err
	}
	commits, err := m.logCommits(ctx, dir, []string{"--max-count=1"}, []string{sha}, nil, 1)
	if err != nil {
		return nil, err
	}
	if len(commits) != 1 {
		return nil, fmt.Errorf("read commit %s: no output", sha)
	}
	return &commits[0], nil
}

// Compare lists the commits reachable from to but not from from, newest
// first: what merging to into from would bring.
func (m *Manager) Compare(ctx context.Context, id int64, from, to string, start, limit int) ([]Commit, error) {
	if err := checkPage(start, limit); err != nil {
		return nil, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, err
	}
	fromSHA, err := m.resolve(ctx, dir, from)
	if err != nil {
		return nil, err
	}
	toSHA, err := m.resolve(ctx, dir, to)
	if err != nil {
		return nil, err
	}
	return m.logCommits(ctx, dir, pageFlags(start, limit), []string{toSHA, "^" + fromSHA}, nil, limit)
}

// treeish resolves rev and path to an object, reporting a missing path as
// NotFound.
func (m *Manager) treeish(ctx context.Context, dir, rev, path string) (oid, typ string, size int64, err error) {
	sha, err := m.resolve(ctx, dir, rev)
	if err != nil {
		return "", "", 0, err
	}
	spec := sha + "^{tree}"
	if path != "" {
		spec = sha + ":" + path
	}
	oid, typ, size, found, err := m.object(ctx, dir, spec)
	if err != nil {
		return "", "", 0, err
	}
	if !found {
		return "", "", 0, problem.New(problem.NotFound, "path %q not found at %q", path, rev)
	}
	return oid, typ, size, nil
}

// Tree lists the directory at path ("" for the root) in rev.
func (m *Manager) Tree(ctx context.Context, id int64, rev, path string) ([]TreeEntry, error) {
	path, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, err
	}
	oid, typ, _, err := m.treeish(ctx, dir, rev, path)
	if err != nil {
		return nil, err
	}
	if typ != "tree" {
		return nil, problem.New(problem.Invalid, "path %q is not a directory at %q", path, rev)
	}
	entries := []TreeEntry{}
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "ls-tree", Flags: []string{"-z", "--long"}, Args: []string{oid}},
		func(r *bufio.Reader) error {
			for {
				rec, err := r.ReadString(0)
				if err == io.EOF && rec == "" {
					return nil
				}
				if err != nil {
					return err
				}
				if len(entries) == maxTreeEntries {
					return problem.New(problem.TooLarge, "directory %q has more than %d entries", path, maxTreeEntries)
				}
				e, err := parseTreeEntry(strings.TrimSuffix(rec, "\x00"))
				if err != nil {
					return err
				}
				entries = append(entries, e)
			}
		})
	if err != nil {
		return nil, fmt.Errorf("list tree: %w", err)
	}
	return entries, nil
}

// parseTreeEntry parses "<mode> <type> <oid> <size>\t<name>" (ls-tree
// --long; the size is right-aligned and "-" for trees and submodules).
func parseTreeEntry(rec string) (TreeEntry, error) {
	meta, name, ok := strings.Cut(rec, "\t")
	f := strings.Fields(meta)
	if !ok || len(f) != 4 || name == "" {
		return TreeEntry{}, fmt.Errorf("unexpected ls-tree output %q", rec)
	}
	e := TreeEntry{Path: name, Mode: f[0], ID: f[2], Size: -1}
	switch f[1] {
	case "blob":
		e.Type = "FILE"
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return TreeEntry{}, fmt.Errorf("unexpected ls-tree size %q", f[3])
		}
		e.Size = n
	case "tree":
		e.Type = "DIRECTORY"
	case "commit":
		e.Type = "SUBMODULE"
	default:
		return TreeEntry{}, fmt.Errorf("unexpected ls-tree type %q", f[1])
	}
	return e, nil
}

// blob resolves rev:path to a blob.
func (m *Manager) blob(ctx context.Context, id int64, rev, path string) (dir, oid string, size int64, err error) {
	path, err = cleanPath(path)
	if err != nil {
		return "", "", 0, err
	}
	if path == "" {
		return "", "", 0, problem.New(problem.Invalid, "a file path is required")
	}
	if dir, err = m.dir(id); err != nil {
		return "", "", 0, err
	}
	oid, typ, size, err := m.treeish(ctx, dir, rev, path)
	if err != nil {
		return "", "", 0, err
	}
	if typ != "blob" {
		return "", "", 0, problem.New(problem.Invalid, "path %q is not a file at %q", path, rev)
	}
	return dir, oid, size, nil
}

// Blob returns at most maxBytes of the file at path in rev, the file's full
// size, and whether the data was cut short.
func (m *Manager) Blob(ctx context.Context, id int64, rev, path string, maxBytes int64) (data []byte, size int64, truncated bool, err error) {
	// Blob is for previews held in memory; WriteBlob streams files of any
	// size.
	if maxBytes < 0 || maxBytes > maxMetadataOutput {
		return nil, 0, false, problem.New(problem.Invalid, "invalid size limit %d", maxBytes)
	}
	dir, oid, size, err := m.blob(ctx, id, rev, path)
	if err != nil {
		return nil, 0, false, err
	}
	if size <= maxBytes {
		cf, release, err := m.git.CatFile(ctx, dir)
		if err != nil {
			return nil, 0, false, fmt.Errorf("read blob: %w", err)
		}
		defer release()
		_, data, err := cf.Contents(oid, maxBytes)
		if err != nil {
			return nil, 0, false, fmt.Errorf("read blob: %w", err)
		}
		return data, size, false, nil
	}
	// A preview of a bigger file: read the head and stop git.
	buf := bytes.NewBuffer(make([]byte, 0, maxBytes))
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "cat-file", Args: []string{"blob", oid}}, func(r *bufio.Reader) error {
		if _, err := io.CopyN(buf, r, maxBytes); err != nil {
			return err
		}
		return errEnough
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("read blob: %w", err)
	}
	return buf.Bytes(), size, true, nil
}

// WriteBlob streams the whole file at path in rev to w.
func (m *Manager) WriteBlob(ctx context.Context, id int64, rev, path string, w io.Writer) error {
	dir, oid, _, err := m.blob(ctx, id, rev, path)
	if err != nil {
		return err
	}
	if err := m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "cat-file", Args: []string{"blob", oid}, Stdout: w}); err != nil {
		return fmt.Errorf("read blob: %w", err)
	}
	return nil
}

// emptyTree returns the id of the empty tree in the object format whose
// ids are as long as oid. Git knows this object without storing it.
func emptyTree(oid string) string {
	if len(oid) == 64 {
		return "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
	}
	return "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
}

// diffEnds resolves the two sides of a diff. An empty from means to's
// first parent, or the empty tree for a root commit.
func (m *Manager) diffEnds(ctx context.Context, dir, from, to string) (string, string, error) {
	toSHA, err := m.resolve(ctx, dir, to)
	if err != nil {
		return "", "", err
	}
	if from != "" {
		fromSHA, err := m.resolve(ctx, dir, from)
		return fromSHA, toSHA, err
	}
	commits, err := m.logCommits(ctx, dir, []string{"--max-count=1"}, []string{toSHA}, nil, 1)
	if err != nil {
		return "", "", err
	}
	if len(commits) == 1 && len(commits[0].Parents) > 0 {
		return commits[0].Parents[0], toSHA, nil
	}
	return emptyTree(toSHA), toSHA, nil
}

// DiffStat lists at most limit files that differ between from and to (from
// empty: to's first parent), with renames detected, and whether there were
// more.
func (m *Manager) DiffStat(ctx context.Context, id int64, from, to string, limit int) ([]FileStat, bool, error) {
	if err := checkPage(0, limit); err != nil {
		return nil, false, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, false, err
	}
	fromSHA, toSHA, err := m.diffEnds(ctx, dir, from, to)
	if err != nil {
		return nil, false, err
	}
	stats := []FileStat{}
	truncated := false
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree", Flags: []string{"-r", "-z", "--numstat", "-M", "--no-color"}, Args: []string{fromSHA, toSHA}},
		func(r *bufio.Reader) error {
			for {
				// "<added>\t<deleted>\t<path>\0", or for a rename
				// "<added>\t<deleted>\t\0<old>\0<new>\0".
				rec, err := r.ReadString(0)
				if err == io.EOF && rec == "" {
					return nil
				}
				if err != nil {
					return err
				}
				if len(stats) == limit {
					truncated = true
					return errEnough
				}
				f := strings.SplitN(strings.TrimSuffix(rec, "\x00"), "\t", 3)
				if len(f) != 3 {
					return fmt.Errorf("unexpected numstat output %q", rec)
				}
				st := FileStat{Path: f[2]}
				if f[0] == "-" && f[1] == "-" {
					st.Binary = true
				} else {
					st.Added, _ = strconv.Atoi(f[0])
					st.Deleted, _ = strconv.Atoi(f[1])
				}
				if st.Path == "" {
					old, err1 := r.ReadString(0)
					path, err2 := r.ReadString(0)
					if err := errors.Join(err1, err2); err != nil {
						return err
					}
					st.OldPath = strings.TrimSuffix(old, "\x00")
					st.Path = strings.TrimSuffix(path, "\x00")
				}
				stats = append(stats, st)
			}
		})
	if err != nil {
		return nil, false, fmt.Errorf("diff stat: %w", err)
	}
	return stats, truncated, nil
}

// Diff returns at most maxBytes of the unified diff between from and to
// (from empty: to's first parent), limited to path if not empty, and
// whether it was cut short.
func (m *Manager) Diff(ctx context.Context, id int64, from, to, path string, maxBytes int64) ([]byte, bool, error) {
	// One byte under the output cap, so that reading one byte past
	// maxBytes (to tell a cut diff) never trips the cap itself.
	if maxBytes <= 0 || maxBytes >= maxMetadataOutput {
		return nil, false, problem.New(problem.Invalid, "invalid size limit %d", maxBytes)
	}
	path, err := cleanPath(path)
	if err != nil {
		return nil, false, err
	}
	dir, err := m.dir(id)
	if err != nil {
		return nil, false, err
	}
	fromSHA, toSHA, err := m.diffEnds(ctx, dir, from, to)
	if err != nil {
		return nil, false, err
	}
	var paths []string
	if path != "" {
		paths = []string{path}
	}
	var out []byte
	truncated := false
	err = m.scan(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree", Flags: []string{"-r", "-p", "-M", "--no-color"}, Args: []string{fromSHA, toSHA}, Paths: paths},
		func(r *bufio.Reader) error {
			var err error
			out, err = io.ReadAll(io.LimitReader(r, maxBytes+1))
			if err != nil {
				return err
			}
			if int64(len(out)) > maxBytes {
				out, truncated = out[:maxBytes], true
				return errEnough
			}
			return nil
		})
	if err != nil {
		return nil, false, fmt.Errorf("diff: %w", err)
	}
	return out, truncated, nil
}

// Archive writes rev's tree as an archive in format ("zip", "tar", "tar.gz"
// or "tgz") to w, every entry under prefix (a relative directory; "/" is
// appended if missing).
func (m *Manager) Archive(ctx context.Context, id int64, rev, format, prefix string, w io.Writer) error {
	var gitFormat string
	gz := false
	switch format {
	case "zip", "tar":
		gitFormat = format
	case "tar.gz", "tgz":
		// Compressed here rather than by git's archive.tgz.command, so the
		// result does not depend on the server's git configuration.
		gitFormat, gz = "tar", true
	default:
		return problem.New(problem.Invalid, "invalid archive format %q", format)
	}
	prefix, err := cleanPrefix(prefix)
	if err != nil {
		return err
	}
	dir, err := m.dir(id)
	if err != nil {
		return err
	}
	sha, err := m.resolve(ctx, dir, rev)
	if err != nil {
		return err
	}
	flags := []string{"--format=" + gitFormat}
	if prefix != "" {
		// The prefix is a user value inside a server-chosen option. It is
		// glued to "--prefix=", so it can never be read as an option of
		// its own, and cleanPrefix allows no control bytes, no leading "-"
		// or "/" and no "..".
		flags = append(flags, "--prefix="+prefix)
	}
	out := w
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(w)
		out = zw
	}
	if err := m.git.Run(ctx, gitcmd.Cmd{Dir: dir, Name: "archive", Flags: flags, Args: []string{sha}, Stdout: out}); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
	}
	return nil
}

// IsReachable reports whether commit sha is reachable from the repository's
// own refs. It must hold before a fork serves an object a user named by id:
// the fork can read every object of its parent through alternates.
func (m *Manager) IsReachable(ctx context.Context, id int64, sha string) (bool, error) {
	if !validOID(sha) {
		return false, problem.New(problem.Invalid, "invalid commit id %q", sha)
	}
	dir, err := m.dir(id)
	if err != nil {
		return false, err
	}
	oid, _, _, found, err := m.object(ctx, dir, sha+"^{commit}")
	if err != nil || !found {
		return false, err
	}
	return m.reachable(ctx, dir, oid)
}

// reachable asks rev-list for the commits reachable from oid but from no
// ref ("oid --not --all"), stopping at the first: none means reachable.
// "Own refs" are branches, tags and the like, not refs/pull-requests/*:
// those hold commits fetched from forks (and preview merges) that the
// repository's readers have not been shown through its history, so they
// are served through the pull request's own endpoints and never by id
// through the commit, raw or diff APIs. The
// walk stops as soon as every path from oid meets history a ref reaches, so
// for a commit on or near a branch it touches a handful of commits (fewer
// still with a commit-graph's generation numbers), where for-each-ref
// --contains or merge-base per ref would walk once per ref. The trailing
// --not flips the sense back so that oid, which must come after
// --end-of-options, counts as positive.
func (m *Manager) reachable(ctx context.Context, dir, oid string) (bool, error) {
	flags := []string{"--max-count=1", "--not"}
	for _, p := range gitcmd.ServerRefs {
		flags = append(flags, "--exclude="+p+"/*")
	}
	out, err := m.output(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: append(flags, "--all", "--not"), Args: []string{oid}})
	if err != nil {
		return false, fmt.Errorf("check reachability: %w", err)
	}
	return len(bytes.TrimSpace(out)) == 0, nil
}
