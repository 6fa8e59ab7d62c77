package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestOpenAPICoversRouteTable: every registered route is in the document
// exactly once, and the document has nothing else.
func TestOpenAPICoversRouteTable(t *testing.T) {
	New(Deps{}) // registering the table must not panic (conflicting patterns)
	s := &server{}
	s.routes = s.routeTable()
	data, err := json.Marshal(s.openAPI())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Summary     string `json:"summary"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	ops, ids := 0, map[string]bool{}
	for _, m := range doc.Paths {
		for _, op := range m {
			ops++
			if ids[op.OperationID] {
				t.Errorf("operationId %s twice", op.OperationID)
			}
			ids[op.OperationID] = true
		}
	}
	if ops != len(s.routes) {
		t.Errorf("%d operations documented, %d routes registered", ops, len(s.routes))
	}
	for _, rt := range s.routes {
		op, ok := doc.Paths[openAPIPath(rt.Pattern)][strings.ToLower(rt.Method)]
		if !ok {
			t.Errorf("%s %s not documented", rt.Method, rt.Pattern)
			continue
		}
		if op.Summary != rt.Summary || rt.Summary == "" {
			t.Errorf("%s %s: summary %q", rt.Method, rt.Pattern, op.Summary)
		}
	}
}

func TestCleanRepoPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"a", "a", true},
		{"a/b/c.txt", "a/b/c.txt", true},
		{"dir/", "dir", true},
		{"..", "", false},
		{"a/../b", "", false},
		{"./a", "", false},
		{"/etc/passwd", "", false},
		{"a//b", "", false},
		{"a\x00b", "", false},
		{"a\nb", "", false},
		{"a\x7fb", "", false},
		{"\xff", "", false},
		{strings.Repeat("a", 5000), "", false},
		{"-rf", "-rf", true}, // a file may be called that; it goes after "--"
	}
	for _, tt := range tests {
		got, err := cleanRepoPath("path", tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("cleanRepoPath(%q) = %q, %v", tt.in, got, err)
		}
		if err != nil && (!problem.Is(err, problem.Invalid) || !strings.Contains(problem.Message(err), "path")) {
			t.Errorf("cleanRepoPath(%q): error %v", tt.in, err)
		}
	}
}

func TestArchivePrefix(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"x", "x/", true},
		{"x/", "x/", true},
		{"a/b", "a/b/", true},
		{"../x", "", false},
		{"-x", "", false},
		{"a/-x", "", false},
		{"/abs", "", false},
		{"a\nb", "", false},
		{`a\b`, "", false},
		{"a:b", "", false},
	}
	for _, tt := range tests {
		got, err := archivePrefix(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("archivePrefix(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestBranchRef(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"main", "refs/heads/main", true},
		{"refs/heads/main", "refs/heads/main", true},
		{"feature/x-1", "refs/heads/feature/x-1", true},
		{"-x", "", false},
		{"a/-x", "", false},
		{"refs/heads/-x", "", false},
		{"a..b", "", false},
		{"a.lock", "", false},
		{".a", "", false},
		{"a/", "", false},
		{"a b", "", false},
		{"a\x00", "", false},
		{"HEAD", "", false},
		{"@", "", false},
		{"a@{1}", "", false},
		{"", "", false},
		// gitref's rules (issue 14), reached through store and hooks.
		{"refs/heads/HEAD", "", false},
		{"refs/heads/@", "", false},
		{"a/@", "", false},
		{"\xff", "", false},
		{"a\u0085", "", false},
	}
	for _, tt := range tests {
		got, err := branchRef("name", tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("branchRef(%q) = %q, %v", tt.in, got, err)
		}
		if err != nil && !strings.HasPrefix(problem.Message(err), "name: ") {
			t.Errorf("branchRef(%q): message %q does not name the field", tt.in, problem.Message(err))
		}
	}
}

func TestParseDiff(t *testing.T) {
	text := `diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@ func
 one
-two
+TWO
 three
\ No newline at end of file
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
diff --git a/old name.txt b/renamed.txt
similarity index 90%
rename from old name.txt
rename to renamed.txt
diff --git a/img.png b/img.png
index 4444444..5555555 100644
Binary files a/img.png and b/img.png differ
diff --git "a/caf\303\251.txt" "b/caf\303\251.txt"
deleted file mode 100644
--- "a/caf\303\251.txt"
+++ /dev/null
@@ -1 +0,0 @@
-x
`
	diffs, cut := parseDiff([]byte(text), 100)
	if cut || len(diffs) != 5 {
		t.Fatalf("%d diffs, cut %v", len(diffs), cut)
	}
	a := diffs[0]
	if a.Source.ToString != "a.txt" || a.Destination.ToString != "a.txt" || len(a.Hunks) != 1 {
		t.Fatalf("a.txt: %+v", a)
	}
	h := a.Hunks[0]
	if h.SourceLine != 1 || h.SourceSpan != 3 || h.DestinationLine != 1 || h.DestinationSpan != 3 || len(h.Segments) != 4 {
		t.Fatalf("hunk %+v", h)
	}
	wantSegs := []struct {
		typ       string
		line      string
		src, dest int
	}{{"CONTEXT", "one", 1, 1}, {"REMOVED", "two", 2, 2}, {"ADDED", "TWO", 3, 2}, {"CONTEXT", "three", 3, 3}}
	for i, w := range wantSegs {
		s := h.Segments[i]
		if s.Type != w.typ || s.Lines[0].Line != w.line || s.Lines[0].Source != w.src || s.Lines[0].Destination != w.dest {
			t.Errorf("segment %d: %+v, want %+v", i, s, w)
		}
	}
	if n := diffs[1]; n.Source != nil || n.Destination.ToString != "new.txt" || n.Hunks[0].DestinationSpan != 1 {
		t.Errorf("new file: %+v", n)
	}
	if r := diffs[2]; r.Source.ToString != "old name.txt" || r.Destination.ToString != "renamed.txt" || len(r.Hunks) != 0 {
		t.Errorf("rename: %+v", r)
	}
	if b := diffs[3]; !b.Binary || b.Source.ToString != "img.png" || b.Destination.Extension != "png" {
		t.Errorf("binary: %+v", b)
	}
	if d := diffs[4]; d.Source.ToString != "café.txt" || d.Destination != nil {
		t.Errorf("deleted quoted: %+v", d)
	}

	diffs, cut = parseDiff([]byte(text), 3)
	if !cut || len(diffs) != 1 || !diffs[0].Truncated || !diffs[0].Hunks[0].Truncated {
		t.Errorf("truncated parse: cut %v, %+v", cut, diffs)
	}
}

func TestFilteredPage(t *testing.T) {
	rows := make([]int, 450)
	for i := range rows {
		rows[i] = i
	}
	fetch := func(p store.Page) ([]int, error) {
		if p.Start >= len(rows) {
			return nil, nil
		}
		return rows[p.Start:min(len(rows), p.Start+p.Limit)], nil
	}
	even := func(v *int) (bool, error) { return *v%2 == 0, nil }
	tests := []struct {
		pg    store.Page
		first int
		size  int
		last  bool
	}{
		{store.Page{Start: 0, Limit: 10}, 0, 10, false},
		{store.Page{Start: 100, Limit: 10}, 200, 10, false},
		{store.Page{Start: 220, Limit: 10}, 440, 5, true},
		{store.Page{Start: 225, Limit: 10}, -1, 0, true},
		{store.Page{Start: 215, Limit: 10}, 430, 10, true},
	}
	for _, tt := range tests {
		p, err := filteredPage(tt.pg, fetch, even)
		if err != nil {
			t.Fatal(err)
		}
		if p.Size != tt.size || p.IsLastPage != tt.last || (tt.size > 0 && p.Values[0] != tt.first) {
			t.Errorf("%+v: size %d last %v values %v", tt.pg, p.Size, p.IsLastPage, p.Values)
		}
	}
}

// TestRawPageMatchesEncoder: a page written around values rendered
// beforehand is byte for byte what encoding the page would give, on the
// first, a middle, the last and an empty page.
func TestRawPageMatchesEncoder(t *testing.T) {
	values := [][]byte{[]byte(`{"a":1}`), []byte(`"x\u003cy"`), []byte(`[1,2]`), []byte(`null`), []byte(`{"b":{"c":[]}}`)}
	for _, pg := range []store.Page{{Start: 0, Limit: 2}, {Start: 2, Limit: 2}, {Start: 4, Limit: 2}, {Start: 9, Limit: 25}, {Start: 0, Limit: 25}} {
		p := slicePage(values, pg)
		got := rawPage(p, func(b *bytes.Buffer) {
			b.WriteString(`,"fromHash":`)
			writeJSONString(b, "abc<&>")
			b.WriteString(`,"truncated":true`)
		})
		raw := mapPage(p, func(v []byte) json.RawMessage { return v })
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(true)
		if err := enc.Encode(struct {
			pageJSON[json.RawMessage]
			FromHash  string `json:"fromHash"`
			Truncated bool   `json:"truncated"`
		}{raw, "abc<&>", true}); err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Errorf("page %+v:\n got %s\nwant %s", pg, got, want.String())
		}
	}
}
