package pull

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Change is one file of a pull request's diff stat.
type Change struct {
	Path    string `json:"path"`
	SrcPath string `json:"srcPath,omitempty"` // renames and copies
	Type    string `json:"type"`              // ADD, DELETE, MODIFY, MOVE, COPY
	Added   int    `json:"added"`
	Deleted int    `json:"deleted"`
	Binary  bool   `json:"binary,omitempty"`
}

// Diff is a pull request's whole diff, or one file's.
type Diff struct {
	FromHash     string     `json:"fromHash"` // the merge base
	ToHash       string     `json:"toHash"`   // the source commit
	ContextLines int        `json:"contextLines"`
	Whitespace   string     `json:"whitespace"` // SHOW or IGNORE_ALL
	Files        []FileDiff `json:"diffs"`
	Truncated    bool       `json:"truncated"`
}

// defaultContextLines is git's default, the context of the stored diff.
const defaultContextLines = 3

// whitespaceName is the diff's whitespace mode as Bitbucket names it.
func whitespaceName(ignore bool) string {
	if ignore {
		return "IGNORE_ALL"
	}
	return "SHOW"
}

// FileDiff is one file of a diff, in hunks.
type FileDiff struct {
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	Binary      bool   `json:"binary"`
	Hunks       []Hunk `json:"hunks"`
	Truncated   bool   `json:"truncated"`
	// TooLarge marks a file whose old or new side is over
	// git.max_diff_blob_size: git shows it as binary without reading it,
	// and the client must be able to tell it from a picture.
	TooLarge bool `json:"tooLarge,omitempty"`
}

// fileDiffJSON is FileDiff as the API serves it: the paths are
// Bitbucket's path objects (null for the side a file does not have).
type fileDiffJSON struct {
	Source      *restPath `json:"source"`
	Destination *restPath `json:"destination"`
	Binary      bool      `json:"binary"`
	Hunks       []Hunk    `json:"hunks"`
	Truncated   bool      `json:"truncated"`
	TooLarge    bool      `json:"tooLarge,omitempty"`
}

// MarshalJSON renders the paths as Bitbucket's path objects. The Go
// value keeps plain strings, and nothing stored holds this shape: stored
// diffs are git's text, parsed again on load.
func (f FileDiff) MarshalJSON() ([]byte, error) {
	return json.Marshal(fileDiffJSON{Source: optRESTPath(f.Source), Destination: optRESTPath(f.Destination),
		Binary: f.Binary, Hunks: f.Hunks, Truncated: f.Truncated, TooLarge: f.TooLarge})
}

func optRESTPath(p string) *restPath {
	if p == "" {
		return nil
	}
	rp := toRESTPath(p)
	return &rp
}

// Hunk is one @@ section.
type Hunk struct {
	SourceLine      int       `json:"sourceLine"`
	SourceSpan      int       `json:"sourceSpan"`
	DestinationLine int       `json:"destinationLine"`
	DestinationSpan int       `json:"destinationSpan"`
	Context         string    `json:"context,omitempty"`
	Segments        []Segment `json:"segments"`
}

// Segment is a run of lines of one type: ADDED, REMOVED or CONTEXT.
type Segment struct {
	Type  string `json:"type"`
	Lines []Line `json:"lines"`
}

// Line is a line with its numbers on both sides (0 where it has none).
type Line struct {
	Source      int    `json:"source"`
	Destination int    `json:"destination"`
	Line        string `json:"line"`
}

// diffResult is a computed diff: the stat, the text cut into files, and
// the bounds hit.
type diffResult struct {
	base, from string
	changes    []Change
	truncated  bool // files, lines or bytes were cut
	text       []byte
	files      []fileText // text split per file, in order

	// The whole diff rendered as the API's JSON, made once per node on
	// first use: parsing 300 files into hunks and encoding them costs
	// more than everything else a cached read does together.
	renderOnce sync.Once
	// tooLarge names the binary files over git.max_diff_blob_size
	// (sized once per node, see sizeFiles).
	sizeOnce  sync.Once
	tooLarge  map[string]int64
	rendered  []byte
	renderErr error

	// The stat as the API's JSON, one value per file, made once per node
	// on first use: encoding 300 changes by reflection on every page read
	// cost more than the rest of the request's own work.
	changesOnce sync.Once
	changesJSON [][]byte
	changesErr  error
}

