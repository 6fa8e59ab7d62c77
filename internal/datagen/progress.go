package datagen

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// bar is a one-line progress bar redrawn at most ten times a second.
type bar struct {
	w     io.Writer
	name  string
	total int
	last  time.Time
	start time.Time
}

func newBar(w io.Writer) *bar { return &bar{w: w} }

func (b *bar) stage(name string, total int) {
	if b.w == nil {
		return
	}
	if b.name != "" {
		b.draw(b.total, true)
	}
	b.name, b.total, b.start, b.last = name, total, time.Now(), time.Time{}
}

func (b *bar) set(n int) {
	if b.w == nil || time.Since(b.last) < 100*time.Millisecond && n < b.total {
		return
	}
	b.draw(n, false)
}

func (b *bar) draw(n int, final bool) {
	b.last = time.Now()
	const width = 30
	filled := width
	if b.total > 0 {
		filled = min(width, n*width/b.total)
	}
	end := ""
	if final {
		end = fmt.Sprintf(" %s\n", time.Since(b.start).Round(time.Millisecond))
	}
	fmt.Fprintf(b.w, "\r%-24s [%s%s] %d/%d%s", b.name, strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, b.total, end)
}

func (b *bar) done() {
	if b.w != nil && b.name != "" {
		b.draw(b.total, true)
		b.name = ""
	}
}

func inode(fi os.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Ino, true
}
