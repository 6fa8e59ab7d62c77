package web

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHighlighter(t *testing.T) {
	small := []byte("package main\n\nfunc main() {}\n")
	large := []byte("package big\n" + strings.Repeat("var x = 1 // a comment\n", syncHighlightBytes/20))
	var calls atomic.Int32
	h := newHighlighter(highlightCacheBytes)
	h.highlight = func(name string, data []byte) []codeLine {
		calls.Add(1)
		return highlight(name, data)
	}
	coloured := func(lines []codeLine) bool {
		for _, l := range lines {
			if strings.Contains(string(l.HTML), "<span") {
				return true
			}
		}
		return false
	}

	// A small file is highlighted at once, then served from the cache;
	// the same bytes under a name with another lexer are another entry.
	if l := h.lines("a/main.go", small); !coloured(l) || len(l) != 3 {
		t.Fatalf("small file: %d lines, coloured %v", len(l), coloured(l))
	}
	h.lines("b/main.go", small)
	if n := calls.Load(); n != 1 {
		t.Errorf("%d highlight runs for one file under one name, want 1", n)
	}
	h.lines("main.txt", small)
	if n := calls.Load(); n != 2 {
		t.Errorf("%d highlight runs, want 2 (a .txt name is another lexer)", n)
	}

	// A large file is plain the first time and coloured once the
	// background run is done.
	l := h.lines("big.go", large)
	if coloured(l) || len(l) != strings.Count(string(large), "\n") {
		t.Fatalf("large file, first view: coloured %v, %d lines", coloured(l), len(l))
	}
	deadline := time.Now().Add(10 * time.Second)
	for !h.cached("big.go", large) {
		if time.Now().After(deadline) {
			t.Fatal("the large file was never highlighted in the background")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := h.lines("big.go", large); !coloured(l) {
		t.Error("large file, later view: not coloured")
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d highlight runs, want 3", n)
	}
}

func TestHighlighterEvicts(t *testing.T) {
	h := newHighlighter(32 << 10)
	var files [][]byte
	for i := range 20 {
		files = append(files, []byte(strings.Repeat("x", 10)+"\n"+strings.Repeat("y := "+itoa(i)+"\n", 20)))
		h.lines("f.go", files[i])
	}
	if h.size > h.max {
		t.Errorf("cache holds %d bytes, over its bound %d", h.size, h.max)
	}
	if h.cached("f.go", files[0]) || !h.cached("f.go", files[19]) {
		t.Error("want the oldest entry evicted and the newest kept")
	}
	// An entry over a quarter of the bound is not kept at all.
	big := []byte(strings.Repeat("z := 1\n", 3000))
	h.put(keyOf("big.go", big), highlight("big.go", big))
	if h.cached("big.go", big) {
		t.Error("an entry larger than a quarter of the cache was kept")
	}
}