// json is the whole diff as the API serves it (encoding/json with HTML
// escaping, newline-terminated, like the API's own encoder).
func (d *diffResult) json() ([]byte, error) {
	d.renderOnce.Do(func() {
		out := &Diff{FromHash: d.base, ToHash: d.from, ContextLines: defaultContextLines, Whitespace: whitespaceName(false),
			Files: make([]FileDiff, 0, len(d.files)), Truncated: d.truncated}
		for i, f := range d.files {
			out.Files = append(out.Files, d.fileDiff(i, f))
		}
		d.rendered, d.renderErr = encodeJSON(out)
	})
	return d.rendered, d.renderErr
}

func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileDiff is file i of the diff, marked truncated when it is the last one
// of a diff that was cut: the cut falls inside or right after it, and
// nothing stored says which, so it is not shown as whole.
func (d *diffResult) fileDiff(i int, f fileText) FileDiff {
	fd := toFileDiff(f)
	fd.Truncated = d.truncated && i == len(d.files)-1
	markTooLarge(&fd, d.tooLarge)
	return fd
}

// markTooLarge flags fd when big (repo.Manager.DiffTooLarge) names it.
func markTooLarge(fd *FileDiff, big map[string]int64) {
	if !fd.Binary || len(big) == 0 {
		return
	}
	for _, p := range []string{fd.Destination, fd.Source} {
		if _, ok := big[p]; ok && p != "" {
			fd.TooLarge, fd.Truncated = true, true
			return
		}
	}
}

