package web

import (
	"container/list"
	"crypto/sha256"
	"path"
	"strings"
	"sync"
)

// Syntax highlighting within the page budget. chroma's lexers are regular
// expression machines: on the 2-core lab machine its Go lexer tokenises
// about 0.7 MB/s, so a 37 KB file takes 55 ms and a 256 KB one over 350 ms,
// the whole 100 ms budget several times over. Two things keep file views
// fast:
//
//   - Highlighted lines are cached by content (the file name, which picks
//     the lexer, and a SHA-256 of the bytes), so a file is tokenised once
//     however many branches, commits and forks show the same blob.
//   - A file not in the cache and larger than syncHighlightBytes is shown
//     plain this time and highlighted in the background, one file at a
//     time (the pool is the server's, not the visitor's), so its next view
//     is coloured. Smaller files are highlighted inline: that costs at
//     most ~25 ms.

const (
	// syncHighlightBytes is the largest file highlighted while the
	// visitor waits: ~25 ms at 0.7 MB/s.
	syncHighlightBytes = 16 << 10
	// highlightCacheBytes bounds the cache (HTML bytes held).
	highlightCacheBytes = 32 << 20
)

type hlKey [sha256.Size]byte

// keyOf is the cache key: the base name picks the lexer, the bytes the rest.
func keyOf(name string, data []byte) hlKey {
	hs := sha256.New()
	hs.Write([]byte(path.Base(name)))
	hs.Write([]byte{0})
	hs.Write(data)
	var key hlKey
	hs.Sum(key[:0])
	return key
}

type hlEntry struct {
	key   hlKey
	lines []codeLine
	size  int64
}

// highlighter is the cache and its one background worker slot.
type highlighter struct {
	mu      sync.Mutex
	max     int64
	size    int64
	lru     *list.List // of *hlEntry, most recent first
	items   map[hlKey]*list.Element
	pending map[hlKey]bool
	slot    chan struct{} // one background highlight at a time
	// highlight is the function cached (highlight, or a test's).
	highlight func(name string, data []byte) []codeLine
}

func newHighlighter(maxBytes int64) *highlighter {
	return &highlighter{max: maxBytes, lru: list.New(), items: map[hlKey]*list.Element{},
		pending: map[hlKey]bool{}, slot: make(chan struct{}, 1), highlight: highlight}
}

// lines returns the file's lines, highlighted when cached or cheap; see
// above. The caller must not modify the result (it may be shared).
func (h *highlighter) lines(name string, data []byte) []codeLine {
	key := keyOf(name, data)

	h.mu.Lock()
	if e, ok := h.items[key]; ok {
		h.lru.MoveToFront(e)
		lines := e.Value.(*hlEntry).lines
		h.mu.Unlock()
		return lines
	}
	h.mu.Unlock()

	if len(data) <= syncHighlightBytes {
		lines := h.highlight(name, data)
		h.put(key, lines)
		return lines
	}
	h.background(key, name, data)
	return plainLines(strings.TrimSuffix(strings.ToValidUTF8(string(data), "\uFFFD"), "\n"))
}

// background highlights data unless the worker is busy or the file is
// already being done; a busy worker means the next view tries again.
func (h *highlighter) background(key hlKey, name string, data []byte) {
	h.mu.Lock()
	if h.pending[key] {
		h.mu.Unlock()
		return
	}
	select {
	case h.slot <- struct{}{}:
	default:
		h.mu.Unlock()
		return
	}
	h.pending[key] = true
	h.mu.Unlock()
	// The request's buffer may be reused once the handler returns.
	data = append([]byte(nil), data...)
	go func() {
		lines := h.highlight(name, data)
		h.put(key, lines)
		h.mu.Lock()
		delete(h.pending, key)
		h.mu.Unlock()
		<-h.slot
	}()
}

func (h *highlighter) put(key hlKey, lines []codeLine) {
	size := int64(64)
	for _, l := range lines {
		size += int64(len(l.HTML)) + 32
	}
	if size > h.max/4 {
		return // one file must not flush the cache
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.items[key]; ok {
		return
	}
	h.items[key] = h.lru.PushFront(&hlEntry{key: key, lines: lines, size: size})
	h.size += size
	for h.size > h.max {
		e := h.lru.Back()
		old := e.Value.(*hlEntry)
		h.lru.Remove(e)
		delete(h.items, old.key)
		h.size -= old.size
	}
}

// cached reports whether the file's highlighting is in the cache (tests).
func (h *highlighter) cached(name string, data []byte) bool {
	key := keyOf(name, data)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.items[key]
	return ok
}
