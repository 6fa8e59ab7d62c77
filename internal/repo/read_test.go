package repo

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestRefs(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	w, h := seed(t, m, 1)
	for _, b := range []string{"alpha", "beta", "release/1.0", "release/2.0"} {
		w.git("branch", b, h.c1)
	}
	w.git("push", "-q", m.Path(1), "alpha", "beta", "release/1.0", "release/2.0")

	type want struct {
		names []string
		total int
	}
	tests := []struct {
		name          string
		kind, filter  string
		start, limit  int
		want          want
		wantErrorKind problem.Kind
	}{
		{"all heads", "heads", "", 0, 100, want{[]string{"alpha", "beta", "feature", "main", "release/1.0", "release/2.0"}, 6}, 0},
		{"page", "heads", "", 2, 2, want{[]string{"feature", "main"}, 6}, 0},
		{"past the end", "heads", "", 10, 5, want{nil, 6}, 0},
		{"filter", "heads", "RELEASE", 0, 100, want{[]string{"release/1.0", "release/2.0"}, 2}, 0},
		{"filter page", "heads", "e", 1, 2, want{[]string{"feature", "release/1.0"}, 4}, 0},
		{"tags", "tags", "", 0, 100, want{[]string{"v1", "v2"}, 2}, 0},
		{"bad kind", "remotes", "", 0, 10, want{}, problem.Invalid},
		{"bad limit", "heads", "", 0, 0, want{}, problem.Invalid},
		{"limit too large", "heads", "", 0, MaxPageLimit + 1, want{}, problem.Invalid},
		{"negative start", "heads", "", -1, 10, want{}, problem.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refs, total, err := m.Refs(ctx, 1, tt.kind, tt.filter, tt.start, tt.limit)
			if tt.wantErrorKind != 0 {
				wantKind(t, err, tt.wantErrorKind)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range refs {
				names = append(names, r.DisplayID)
				if r.Name != "refs/"+tt.kind+"/"+r.DisplayID {
					t.Errorf("Name = %q for %q", r.Name, r.DisplayID)
				}
			}
			if !slices.Equal(names, tt.want.names) || total != tt.want.total {
				t.Errorf("got %q total %d, want %q total %d", names, total, tt.want.names, tt.want.total)
			}
		})
	}

	refs, _, err := m.Refs(ctx, 1, "heads", "main", 0, 10)
	if err != nil || len(refs) != 1 {
		t.Fatalf("Refs main = %v, %v", refs, err)
	}
	if !refs[0].IsDefault || refs[0].LatestCommit != h.c3 {
		t.Errorf("main = %+v, want default at %s", refs[0], h.c3)
	}
	tags, _, err := m.Refs(ctx, 1, "tags", "", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	// An annotated tag shows the commit it tags, not the tag object.
	if tags[0].LatestCommit != h.c1 || tags[1].LatestCommit != h.c3 || h.v2tag == h.c3 {
		t.Errorf("tags = %+v, want v1 at %s, v2 peeled to %s", tags, h.c1, h.c3)
	}
	_, _, err = m.Refs(ctx, 404, "heads", "", 0, 10)
	wantKind(t, err, problem.NotFound)
}

func TestResolveCommit(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	tests := []struct {
		rev  string
		want string
		kind problem.Kind // 0: success
	}{
		{"main", h.c3, 0},
		{"refs/heads/main", h.c3, 0},
		{"HEAD", h.c3, 0},
		{"feature", h.feature, 0},
		{h.c2, h.c2, 0},
		{h.c2[:10], h.c2, 0},
		{"v1", h.c1, 0},
		{"v2", h.c3, 0}, // annotated tag peeled to its commit
		{h.v2tag, h.c3, 0},
		{"nope", "", problem.NotFound},
		{"refs/heads/nope", "", problem.NotFound},
		{strings.Repeat("0", 40), "", problem.NotFound},
		{"main~1", "", problem.Invalid},
		{"main^", "", problem.Invalid},
		{"main^{tree}", "", problem.Invalid},
		{"main@{0}", "", problem.Invalid},
		{"HEAD:README.md", "", problem.Invalid},
		{":/first", "", problem.Invalid},
		{"main..feature", "", problem.Invalid},
		{"-n", "", problem.Invalid},
		{"--all", "", problem.Invalid},
		{"", "", problem.Invalid},
		{"ma in", "", problem.Invalid},
		{"main\x00", "", problem.Invalid},
	}
	for _, tt := range tests {
		got, err := m.ResolveCommit(ctx, 1, tt.rev)
		if tt.kind != 0 {
			if !problem.Is(err, tt.kind) {
				t.Errorf("ResolveCommit(%q) = %q, %v; want %v", tt.rev, got, err, tt.kind)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ResolveCommit(%q) = %q, %v; want %q", tt.rev, got, err, tt.want)
		}
	}
}

func TestLogAndCommit(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	ids := func(cs []Commit) []string {
		var s []string
		for _, c := range cs {
			s = append(s, c.ID)
		}
		return s
	}
	tests := []struct {
		name         string
		rev, path    string
		start, limit int
		want         []string
		kind         problem.Kind
	}{
		{"main", "main", "", 0, 10, []string{h.c3, h.c2, h.c1}, 0},
		{"page", "main", "", 1, 1, []string{h.c2}, 0},
		{"past the end", "main", "", 5, 1, nil, 0},
		{"feature", "feature", "", 0, 10, []string{h.feature, h.c2, h.c1}, 0},
		{"path", "main", "README.md", 0, 10, []string{h.c2, h.c1}, 0},
		{"directory path", "main", "dir/sub", 0, 10, []string{h.c2}, 0},
		{"path with space", "main", "with space.txt", 0, 10, []string{h.c1}, 0},
		{"dash path", "main", "-dash.txt", 0, 10, []string{h.c1}, 0},
		{"pathspec magic is literal", "main", ":(top)README.md", 0, 10, nil, 0},
		{"glob is literal", "main", "*.md", 0, 10, nil, 0},
		{"traversal", "main", "../etc/passwd", 0, 10, nil, problem.Invalid},
		{"unknown rev", "nope", "", 0, 10, nil, problem.NotFound},
		{"bad limit", "main", "", 0, 5000, nil, problem.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.Log(ctx, 1, tt.rev, tt.path, tt.start, tt.limit)
			if tt.kind != 0 {
				wantKind(t, err, tt.kind)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("got %q, want %q", ids(got), tt.want)
			}
		})
	}

	c, err := m.Commit(ctx, 1, h.c1)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != h.c1 || c.DisplayID != h.c1[:11] || len(c.Parents) != 0 {
		t.Errorf("commit c1 = %+v", c)
	}
	if c.Message != "first\n\nwith a body\n" {
		t.Errorf("message = %q", c.Message)
	}
	if c.Author.Name != "Ada Author" || c.Author.Email != "ada@example.com" ||
		c.Committer.Name != "Cy Committer" || c.Committer.Email != "cy@example.com" {
		t.Errorf("identities = %+v / %+v", c.Author, c.Committer)
	}
	if c.Author.Time.Unix() != 1700000060 {
		t.Errorf("author time = %v (%d)", c.Author.Time, c.Author.Time.Unix())
	}
	if _, off := c.Author.Time.Zone(); off != 90*60 {
		t.Errorf("author zone offset = %d, want +0130", off)
	}
	c, err = m.Commit(ctx, 1, "main")
	if err != nil || c.ID != h.c3 || !slices.Equal(c.Parents, []string{h.c2}) || c.Message != "third\n" {
		t.Errorf("commit main = %+v, %v", c, err)
	}
	_, err = m.Commit(ctx, 1, "nope")
	wantKind(t, err, problem.NotFound)
}

func TestParseRawDate(t *testing.T) {
	tests := []struct {
		in     string
		unix   int64
		offset int
	}{
		{"1700000000 +0000", 1700000000, 0},
		{"1700000000 -0730", 1700000000, -(7*3600 + 30*60)},
		{"1700000000 +1400", 1700000000, 14 * 3600},
		{"0 +0000", 0, 0},
	}
	for _, tt := range tests {
		got := parseRawDate(tt.in)
		if _, off := got.Zone(); got.Unix() != tt.unix || off != tt.offset {
			t.Errorf("parseRawDate(%q) = %v", tt.in, got)
		}
	}
	if got := parseRawDate("garbage"); !got.Equal(time.Time{}) {
		t.Errorf("parseRawDate(garbage) = %v", got)
	}
}

func TestCompare(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	tests := []struct {
		from, to string
		want     []string
	}{
		{"main", "feature", []string{h.feature}},
		{"feature", "main", []string{h.c3}},
		{"v1", "main", []string{h.c3, h.c2}},
		{"main", "main", nil},
	}
	for _, tt := range tests {
		got, err := m.Compare(ctx, 1, tt.from, tt.to, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		if !slices.Equal(ids, tt.want) {
			t.Errorf("Compare(%s, %s) = %q, want %q", tt.from, tt.to, ids, tt.want)
		}
	}
	_, err := m.Compare(ctx, 1, "main", "nope", 0, 10)
	wantKind(t, err, problem.NotFound)
	_, err = m.Compare(ctx, 1, "main~1", "main", 0, 10)
	wantKind(t, err, problem.Invalid)
}

func TestTree(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	root, err := m.Tree(ctx, 1, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]TreeEntry{}
	for _, e := range root {
		got[e.Path] = e
	}
	want := map[string]struct {
		typ, mode string
		size      int64
	}{
		"-dash.txt":      {"FILE", "100644", 5},
		"README.md":      {"FILE", "100644", 12},
		"big.bin":        {"FILE", "100644", 3000},
		"dir":            {"DIRECTORY", "040000", -1},
		"link":           {"FILE", "120000", int64(len("README.md"))},
		"script.sh":      {"FILE", "100755", 18},
		"sub":            {"SUBMODULE", "160000", -1},
		"with space.txt": {"FILE", "100644", 6},
	}
	if len(got) != len(want) {
		t.Errorf("root has %d entries, want %d: %+v", len(got), len(want), root)
	}
	for name, w := range want {
		e, ok := got[name]
		if !ok || e.Type != w.typ || e.Mode != w.mode || e.Size != w.size || !validOID(e.ID) {
			t.Errorf("entry %q = %+v, want %+v", name, e, w)
		}
	}
	if got["sub"].ID != h.subCommit {
		t.Errorf("submodule id = %s, want %s", got["sub"].ID, h.subCommit)
	}

	for _, path := range []string{"dir", "dir/", "/"[1:] + "dir"} {
		sub, err := m.Tree(ctx, 1, "main", path)
		if err != nil {
			t.Fatal(err)
		}
		if len(sub) != 2 || sub[0].Path != "c.txt" || sub[1].Path != "sub" || sub[1].Type != "DIRECTORY" {
			t.Errorf("Tree(%q) = %+v", path, sub)
		}
	}
	old, err := m.Tree(ctx, 1, h.c1, "dir")
	if err != nil || len(old) != 1 || old[0].Path != "a.txt" {
		t.Errorf("Tree(c1, dir) = %+v, %v", old, err)
	}

	errs := []struct {
		rev, path string
		kind      problem.Kind
	}{
		{"main", "README.md", problem.Invalid}, // a file, not a directory
		{"main", "nope", problem.NotFound},
		{"main", "dir/nope", problem.NotFound},
		{"nope", "", problem.NotFound},
		{"main", "../etc/passwd", problem.Invalid},
		{"main", "a/../../b", problem.Invalid},
		{"main", "dir/..", problem.Invalid},
		{"main", "./dir", problem.Invalid},
		{"main", "/etc", problem.Invalid},
		{"main", "dir//sub", problem.Invalid},
		{"main", "dir\x00", problem.Invalid},
		{"main", "dir\nREADME.md", problem.Invalid},
	}
	for _, tt := range errs {
		_, err := m.Tree(ctx, 1, tt.rev, tt.path)
		if !problem.Is(err, tt.kind) {
			t.Errorf("Tree(%q, %q) = %v, want %v", tt.rev, tt.path, err, tt.kind)
		}
	}
	_, err = m.Tree(ctx, 1, "main", "nope")
	if msg := problem.Message(err); msg != `path "nope" not found at "main"` {
		t.Errorf("message = %q", msg)
	}
}

func TestBlob(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	tests := []struct {
		name      string
		rev, path string
		max       int64
		data      string
		size      int64
		truncated bool
	}{
		{"whole", "main", "README.md", 100, "hello\nworld\n", 12, false},
		{"exact fit", "main", "README.md", 12, "hello\nworld\n", 12, false},
		{"truncated", "main", "README.md", 5, "hello", 12, true},
		{"zero", "main", "README.md", 0, "", 12, true},
		{"old revision", h.c1, "README.md", 100, "hello\n", 6, false},
		{"symlink target", "main", "link", 100, "README.md", 9, false},
		{"dash name", "main", "-dash.txt", 100, "dash\n", 5, false},
		{"space name", "main", "with space.txt", 100, "space\n", 6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, size, truncated, err := m.Blob(ctx, 1, tt.rev, tt.path, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tt.data || size != tt.size || truncated != tt.truncated {
				t.Errorf("got %q, %d, %v; want %q, %d, %v", data, size, truncated, tt.data, tt.size, tt.truncated)
			}
		})
	}
	big, size, truncated, err := m.Blob(ctx, 1, "main", "big.bin", 1000)
	if err != nil || size != 3000 || !truncated || len(big) != 1000 || big[999] != byte(999%251) {
		t.Errorf("big.bin preview: %d bytes, size %d, truncated %v, %v", len(big), size, truncated, err)
	}

	var buf bytes.Buffer
	if err := m.WriteBlob(ctx, 1, "main", "big.bin", &buf); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 3000 || buf.Bytes()[2999] != byte(2999%251) {
		t.Errorf("WriteBlob wrote %d bytes", buf.Len())
	}

	errs := []struct {
		path string
		kind problem.Kind
	}{
		{"dir", problem.Invalid},
		{"", problem.Invalid},
		{"sub", problem.NotFound}, // a submodule's commit is not in this repository
		{"nope.txt", problem.NotFound},
		{"../etc/passwd", problem.Invalid},
		{"a/../../b", problem.Invalid},
		{"README.md\x00", problem.Invalid},
	}
	for _, tt := range errs {
		_, _, _, err := m.Blob(ctx, 1, "main", tt.path, 10)
		if !problem.Is(err, tt.kind) {
			t.Errorf("Blob(%q) = %v, want %v", tt.path, err, tt.kind)
		}
		if err := m.WriteBlob(ctx, 1, "main", tt.path, io.Discard); !problem.Is(err, tt.kind) {
			t.Errorf("WriteBlob(%q) = %v, want %v", tt.path, err, tt.kind)
		}
	}
}

func TestDiff(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)

	stats, truncated, err := m.DiffStat(ctx, 1, h.c2, "main", 100)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]FileStat{}
	for _, s := range stats {
		byPath[s.Path] = s
	}
	if truncated || len(stats) != 4 {
		t.Errorf("stats = %+v, truncated %v", stats, truncated)
	}
	if s := byPath["dir/c.txt"]; s.OldPath != "dir/a.txt" || s.Added != 0 || s.Deleted != 0 {
		t.Errorf("rename = %+v", s)
	}
	if s := byPath["script.sh"]; s.Added != 2 || s.Binary {
		t.Errorf("script.sh = %+v", s)
	}

	// An empty from means the first parent; for a root commit, everything.
	stats, _, err = m.DiffStat(ctx, 1, "", h.c2, 100)
	if err != nil {
		t.Fatal(err)
	}
	byPath = map[string]FileStat{}
	for _, s := range stats {
		byPath[s.Path] = s
	}
	if len(stats) != 3 || !byPath["big.bin"].Binary || byPath["README.md"].Added != 1 {
		t.Errorf("stats of c2 = %+v", stats)
	}
	stats, _, err = m.DiffStat(ctx, 1, "", h.c1, 100)
	if err != nil || len(stats) != 4 {
		t.Errorf("stats of root commit = %+v, %v", stats, err)
	}
	stats, truncated, err = m.DiffStat(ctx, 1, "", h.c1, 2)
	if err != nil || len(stats) != 2 || !truncated {
		t.Errorf("limited stats = %+v, %v, %v", stats, truncated, err)
	}

	patch, truncated, err := m.Diff(ctx, 1, h.c1, h.c2, "README.md", 1<<20)
	if err != nil || truncated {
		t.Fatal(err, truncated)
	}
	if !strings.Contains(string(patch), "+world") || strings.Contains(string(patch), "b.txt") {
		t.Errorf("patch = %s", patch)
	}
	full, truncated, err := m.Diff(ctx, 1, h.c1, h.c2, "", 1<<20)
	if err != nil || truncated || !strings.Contains(string(full), "dir/sub/b.txt") {
		t.Errorf("full patch: %v %v\n%s", err, truncated, full)
	}
	cut, truncated, err := m.Diff(ctx, 1, h.c1, h.c2, "", 40)
	if err != nil || !truncated || string(cut) != string(full[:40]) {
		t.Errorf("cut patch = %q, %v, %v", cut, truncated, err)
	}
	_, _, err = m.Diff(ctx, 1, h.c1, h.c2, "../x", 100)
	wantKind(t, err, problem.Invalid)
	_, _, err = m.Diff(ctx, 1, "nope", h.c2, "", 100)
	wantKind(t, err, problem.NotFound)
}

