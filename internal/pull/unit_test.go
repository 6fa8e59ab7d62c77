package pull

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

func TestMapLine(t *testing.T) {
	// Old file lines 1..20; the hunks are git -U0 old-side ranges.
	hunks := []lineRange{
		{oldStart: 2, oldLen: 0, newLen: 2}, // two lines inserted after line 2
		{oldStart: 5, oldLen: 1, newLen: 1}, // line 5 rewritten
		{oldStart: 9, oldLen: 2, newLen: 0}, // lines 9-10 removed
		{oldStart: 15, oldLen: 1, newLen: 3},
	}
	for _, tc := range []struct {
		line, want int
		ok         bool
	}{
		{1, 1, true},
		{2, 2, true},
		{3, 5, true},
		{4, 6, true},
		{5, 0, false},
		{6, 8, true},
		{8, 10, true},
		{9, 0, false},
		{10, 0, false},
		{11, 11, true},
		{14, 14, true},
		{15, 0, false},
		{16, 18, true},
	} {
		got, ok := mapLine(hunks, tc.line)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("mapLine(%d) = %d, %v; want %d, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

const sampleDiff = `diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,4 @@ func main
 one
-two
+TWO
+two and a half
 three
diff --git a/old name.txt b/new name.txt
similarity index 90%
rename from old name.txt
rename to new name.txt
diff --git a/bin.dat b/bin.dat
new file mode 100644
index 0000000..3333333
Binary files /dev/null and b/bin.dat differ
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
`

func TestSplitAndParse(t *testing.T) {
	files := splitFiles([]byte(sampleDiff))
	if len(files) != 4 {
		t.Fatalf("%d files", len(files))
	}
	want := []struct {
		src, dst string
		binary   bool
	}{
		{"a.txt", "a.txt", false},
		{"old name.txt", "new name.txt", false},
		{"", "bin.dat", true},
		{"gone.txt", "", false},
	}
	for i, w := range want {
		f := files[i]
		if f.src != w.src || f.dst != w.dst || f.binary != w.binary {
			t.Errorf("file %d: %q -> %q binary %v; want %+v", i, f.src, f.dst, f.binary, w)
		}
	}
	h := parseHunks(files[0].body)
	if len(h) != 1 || h[0].SourceLine != 1 || h[0].SourceSpan != 3 || h[0].DestinationSpan != 4 || h[0].Context != "func main" {
		t.Fatalf("hunk header: %+v", h)
	}
	var types []string
	for _, s := range h[0].Segments {
		types = append(types, s.Type)
	}
	if strings.Join(types, ",") != "CONTEXT,REMOVED,ADDED,CONTEXT" {
		t.Fatalf("segments: %v", types)
	}
	added := h[0].Segments[2].Lines
	if len(added) != 2 || added[0].Destination != 2 || added[1].Destination != 3 || added[1].Line != "two and a half" {
		t.Fatalf("added lines: %+v", added)
	}
	if last := h[0].Segments[3].Lines[0]; last.Source != 3 || last.Destination != 4 {
		t.Fatalf("context numbering: %+v", last)
	}
}

func TestFlightJoins(t *testing.T) {
	var f flight[int]
	var runs atomic.Int32
	release := make(chan struct{})
	fn := func(context.Context) (int, error) {
		runs.Add(1)
		<-release
		return 42, nil
	}
	var wg sync.WaitGroup
	results := make([]int, 5)
	joined := make([]bool, 5)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, j, err := f.do(context.Background(), "k", fn)
			if err != nil {
				t.Error(err)
			}
			results[i], joined[i] = v, j
		}()
	}
	// Let every caller arrive before the computation ends.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		n := len(f.calls)
		f.mu.Unlock()
		if n == 1 && runs.Load() == 1 {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("%d computations for one key", runs.Load())
	}
	nj := 0
	for i, v := range results {
		if v != 42 {
			t.Fatalf("caller %d got %d", i, v)
		}
		if joined[i] {
			nj++
		}
	}
	if nj != 4 {
		t.Fatalf("%d callers joined, want 4", nj)
	}
	// A caller that gives up does not cancel the computation for others.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := f.do(ctx, "k2", func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, context.Canceled) && err != nil {
		t.Fatal(err)
	}
}

// TestRenderChanges: the stat's values are Bitbucket's change shape,
// HTML-escaped as the API's encoder escapes, with no trailing newline so
// a page can join them.
func TestRenderChanges(t *testing.T) {
	got, err := renderChanges([]Change{
		{Path: "top.txt", Type: "ADD", Added: 3},
		{Path: "dir/new <&>.go", SrcPath: "old/é.go", Type: "MOVE", Added: 1, Deleted: 2},
		{Path: "img/logo.png", Type: "MODIFY", Binary: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"path":{"components":["top.txt"],"parent":"","name":"top.txt","extension":"txt","toString":"top.txt"},"type":"ADD","nodeType":"FILE","properties":{"linesAdded":3,"linesRemoved":0}}`,
		`{"path":{"components":["dir","new \u003c\u0026\u003e.go"],"parent":"dir","name":"new \u003c\u0026\u003e.go","extension":"go","toString":"dir/new \u003c\u0026\u003e.go"},` +
			`"srcPath":{"components":["old","é.go"],"parent":"old","name":"é.go","extension":"go","toString":"old/é.go"},"type":"MOVE","nodeType":"FILE","properties":{"linesAdded":1,"linesRemoved":2}}`,
		`{"path":{"components":["img","logo.png"],"parent":"img","name":"logo.png","extension":"png","toString":"img/logo.png"},"type":"MODIFY","nodeType":"FILE","binary":true,"properties":{"linesAdded":0,"linesRemoved":0}}`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("value %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// TestStoredDiffRendersPathObjects: a diff stored before the paths became
// Bitbucket's path objects (its stat holds plain strings, its text is
// git's) loads, and renders the new shape.
func TestStoredDiffRendersPathObjects(t *testing.T) {
	d, err := decodeStored(&store.PullDiff{BaseSHA: "a", FromSHA: "b",
		Stat: `[{"path":"src/main.go","type":"MODIFY","added":1,"deleted":1}]`,
		Diff: []byte("diff --git a/src/main.go b/src/main.go\n--- a/src/main.go\n+++ b/src/main.go\n@@ -1 +1 @@\n-old\n+new\n")})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.changes) != 1 || d.changes[0].Path != "src/main.go" {
		t.Fatalf("stat: %+v", d.changes)
	}
	body, err := d.json()
	if err != nil {
		t.Fatal(err)
	}
	want := `"source":{"components":["src","main.go"],"parent":"src","name":"main.go","extension":"go","toString":"src/main.go"},` +
		`"destination":{"components":["src","main.go"],"parent":"src","name":"main.go","extension":"go","toString":"src/main.go"}`
	if !strings.Contains(string(body), want) || !strings.Contains(string(body), `"contextLines":3,"whitespace":"SHOW"`) {
		t.Errorf("rendered: %s", body)
	}
}
