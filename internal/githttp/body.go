package githttp

import (
	"bufio"
	"bytes"
	"io"
	"strconv"

	"github.com/sluice-scm/sluice/internal/problem"
)

// maxPktLen is the largest pkt-line git sends or accepts, header included
// (LARGE_PACKET_MAX in git's pkt-line.h).
const maxPktLen = 65520

// framingReader passes a pkt-line stream through unchanged, failing with an
// Invalid problem at the first malformed length header, before git sees it.
// With firstSection set it checks only up to the first flush (receive-pack
// sends its ref commands as pkt-lines, then the raw pack).
type framingReader struct {
	r            io.Reader
	firstSection bool
	hdr          [4]byte
	hdrN         int
	remaining    int  // payload bytes left in the current pkt-line
	done         bool // past the checked section
	bad          error
}

func (f *framingReader) Read(p []byte) (int, error) {
	if f.bad != nil {
		return 0, f.bad
	}
	n, err := f.r.Read(p)
	if f.done {
		return n, err
	}
	for i := 0; i < n; {
		if f.remaining > 0 {
			step := min(f.remaining, n-i)
			f.remaining -= step
			i += step
			continue
		}
		f.hdr[f.hdrN] = p[i]
		f.hdrN++
		i++
		if f.hdrN < 4 {
			continue
		}
		f.hdrN = 0
		l, ok := pktLen(f.hdr[:])
		if !ok {
			f.bad = problem.New(problem.Invalid, "malformed pkt-line length %q", f.hdr[:])
			return i - 4, f.bad
		}
		if l >= 4 {
			f.remaining = l - 4
		} else if l == 0 && f.firstSection {
			f.done = true
			return n, err
		}
	}
	if err == io.EOF && (f.remaining > 0 || f.hdrN > 0) {
		f.bad = problem.New(problem.Invalid, "request ends inside a pkt-line")
		return n, f.bad
	}
	return n, err
}

// pktLen parses a pkt-line length header: 0 (flush), 1 (delim), 2
// (response-end) or 4..maxPktLen.
func pktLen(h []byte) (int, bool) {
	v, err := strconv.ParseUint(string(h), 16, 16)
	if err != nil || v == 3 || v > maxPktLen {
		return 0, false
	}
	return int(v), true
}

// peekSideband reports whether a receive-pack request asks for side-band
// messages, reading its first pkt-line ("old new ref\0capabilities") without
// consuming it. Anything unreadable counts as no: the error surfaces when
// git reads the body.
func peekSideband(body io.Reader) (*bufio.Reader, bool) {
	br := bufio.NewReaderSize(body, maxPktLen)
	h, err := br.Peek(4)
	if err != nil {
		return br, false
	}
	l, ok := pktLen(h)
	if !ok || l <= 4 {
		return br, false
	}
	line, err := br.Peek(l)
	if err != nil {
		return br, false
	}
	_, caps, found := bytes.Cut(line[4:], []byte{0})
	if !found {
		return br, false
	}
	for _, c := range bytes.Fields(caps) {
		if string(c) == "side-band-64k" || string(c) == "side-band" {
			return br, true
		}
	}
	return br, false
}