func TestArchive(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	_, h := seed(t, m, 1)
	wantFiles := []string{"-dash.txt", "README.md", "big.bin", "dir/c.txt", "dir/sub/b.txt", "link", "script.sh", "with space.txt"}

	tarNames := func(t *testing.T, r io.Reader) map[string]string {
		t.Helper()
		tr := tar.NewReader(r)
		files := map[string]string{}
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return files
			}
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeSymlink {
				b, _ := io.ReadAll(tr)
				files[hdr.Name] = string(b)
			}
		}
	}
	check := func(t *testing.T, files map[string]string, prefix string) {
		t.Helper()
		for _, f := range wantFiles {
			if _, ok := files[prefix+f]; !ok {
				t.Errorf("archive lacks %q; has %v", prefix+f, slices.Sorted(mapKeys(files)))
			}
		}
		if len(files) != len(wantFiles) {
			t.Errorf("archive has %d files, want %d: %v", len(files), len(wantFiles), slices.Sorted(mapKeys(files)))
		}
		if got := files[prefix+"README.md"]; got != "hello\nworld\n" {
			t.Errorf("README.md = %q", got)
		}
	}

	for _, format := range []string{"tar", "tar.gz", "tgz"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := m.Archive(ctx, 1, "main", format, "proj-1.0", &buf); err != nil {
				t.Fatal(err)
			}
			var r io.Reader = &buf
			if format != "tar" {
				zr, err := gzip.NewReader(&buf)
				if err != nil {
					t.Fatal(err)
				}
				r = zr
			}
			check(t, tarNames(t, r), "proj-1.0/")
		})
	}
	t.Run("zip", func(t *testing.T) {
		var buf bytes.Buffer
		if err := m.Archive(ctx, 1, h.c3, "zip", "a/b/", &buf); err != nil {
			t.Fatal(err)
		}
		zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]string{}
		for _, f := range zr.File {
			if strings.HasSuffix(f.Name, "/") {
				continue
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			files[f.Name] = string(b)
		}
		check(t, files, "a/b/")
	})
	t.Run("no prefix", func(t *testing.T) {
		var buf bytes.Buffer
		if err := m.Archive(ctx, 1, "v1", "tar", "", &buf); err != nil {
			t.Fatal(err)
		}
		files := tarNames(t, &buf)
		if files["README.md"] != "hello\n" || files["dir/a.txt"] == "" {
			t.Errorf("v1 archive = %v", slices.Sorted(mapKeys(files)))
		}
	})

	bad := []struct {
		format, prefix, rev string
		kind                problem.Kind
	}{
		{"rar", "", "main", problem.Invalid},
		{"tar", "../x", "main", problem.Invalid},
		{"tar", "a/../../x", "main", problem.Invalid},
		{"tar", "/abs", "main", problem.Invalid},
		{"tar", "-x", "main", problem.Invalid},
		{"tar", "a\x00b", "main", problem.Invalid},
		{"tar", "a\nb", "main", problem.Invalid},
		{"tar", `a\b`, "main", problem.Invalid},
		{"tar", strings.Repeat("p", 300), "main", problem.Invalid},
		{"tar", "ok", "nope", problem.NotFound},
		{"tar", "ok", "main^", problem.Invalid},
	}
	for _, tt := range bad {
		var buf bytes.Buffer
		err := m.Archive(ctx, 1, tt.rev, tt.format, tt.prefix, &buf)
		if !problem.Is(err, tt.kind) {
			t.Errorf("Archive(%q, %q, %q) = %v, want %v", tt.rev, tt.format, tt.prefix, err, tt.kind)
		}
		if buf.Len() != 0 {
			t.Errorf("Archive(%q, %q, %q) wrote %d bytes", tt.rev, tt.format, tt.prefix, buf.Len())
		}
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestIsReachable(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	w, h := seed(t, m, 1)
	// A commit whose branch is deleted stays in the repository but is no
	// longer reachable.
	w.git("checkout", "-q", "-b", "gone", h.c1)
	w.write("gone.txt", "gone\n")
	gone := w.commit("gone")
	w.git("push", "-q", m.Path(1), "gone")
	if ok, err := m.IsReachable(ctx, 1, gone); err != nil || !ok {
		t.Fatalf("IsReachable(gone) before delete = %v, %v", ok, err)
	}
	w.git("push", "-q", m.Path(1), ":gone")

	tests := []struct {
		sha  string
		want bool
		kind problem.Kind
	}{
		{h.c1, true, 0},
		{h.c3, true, 0},
		{h.feature, true, 0},
		{gone, false, 0},
		{strings.Repeat("1", 40), false, 0}, // not in the repository at all
		{h.c1[:12], false, problem.Invalid},
		{"main", false, problem.Invalid},
		{strings.ToUpper(h.c1), false, problem.Invalid},
	}
	for _, tt := range tests {
		ok, err := m.IsReachable(ctx, 1, tt.sha)
		if tt.kind != 0 {
			if !problem.Is(err, tt.kind) {
				t.Errorf("IsReachable(%q) = %v, %v; want %v", tt.sha, ok, err, tt.kind)
			}
			continue
		}
		if err != nil || ok != tt.want {
			t.Errorf("IsReachable(%q) = %v, %v; want %v", tt.sha, ok, err, tt.want)
		}
	}
}
