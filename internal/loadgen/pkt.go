package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// A private pkt-line codec. internal/pktline is the server's parser and is
// fuzzed for hostile input; the load client only needs to frame its own
// requests and walk well-formed responses, and keeping its codec here lets
// the lab measure a server without depending on the server's own parsing
// code being right.
//
// The reader is on the load client's hot path: a clone storm moves
// gigabytes a second through it on a machine whose cores the servers
// under test need too. So it reads straight from the response body into
// one large buffer, parses pkt-lines where they lie, and hands side-band
// pack data to the verifier as slices of that same buffer, whole packets
// or not: no bufio layer, no per-packet copy or allocation.

// maxPktLen is the largest pkt-line git allows: 65516 bytes of payload
// plus the four length digits (LARGE_PACKET_MAX in git's pkt-line.h).
const maxPktLen = 65520

// readBufSize is the reader's buffer: a few maximal packets, so that one
// read(2) returns as much as a loopback socket holds (the kernel's default
// receive buffer grows to a few hundred kilobytes) and whole packets
// rarely straddle its end.
const readBufSize = 256 << 10

var readBufs = sync.Pool{New: func() any {
	b := make([]byte, readBufSize)
	return &b
}}

// pktKind tells data lines from the special packets.
type pktKind int

const (
	pktData pktKind = iota
	pktFlush
	pktDelim
	pktResponseEnd
)

// pktReader reads pkt-lines from r into one reused buffer: the payload
// returned by next, and the slices demux passes on, are only valid until
// the following call.
type pktReader struct {
	r   io.Reader
	buf []byte
	// buf[pos:end] is read and not yet consumed.
	pos, end int
	// err is r's first error, returned once the buffered bytes run out.
	err  error
	pool *[]byte
}

// newPktReader reads from r with a buffer from the pool; release gives it
// back.
func newPktReader(r io.Reader) *pktReader {
	bp := readBufs.Get().(*[]byte)
	return &pktReader{r: r, buf: *bp, pool: bp}
}

// release returns the buffer to the pool. The reader, and any slice it
// handed out, must not be used afterwards; a later call panics on the nil
// buffer rather than read another response's bytes.
func (p *pktReader) release() {
	if p.pool != nil {
		readBufs.Put(p.pool)
		p.pool, p.buf = nil, nil
	}
}

// fill makes at least n bytes available at buf[pos:], reading from r as
// often as needed but never asking for more once n bytes are there: over
// SSH the server speaks only after the client does, so reading ahead must
// not wait for bytes that are not coming.
func (p *pktReader) fill(n int) error {
	if p.pos == p.end {
		p.pos, p.end = 0, 0
	}
	for zeros := 0; p.end-p.pos < n; {
		if p.err != nil {
			if errors.Is(p.err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return p.err
		}
		if p.pos+n > len(p.buf) {
			// The packet straddles the end: move its start to the front.
			p.end = copy(p.buf, p.buf[p.pos:p.end])
			p.pos = 0
		}
		m, err := p.r.Read(p.buf[p.end:])
		p.end += m
		if err != nil {
			p.err = err
		}
		if m == 0 && err == nil {
			if zeros++; zeros > 100 {
				p.err = io.ErrNoProgress
			}
		}
	}
	return nil
}

// header parses the 4-digit length at buf[pos:], which fill made
// available.
func (p *pktReader) header() (int, error) {
	n := 0
	for _, c := range p.buf[p.pos : p.pos+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("bad pkt-line length %q", p.buf[p.pos:p.pos+4])
		}
		n = n<<4 | int(d)
	}
	if n == 3 {
		return 0, fmt.Errorf("bad pkt-line length %q", p.buf[p.pos:p.pos+4])
	}
	if n > maxPktLen {
		return 0, fmt.Errorf("pkt-line too long: %d", n)
	}
	return n, nil
}

// special maps the lengths below 4 to their packet kinds.
func special(n int) pktKind {
	switch n {
	case 0:
		return pktFlush
	case 1:
		return pktDelim
	}
	return pktResponseEnd
}

// next returns the kind of the next packet and, for data, its payload.
func (p *pktReader) next() (pktKind, []byte, error) {
	if err := p.fill(4); err != nil {
		return 0, nil, err
	}
	n, err := p.header()
	if err != nil {
		return 0, nil, err
	}
	if n < 4 {
		p.pos += 4
		return special(n), nil, nil
	}
	if err := p.fill(n); err != nil {
		return 0, nil, err
	}
	b := p.buf[p.pos+4 : p.pos+n]
	p.pos += n
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

// demux reads side-band packets up to a flush: band 1 goes to data, band 2
// (progress) is dropped, band 3 is the server's fatal error. Band 1 is
// passed on as it lies in the buffer, in as many pieces as the reads cut
// it into, so data must not keep the slices.
func demux(pkt *pktReader, data func([]byte) error) error {
	for {
		if err := pkt.fill(4); err != nil {
			return fmt.Errorf("read side band: %w", err)
		}
		n, err := pkt.header()
		if err != nil {
			return fmt.Errorf("read side band: %w", err)
		}
		switch {
		case n == 0:
			pkt.pos += 4
			return nil
		case n < 4:
			return fmt.Errorf("read side band: unexpected packet %d", special(n))
		case n == 4:
			return errors.New("read side band: empty packet")
		}
		if err := pkt.fill(5); err != nil {
			return fmt.Errorf("read side band: %w", err)
		}
		band := pkt.buf[pkt.pos+4]
		if band != 1 && band != 2 {
			// An error: read the whole packet to report it.
			if err := pkt.fill(n); err != nil {
				return fmt.Errorf("read side band: %w", err)
			}
			b := pkt.buf[pkt.pos+4 : pkt.pos+n]
			pkt.pos += n
			if band == 3 {
				return &RemoteError{Message: strings.TrimSpace(string(b[1:]))}
			}
			if bytes.HasPrefix(b, []byte("ERR ")) {
				return &RemoteError{Message: strings.TrimSpace(string(b[4:]))}
			}
			return fmt.Errorf("read side band: unknown band %d", band)
		}
		pkt.pos += 5
		for rest := n - 5; rest > 0; {
			if err := pkt.fill(1); err != nil {
				return fmt.Errorf("read side band: %w", err)
			}
			k := min(rest, pkt.end-pkt.pos)
			if band == 1 {
				if err := data(pkt.buf[pkt.pos : pkt.pos+k]); err != nil {
					return err
				}
			}
			pkt.pos += k
			rest -= k
		}
	}
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