// binaryPaths are the paths of files that git showed as binary.
func binaryPaths(files []fileText) []string {
	var out []string
	for _, f := range files {
		if f.binary {
			for _, p := range []string{f.dst, f.src} {
				if p != "" {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// sizeFiles finds, once per node and diff, which of d's binary files are
// binary only because they are over git.max_diff_blob_size. A failure
// leaves them plain binary files: the marker is information, not a guard.
func (s *Service) sizeFiles(ctx context.Context, repoID int64, d *diffResult) {
	d.sizeOnce.Do(func() {
		paths := binaryPaths(d.files)
		if len(paths) == 0 {
			return
		}
		big, err := s.repos.DiffTooLarge(ctx, repoID, d.base, d.from, paths)
		if err != nil {
			s.logger.Warn("size binary files of a diff", "repo_id", repoID, "err", err)
			return
		}
		d.tooLarge = big
	})
}

type fileText struct {
	src, dst string
	binary   bool
	body     []byte // from "diff --git" to the next
}

// flight makes concurrent callers of one key share one computation. The
// computation runs detached from any caller's context, so the first
// caller hanging up does not fail the others.
type flight[T any] struct {
	mu    sync.Mutex
	calls map[string]*flightCall[T]
}

type flightCall[T any] struct {
	done chan struct{}
	val  T
	err  error
}

func (f *flight[T]) do(ctx context.Context, key string, fn func(context.Context) (T, error)) (val T, joined bool, err error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]*flightCall[T]{}
	}
	c, ok := f.calls[key]
	if !ok {
		c = &flightCall[T]{done: make(chan struct{})}
		f.calls[key] = c
		go func() {
			defer func() {
				f.mu.Lock()
				delete(f.calls, key)
				f.mu.Unlock()
				close(c.done)
			}()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			c.val, c.err = fn(fctx)
		}()
	}
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.val, ok, c.err
	case <-ctx.Done():
		var zero T
		return zero, ok, ctx.Err()
	}
}

// memCache keeps the most recently used parsed diffs of this node. Entries
// are keyed by commits, so they never go stale; the bound is on count.
type memCache struct {
	mu    sync.Mutex
	items map[string]*diffResult
	order []string
}

const memCacheSize = 64

func (m *memCache) get(key string) *diffResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items[key]
}

func (m *memCache) put(key string, d *diffResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.items == nil {
		m.items = map[string]*diffResult{}
	}
	if _, ok := m.items[key]; ok {
		return
	}
	if len(m.order) >= memCacheSize {
		delete(m.items, m.order[0])
		m.order = m.order[1:]
	}
	m.items[key] = d
	m.order = append(m.order, key)
}

func diffKey(pr *store.PullRequest) string {
	return fmt.Sprintf("%d:%s:%s", pr.ID, pr.BaseSHA, pr.FromSHA)
}

// diff returns the pull request's diff: from this node's memory, from the
// database, or computed now (joining a computation already running).
func (s *Service) diff(ctx context.Context, pr *store.PullRequest) (*diffResult, error) {
	d, err := s.diffUnsized(ctx, pr)
	if err != nil {
		return nil, err
	}
	s.sizeFiles(ctx, pr.RepoID, d)
	return d, nil
}

func (s *Service) diffUnsized(ctx context.Context, pr *store.PullRequest) (*diffResult, error) {
	key := diffKey(pr)
	if d := s.mem.get(key); d != nil {
		s.metrics.diffs.WithLabelValues("memory").Inc()
		return d, nil
	}
	stored, err := s.ps.PullDiff(ctx, pr.ID)
	if err == nil && stored.BaseSHA == pr.BaseSHA && stored.FromSHA == pr.FromSHA {
		d, err := decodeStored(stored)
		if err == nil {
			s.mem.put(key, d)
			s.metrics.diffs.WithLabelValues("cache").Inc()
			return d, nil
		}
		s.logger.Warn("stored diff unreadable; recomputing", "pr_id", pr.ID, "err", err)
	} else if err != nil && !problem.Is(err, problem.NotFound) {
		return nil, err
	}
	d, joined, err := s.diffs.do(ctx, key, func(ctx context.Context) (*diffResult, error) {
		return s.computeAndStore(ctx, pr)
	})
	if err != nil {
		return nil, err
	}
	if joined {
		s.metrics.diffs.WithLabelValues("joined").Inc()
	} else {
		s.metrics.diffs.WithLabelValues("computed").Inc()
	}
	return d, nil
}

// computeAndStore computes the diff and stores it for every node.
func (s *Service) computeAndStore(ctx context.Context, pr *store.PullRequest) (*diffResult, error) {
	d, err := s.computeDiff(ctx, pr.RepoID, pr.BaseSHA, pr.FromSHA)
	if err != nil {
		return nil, err
	}
	stat, _ := json.Marshal(d.changes)
	if err := s.ps.PutPullDiff(ctx, &store.PullDiff{PRID: pr.ID, BaseSHA: d.base, FromSHA: d.from, Stat: string(stat),
		Diff: d.text, Truncated: d.truncated}); err != nil {
		s.logger.Warn("store diff", "pr_id", pr.ID, "err", err)
	}
	s.mem.put(diffKey(pr), d)
	return d, nil
}

func decodeStored(p *store.PullDiff) (*diffResult, error) {
	d := &diffResult{base: p.BaseSHA, from: p.FromSHA, truncated: p.Truncated, text: p.Diff}
	if err := json.Unmarshal([]byte(p.Stat), &d.changes); err != nil {
		return nil, err
	}
	d.files = splitFiles(d.text)
	return d, nil
}

// computeDiff runs git for the stat and the text, each bounded.
func (s *Service) computeDiff(ctx context.Context, repoID int64, base, from string) (*diffResult, error) {
	dir := s.repos.Path(repoID)
	d := &diffResult{base: base, from: from}
	changes, cut, err := s.changes(ctx, dir, base, from)
	if err != nil {
		return nil, err
	}
	d.changes, d.truncated = changes, cut
	text, cut, err := s.diffText(ctx, dir, base, from, nil, false, defaultContextLines)
	if err != nil {
		return nil, err
	}
	d.text, d.truncated = text, d.truncated || cut
	d.files = splitFiles(text)
	return d, nil
}

// changes runs diff-tree --raw --numstat: the status letters tell adds,
// deletes, renames and copies, the numstat the line counts ("-" for
// binary files).
func (s *Service) changes(ctx context.Context, dir, base, from string) ([]Change, bool, error) {
	out, err := s.git.OutputLimit(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree",
		Flags: []string{"-r", "-z", "-M", "--raw", "--numstat", "--no-color"}, Args: []string{base, from}}, 64<<20)
	if err != nil {
		return nil, false, fmt.Errorf("diff stat: %w", err)
	}
	f := nul(out)
	var changes []Change
	i := 0
	// Raw records: ":<modes> <oids> <status>" then one path, or two for
	// R and C.
	for i < len(f) && strings.HasPrefix(f[i], ":") {
		fields := strings.Fields(f[i])
		status := fields[len(fields)-1]
		c := Change{}
		switch status[0] {
		case 'A':
			c.Type = "ADD"
		case 'D':
			c.Type = "DELETE"
		case 'R':
			c.Type = "MOVE"
		case 'C':
			c.Type = "COPY"
		default:
			c.Type = "MODIFY"
		}
		if status[0] == 'R' || status[0] == 'C' {
			if i+2 >= len(f) {
				return nil, false, errors.New("diff stat: short raw record")
			}
			c.SrcPath, c.Path = f[i+1], f[i+2]
			i += 3
		} else {
			if i+1 >= len(f) {
				return nil, false, errors.New("diff stat: short raw record")
			}
			c.Path = f[i+1]
			i += 2
		}
		changes = append(changes, c)
	}
	// Numstat records, in the same order: "<a>\t<d>\t<path>" or, for a
	// rename, "<a>\t<d>\t" followed by the two paths.
	for n := 0; i < len(f) && n < len(changes); n++ {
		parts := strings.SplitN(f[i], "\t", 3)
		i++
		if len(parts) == 3 && parts[2] == "" {
			i += 2
		}
		if len(parts) < 2 {
			continue
		}
		if parts[0] == "-" {
			changes[n].Binary = true
			continue
		}
		changes[n].Added, _ = strconv.Atoi(parts[0])
		changes[n].Deleted, _ = strconv.Atoi(parts[1])
	}
	cut := false
	if len(changes) > s.cfg.MaxDiffFiles {
		changes, cut = changes[:s.cfg.MaxDiffFiles], true
	}
	if changes == nil {
		changes = []Change{}
	}
	return changes, cut, nil
}

