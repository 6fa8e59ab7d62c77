package pktline

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"github.com/sluice-scm/sluice/internal/problem"
)

// CheckFraming returns a reader that passes r through unchanged, failing
// with an Invalid problem (wrapping ErrMalformed) at the first malformed
// pkt-line length, or when the input ends inside a packet, before any byte
// of the bad header has been passed on. A transport puts it between a
// client's request body and git, so that a malformed request ends with a
// message the user can read instead of git's "the remote end hung up".
//
// Only the framing is checked: payloads pass through unread, so the cost
// is one copy and no allocation beyond a small buffer.
func CheckFraming(r io.Reader) io.Reader {
	return &framingReader{br: bufio.NewReader(r)}
}

// CheckFramingUntilFlush is CheckFraming for a stream whose pkt-lines end
// at the first flush: receive-pack's ref commands are pkt-lines, the pack
// after them is not. Everything after the flush passes through unchecked.
func CheckFramingUntilFlush(r io.Reader) io.Reader {
	return &framingReader{br: bufio.NewReader(r), untilFlush: true}
}

// framingReader checks each length header with Peek before passing it on,
// so a bad header never reaches the consumer, not even in part.
type framingReader struct {
	br         *bufio.Reader
	untilFlush bool
	left       int  // bytes of the current packet (header included) still to pass on
	done       bool // past the flush that ends the checked section
	bad        error
}

func (f *framingReader) Read(p []byte) (int, error) {
	if f.bad != nil {
		return 0, f.bad
	}
	if f.done {
		return f.br.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if f.left == 0 {
		hdr, err := f.br.Peek(4)
		switch {
		case err == io.EOF && len(hdr) == 0:
			return 0, io.EOF
		case err == io.EOF:
			f.bad = problem.Wrap(problem.Invalid, ErrMalformed, "request ends inside a pkt-line")
			return 0, f.bad
		case err != nil:
			return 0, err
		}
		n, ok := frameLen(hdr)
		if !ok {
			f.bad = problem.Wrap(problem.Invalid, ErrMalformed, fmt.Sprintf("malformed pkt-line length %q", hdr))
			return 0, f.bad
		}
		if n == 0 && f.untilFlush {
			f.done = true
			return f.br.Read(p)
		}
		// A flush, delim or response-end packet is its header alone.
		f.left = max(n, 4)
	}
	n, err := f.br.Read(p[:min(len(p), f.left)])
	f.left -= n
	if err == io.EOF && f.left > 0 {
		f.bad = problem.Wrap(problem.Invalid, ErrMalformed, "request ends inside a pkt-line")
		return n, f.bad
	}
	if err == io.EOF && n > 0 {
		err = nil // the next Read reports the end, at a packet boundary
	}
	return n, err
}

// frameLen parses a pkt-line length header: 0 (flush), 1 (delim), 2
// (response-end) or 4..MaxPacketSize.
func frameLen(hdr []byte) (int, bool) {
	n, ok := parseHex4(hdr)
	if !ok || n == 3 || n > MaxPacketSize {
		return 0, false
	}
	return n, true
}

// PeekSideband reports whether a receive-pack request asks for side-band
// messages, reading its first pkt-line ("old new ref\0capabilities")
// without consuming it: the returned reader yields the whole request.
// Anything unreadable counts as no; the error surfaces when the request is
// read.
func PeekSideband(r io.Reader) (*bufio.Reader, bool) {
	br := bufio.NewReaderSize(r, MaxPacketSize)
	hdr, err := br.Peek(4)
	if err != nil {
		return br, false
	}
	n, ok := frameLen(hdr)
	if !ok || n <= 4 {
		return br, false
	}
	line, err := br.Peek(n)
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
