package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A private pkt-line codec. internal/pktline is the server's parser and is
// fuzzed for hostile input; the load client only needs to frame its own
// requests and walk well-formed responses, and keeping its codec here lets
// the lab measure a server without depending on the server's own parsing
// code being right.

// maxPktLen is the largest pkt-line git allows: 65516 bytes of payload
// plus the four length digits (LARGE_PACKET_MAX in git's pkt-line.h).
const maxPktLen = 65520

// pktKind tells data lines from the special packets.
type pktKind int

const (
	pktData pktKind = iota
	pktFlush
	pktDelim
	pktResponseEnd
)

// pktReader reads pkt-lines from r into one reused buffer: the payload
// returned by next is only valid until the following call.
type pktReader struct {
	r   io.Reader
	hdr [4]byte
	buf []byte
}

func newPktReader(r io.Reader) *pktReader {
	return &pktReader{r: r, buf: make([]byte, maxPktLen)}
}

// next returns the kind of the next packet and, for data, its payload.
func (p *pktReader) next() (pktKind, []byte, error) {
	if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	n, err := strconv.ParseUint(string(p.hdr[:]), 16, 16)
	if err != nil {
		return 0, nil, fmt.Errorf("bad pkt-line length %q", p.hdr[:])
	}
	switch n {
	case 0:
		return pktFlush, nil, nil
	case 1:
		return pktDelim, nil, nil
	case 2:
		return pktResponseEnd, nil, nil
	case 3:
		return 0, nil, fmt.Errorf("bad pkt-line length %q", p.hdr[:])
	}
	if n > maxPktLen {
		return 0, nil, fmt.Errorf("pkt-line too long: %d", n)
	}
	b := p.buf[:n-4]
	if _, err := io.ReadFull(p.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return pktData, b, nil
}

// line reads a data packet and returns it without its trailing LF; an ERR
// packet becomes an error. A special packet is returned as its kind.
func (p *pktReader) line() (pktKind, string, error) {
	kind, b, err := p.next()
	if err != nil || kind != pktData {
		return kind, "", err
	}
	s := string(bytes.TrimSuffix(b, []byte("\n")))
	if rest, ok := strings.CutPrefix(s, "ERR "); ok {
		return 0, "", &RemoteError{Message: rest}
	}
	return pktData, s, nil
}

// pktBuffer frames a request body.
type pktBuffer struct {
	bytes.Buffer
}

func (b *pktBuffer) line(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Fprintf(&b.Buffer, "%04x%s", len(s)+4, s)
}

func (b *pktBuffer) flush() { b.WriteString("0000") }
func (b *pktBuffer) delim() { b.WriteString("0001") }