// diffText is the unified diff from base to from (limited to paths when
// given), cut at the byte and line limits on a line boundary.
func (s *Service) diffText(ctx context.Context, dir, base, from string, paths []string, ignoreWhitespace bool, contextLines int) ([]byte, bool, error) {
	flags := []string{"-r", "-p", "-M", "--no-color", "--no-ext-diff"}
	if contextLines != defaultContextLines {
		flags = append(flags, "-U"+strconv.Itoa(contextLines))
	}
	if ignoreWhitespace {
		flags = append(flags, "-w")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	p, err := s.git.Start(ctx, gitcmd.Cmd{Dir: dir, Name: "diff-tree", Flags: flags, Args: []string{base, from}, Paths: paths, Stdout: pw})
	if err != nil {
		return nil, false, fmt.Errorf("diff: %w", err)
	}
	waited := make(chan error, 1)
	go func() {
		err := p.Wait()
		pw.CloseWithError(err)
		waited <- err
	}()
	var buf bytes.Buffer
	r := bufio.NewReaderSize(pr, 64<<10)
	lines, cut := 0, false
	var readErr error
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			if int64(buf.Len()+len(line)) > s.cfg.MaxDiffBytes || lines >= s.cfg.MaxDiffLines {
				cut = true
				break
			}
			buf.Write(line)
			if err == nil {
				lines++
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	if cut {
		cancel()
	}
	pr.CloseWithError(io.ErrClosedPipe)
	waitErr := <-waited
	if !cut && (readErr != nil || waitErr != nil) {
		return nil, false, fmt.Errorf("diff: %w", errors.Join(readErr, waitErr))
	}
	return buf.Bytes(), cut, nil
}

// splitFiles cuts unified diff text at each "diff --git" header and reads
// the paths from the headers that follow it.
func splitFiles(text []byte) []fileText {
	var files []fileText
	start := -1
	flush := func(end int) {
		if start >= 0 {
			files = append(files, parseFileHeader(text[start:end]))
		}
	}
	for i := 0; i < len(text); {
		j := bytes.IndexByte(text[i:], '\n')
		next := len(text)
		if j >= 0 {
			next = i + j + 1
		}
		if bytes.HasPrefix(text[i:], []byte("diff --git ")) {
			flush(i)
			start = i
		}
		i = next
	}
	flush(len(text))
	return files
}

func parseFileHeader(body []byte) fileText {
	f := fileText{body: body}
	var gitA, gitB string
	for _, line := range strings.Split(string(body), "\n") {
		switch {
		case strings.HasPrefix(line, "diff --git "):
			gitA, gitB = splitGitHeader(strings.TrimPrefix(line, "diff --git "))
		case strings.HasPrefix(line, "rename from "), strings.HasPrefix(line, "copy from "):
			f.src = unquote(line[strings.Index(line, "from ")+5:])
		case strings.HasPrefix(line, "rename to "), strings.HasPrefix(line, "copy to "):
			f.dst = unquote(line[strings.Index(line, "to ")+3:])
		case strings.HasPrefix(line, "--- "):
			if p := strings.TrimPrefix(line, "--- "); p != "/dev/null" {
				f.src = strings.TrimPrefix(unquote(p), "a/")
			}
		case strings.HasPrefix(line, "+++ "):
			if p := strings.TrimPrefix(line, "+++ "); p != "/dev/null" {
				f.dst = strings.TrimPrefix(unquote(p), "b/")
			}
		case strings.HasPrefix(line, "Binary files "):
			f.binary = true
		case strings.HasPrefix(line, "new file mode"):
			gitA = ""
		case strings.HasPrefix(line, "deleted file mode"):
			gitB = ""
		case strings.HasPrefix(line, "@@"):
			return fillFromGit(f, gitA, gitB)
		}
	}
	return fillFromGit(f, gitA, gitB)
}

func fillFromGit(f fileText, a, b string) fileText {
	if f.src == "" && f.dst == "" {
		f.src, f.dst = a, b
	}
	return f
}

// splitGitHeader reads "a/X b/Y". Unquoted paths may hold spaces; when
// both sides are the same path (no rename) the line splits in the middle.
func splitGitHeader(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		if end := closingQuote(s); end > 0 {
			return strings.TrimPrefix(unquote(s[:end+1]), "a/"), strings.TrimPrefix(unquote(strings.TrimSpace(s[end+1:])), "b/")
		}
	}
	if n := len(s); n%2 == 1 && s[n/2] == ' ' {
		return strings.TrimPrefix(s[:n/2], "a/"), strings.TrimPrefix(s[n/2+1:], "b/")
	}
	if i := strings.Index(s, " b/"); i > 0 {
		return strings.TrimPrefix(s[:i], "a/"), s[i+3:]
	}
	return "", ""
}

func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == '"' {
			return i
		}
	}
	return -1
}

// unquote undoes git's C-style quoting of unusual paths (core.quotePath).
func unquote(p string) string {
	p = strings.TrimSuffix(p, "\t")
	if strings.HasPrefix(p, `"`) {
		if u, err := strconv.Unquote(p); err == nil {
			return u
		}
	}
	return p
}

// parseHunks turns a file's unified diff body into hunks.
func parseHunks(body []byte) []Hunk {
	var hunks []Hunk
	var h *Hunk
	src, dst := 0, 0
	add := func(typ string, l Line) {
		if n := len(h.Segments); n > 0 && h.Segments[n-1].Type == typ {
			h.Segments[n-1].Lines = append(h.Segments[n-1].Lines, l)
			return
		}
		h.Segments = append(h.Segments, Segment{Type: typ, Lines: []Line{l}})
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "@@ ") {
			hunks = append(hunks, Hunk{Segments: []Segment{}})
			h = &hunks[len(hunks)-1]
			h.SourceLine, h.SourceSpan, h.DestinationLine, h.DestinationSpan, h.Context = parseHunkHeader(line)
			src, dst = h.SourceLine, h.DestinationLine
			continue
		}
		if h == nil || line == "" {
			continue
		}
		switch line[0] {
		case '+':
			add("ADDED", Line{Destination: dst, Line: line[1:]})
			dst++
		case '-':
			add("REMOVED", Line{Source: src, Line: line[1:]})
			src++
		case ' ':
			add("CONTEXT", Line{Source: src, Destination: dst, Line: line[1:]})
			src++
			dst++
		}
	}
	if hunks == nil {
		hunks = []Hunk{}
	}
	return hunks
}

// parseHunkHeader reads "@@ -a,b +c,d @@ context".
func parseHunkHeader(line string) (srcLine, srcSpan, dstLine, dstSpan int, ctx string) {
	rest := strings.TrimPrefix(line, "@@ ")
	end := strings.Index(rest, " @@")
	if end < 0 {
		return
	}
	ctx = strings.TrimSpace(rest[end+3:])
	for _, f := range strings.Fields(rest[:end]) {
		start, span := f[1:], "1"
		if i := strings.IndexByte(start, ','); i >= 0 {
			start, span = start[:i], start[i+1:]
		}
		a, _ := strconv.Atoi(start)
		b, _ := strconv.Atoi(span)
		if f[0] == '-' {
			srcLine, srcSpan = a, b
		} else {
			dstLine, dstSpan = a, b
		}
	}
	return
}

func toFileDiff(f fileText) FileDiff {
	return FileDiff{Source: f.src, Destination: f.dst, Binary: f.binary, Hunks: parseHunks(f.body)}
}

// Changes is a pull request's diff stat from the cache.
func (s *Service) Changes(ctx context.Context, pr *store.PullRequest) ([]Change, bool, error) {
	d, err := s.diff(ctx, pr)
	if err != nil {
		return nil, false, err
	}
	return d.changes, d.truncated, nil
}

// ChangesJSON is the diff stat as the REST API serves it: one JSON value
// per changed file, in Bitbucket's change shape (see restChange), in the
// order of Changes. The values are rendered once per node and shared:
// callers must not modify them.
func (s *Service) ChangesJSON(ctx context.Context, pr *store.PullRequest) (values [][]byte, truncated bool, err error) {
	d, err := s.diff(ctx, pr)
	if err != nil {
		return nil, false, err
	}
	d.changesOnce.Do(func() { d.changesJSON, d.changesErr = renderChanges(d.changes) })
	return d.changesJSON, d.truncated, d.changesErr
}

// restPath is a file path in Bitbucket's shape.
type restPath struct {
	Components []string `json:"components"`
	Parent     string   `json:"parent"`
	Name       string   `json:"name"`
	Extension  string   `json:"extension,omitempty"`
	ToString   string   `json:"toString"`
}

// restChange is one changed file in Bitbucket's shape
// (GET …/pull-requests/{id}/changes).
type restChange struct {
	Path       restPath        `json:"path"`
	SrcPath    *restPath       `json:"srcPath,omitempty"`
	Type       string          `json:"type"`
	NodeType   string          `json:"nodeType"`
	Binary     bool            `json:"binary,omitempty"`
	Properties restChangeProps `json:"properties"`
}

type restChangeProps struct {
	LinesAdded   int `json:"linesAdded"`
	LinesRemoved int `json:"linesRemoved"`
}

func toRESTPath(p string) restPath {
	parts := strings.Split(p, "/")
	name := parts[len(parts)-1]
	out := restPath{Components: parts, Parent: strings.Join(parts[:len(parts)-1], "/"), Name: name, ToString: p}
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		out.Extension = name[i+1:]
	}
	return out
}

// renderChanges encodes each change as the API does (HTML escaping on),
// without the encoder's trailing newline, so the values can be joined.
func renderChanges(changes []Change) ([][]byte, error) {
	out := make([][]byte, len(changes))
	for i, ch := range changes {
		rc := restChange{Path: toRESTPath(ch.Path), Type: ch.Type, NodeType: "FILE", Binary: ch.Binary,
			Properties: restChangeProps{LinesAdded: ch.Added, LinesRemoved: ch.Deleted}}
		if ch.SrcPath != "" {
			sp := toRESTPath(ch.SrcPath)
			rc.SrcPath = &sp
		}
		b, err := encodeJSON(rc)
		if err != nil {
			return nil, err
		}
		out[i] = bytes.TrimSuffix(b, []byte("\n"))
	}
	return out, nil
}

// DiffOptions select what Diff returns.
type DiffOptions struct {
	Path             string // one file ("" for all)
	IgnoreWhitespace bool   // computed on request, one file only
	// ContextLines, when CustomContext is set, is the lines of context
	// around each change. The stored diff has git's default of three;
	// any other number is computed on request, within the same limits.
	ContextLines  int
	CustomContext bool
}

// MaxContextLines bounds a requested context: beyond it a diff is the
// files whole, which the byte and line limits cut anyway.
const MaxContextLines = 10_000

// context is the context the options ask for.
func (o DiffOptions) context() int {
	if !o.CustomContext {
		return defaultContextLines
	}
	return min(max(o.ContextLines, 0), MaxContextLines)
}

// Diff is a pull request's diff, or one file's, parsed into hunks.
func (s *Service) Diff(ctx context.Context, pr *store.PullRequest, o DiffOptions) (*Diff, error) {
	out := &Diff{FromHash: pr.BaseSHA, ToHash: pr.FromSHA, ContextLines: defaultContextLines,
		Whitespace: whitespaceName(false), Files: []FileDiff{}}
	if o.IgnoreWhitespace && o.Path == "" {
		return nil, problem.New(problem.Invalid, "ignoring whitespace needs a path: it is computed for one file at a time")
	}
	if o.IgnoreWhitespace || o.context() != defaultContextLines {
		return s.diffOnRequest(ctx, pr, o.Path, o.IgnoreWhitespace, o.context())
	}
	d, err := s.diff(ctx, pr)
	if err != nil {
		return nil, err
	}
	if o.Path == "" {
		for i, f := range d.files {
			out.Files = append(out.Files, d.fileDiff(i, f))
		}
		out.Truncated = d.truncated
		return out, nil
	}
	for i, f := range d.files {
		if f.dst == o.Path || (f.dst == "" && f.src == o.Path) {
			if d.truncated && i == len(d.files)-1 {
				// The stored diff may have been cut inside this file:
				// compute it alone, within the same limits, which then
				// tell whether it is whole.
				return s.diffOnRequest(ctx, pr, o.Path, false, defaultContextLines)
			}
			fd := toFileDiff(f)
			markTooLarge(&fd, d.tooLarge)
			out.Files = append(out.Files, fd)
			return out, nil
		}
	}
	if d.truncated {
		// Cut from the stored diff by the limits: compute this file alone.
		return s.diffOnRequest(ctx, pr, o.Path, false, defaultContextLines)
	}
	return out, nil
}

// diffOnRequest runs git for one file (or all, path "") with the given
// whitespace mode and context. When the limits cut it, the last file is
// the one marked cut.
func (s *Service) diffOnRequest(ctx context.Context, pr *store.PullRequest, path string, ignoreWS bool, contextLines int) (*Diff, error) {
	var paths []string
	if path != "" {
		paths = []string{path}
	}
	text, cut, err := s.diffText(ctx, s.repos.Path(pr.RepoID), pr.BaseSHA, pr.FromSHA, paths, ignoreWS, contextLines)
	if err != nil {
		return nil, err
	}
	out := &Diff{FromHash: pr.BaseSHA, ToHash: pr.FromSHA, ContextLines: contextLines, Whitespace: whitespaceName(ignoreWS),
		Files: []FileDiff{}, Truncated: cut}
	files := splitFiles(text)
	var big map[string]int64
	if paths := binaryPaths(files); len(paths) > 0 {
		if big, err = s.repos.DiffTooLarge(ctx, pr.RepoID, pr.BaseSHA, pr.FromSHA, paths); err != nil {
			s.logger.Warn("size binary files of a diff", "pr_id", pr.ID, "err", err)
		}
	}
	for i, f := range files {
		fd := toFileDiff(f)
		fd.Truncated = cut && i == len(files)-1
		markTooLarge(&fd, big)
		out.Files = append(out.Files, fd)
	}
	return out, nil
}

// DiffJSON is Diff rendered as the API's JSON, with an entity tag. The
// whole diff (no path, whitespace shown, default context) is rendered once
// per node and served as bytes from then on; the tag is a function of the
// pull request, its two commits and the options, so it changes exactly
// when the answer does.
func (s *Service) DiffJSON(ctx context.Context, pr *store.PullRequest, o DiffOptions) (body []byte, etag string, err error) {
	opts := sha256.Sum256([]byte(fmt.Sprintf("%t\x00%s\x00%d", o.IgnoreWhitespace, o.Path, o.context())))
	// v2: the paths became Bitbucket's path objects, so tags handed out
	// before must not revalidate.
	etag = fmt.Sprintf(`"pr%d-%s-%s-v2%x"`, pr.ID, pr.BaseSHA, pr.FromSHA, opts[:6])
	if o.Path != "" || o.IgnoreWhitespace || o.context() != defaultContextLines {
		d, err := s.Diff(ctx, pr, o)
		if err != nil {
			return nil, "", err
		}
		body, err = encodeJSON(d)
		return body, etag, err
	}
	d, err := s.diff(ctx, pr)
	if err != nil {
		return nil, "", err
	}
	body, err = d.json()
	return body, etag, err
}

// RawDiff is the stored unified diff text and whether it was cut.
func (s *Service) RawDiff(ctx context.Context, pr *store.PullRequest) ([]byte, bool, error) {
	d, err := s.diff(ctx, pr)
	if err != nil {
		return nil, false, err
	}
	return d.text, d.truncated, nil
}
