// Package pktline reads and writes git's pkt-line framing, parses the
// upload-pack requests the pack cache keys on and the command section of
// receive-pack requests (ParseReceiveRequest), and writes receive-pack's
// success report (WriteReceiveSuccess), which hosting sends on its own for
// a retried push that is already in place. It is also the one parser of
// GIT_PROTOCOL (ValidProtocol, ProtocolVersion; see protocol.go).
//
// A pkt-line is four hex digits giving the length of the whole line
// (header included) followed by that many bytes minus four; "0000" is a
// flush, "0001" a delimiter and "0002" a response end (protocol v2), and
// 65520 bytes is the largest line git writes or accepts (LARGE_PACKET_MAX in
// git's pkt-line.h). See gitprotocol-common(5) and gitprotocol-v2(5).
//
// Everything here reads bytes a client sent, so a malformed length is an
// error, never a panic or an allocation the header asked for: the Reader
// reuses one 64 KiB buffer and the parsers bound both the bytes and the
// number of lines they keep. They are fuzzed, and so is CheckFraming, which
// the HTTP transport puts between a request body and git.
//
// Errors reach git clients through WriteProblem, in whichever form the
// conversation allows (an ERR line, the side-band error band, SSH stderr),
// always with the same text (ErrorText).
//
// The Reader reads exactly the bytes of each packet and never buffers ahead,
// so after ParseUploadRequest the underlying reader is positioned right after
// the request: an SSH session can hand the rest of its stream to git.
package pktline

import (
	"fmt"
	"io"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
)

const (
	// MaxPacketSize is the largest pkt-line, header included.
	MaxPacketSize = 65520
	// MaxPayload is the most data one pkt-line carries.
	MaxPayload = MaxPacketSize - 4
)

// Type is the kind of a packet.
type Type int

const (
	Data        Type = iota // a line with a payload (possibly empty: "0004")
	Flush                   // 0000
	Delim                   // 0001, v2 section delimiter
	ResponseEnd             // 0002, v2 end of a stateless response
)

func (t Type) String() string {
	switch t {
	case Flush:
		return "flush"
	case Delim:
		return "delim"
	case ResponseEnd:
		return "response-end"
	default:
		return "data"
	}
}

// Packet is one pkt-line.
type Packet struct {
	Type    Type
	Payload []byte // only for Data; valid until the next ReadPacket
}

// ErrMalformed is wrapped by every framing error.
var ErrMalformed = problem.New(problem.Invalid, "malformed pkt-line")

// Reader reads pkt-lines from an io.Reader.
type Reader struct {
	r   io.Reader
	buf [MaxPacketSize]byte
}

// NewReader returns a Reader reading from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// ReadPacket reads the next packet. At a clean end of input it returns
// io.EOF; input ending inside a packet is io.ErrUnexpectedEOF.
func (r *Reader) ReadPacket() (Packet, error) {
	hdr := r.buf[:4]
	if _, err := io.ReadFull(r.r, hdr); err != nil {
		return Packet{}, err
	}
	n, ok := parseHex4(hdr)
	if !ok {
		return Packet{}, fmt.Errorf("%w: bad length %q", ErrMalformed, hdr)
	}
	switch {
	case n == 0:
		return Packet{Type: Flush}, nil
	case n == 1:
		return Packet{Type: Delim}, nil
	case n == 2:
		return Packet{Type: ResponseEnd}, nil
	case n < 4:
		return Packet{}, fmt.Errorf("%w: length %d", ErrMalformed, n)
	case n > MaxPacketSize:
		return Packet{}, fmt.Errorf("%w: length %d over %d", ErrMalformed, n, MaxPacketSize)
	}
	payload := r.buf[4:n]
	if _, err := io.ReadFull(r.r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Packet{}, err
	}
	return Packet{Type: Data, Payload: payload}, nil
}

// Length reads a pkt-line's four-digit hex length header (len(hdr) == 4),
// for a caller that watches a stream go by rather than reading it packet
// by packet (hosting's hook relay).
func Length(hdr []byte) (int, bool) {
	if len(hdr) != 4 {
		return 0, false
	}
	return parseHex4(hdr)
}

func parseHex4(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int(d)
	}
	return n, true
}

const hexDigits = "0123456789abcdef"

// Writer writes pkt-lines.
type Writer struct {
	w io.Writer
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WriteData writes p as one pkt-line; p may be at most MaxPayload bytes.
func (w *Writer) WriteData(p []byte) error {
	return writePacket(w.w, nil, p)
}

// WriteString writes s as one pkt-line.
func (w *Writer) WriteString(s string) error {
	if len(s) > MaxPayload {
		return fmt.Errorf("pkt-line payload of %d bytes over %d", len(s), MaxPayload)
	}
	return writePacket(w.w, nil, []byte(s))
}

// Flush writes a flush packet (0000).
func (w *Writer) Flush() error { return writeRaw(w.w, "0000") }

// Delim writes a delimiter packet (0001).
func (w *Writer) Delim() error { return writeRaw(w.w, "0001") }

// ResponseEnd writes a response-end packet (0002).
func (w *Writer) ResponseEnd() error { return writeRaw(w.w, "0002") }

func writeRaw(w io.Writer, s string) error {
	_, err := io.WriteString(w, s)
	return err
}

// writePacket writes prefix and p as one pkt-line with a single Write, so
// concurrent writers of whole packets never interleave inside one.
func writePacket(w io.Writer, prefix, p []byte) error {
	n := 4 + len(prefix) + len(p)
	if n > MaxPacketSize {
		return fmt.Errorf("pkt-line payload of %d bytes over %d", n-4, MaxPayload)
	}
	buf := make([]byte, 4, n)
	buf[0] = hexDigits[n>>12&0xf]
	buf[1] = hexDigits[n>>8&0xf]
	buf[2] = hexDigits[n>>4&0xf]
	buf[3] = hexDigits[n&0xf]
	buf = append(append(buf, prefix...), p...)
	_, err := w.Write(buf)
	return err
}

// WriteError writes an "ERR <msg>" pkt-line, which git clients show as
// "remote error: <msg>" and then stop. Line breaks in msg become spaces
// (the client prints one line) and an over-long message is cut. For a
// problem error, WriteProblem renders the message.
func WriteError(w io.Writer, msg string) error {
	msg = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, msg)
	return writePacket(w, nil, []byte(cutText("ERR "+msg, MaxPayload-1)+"\n"))
}

// Sideband bands (gitprotocol-pack(5)).
const (
	BandData     byte = 1 // pack data
	BandProgress byte = 2 // progress text, shown on the client's stderr
	BandError    byte = 3 // fatal error text; the client stops
)

// Data bytes per sideband packet: 1000-byte packets for side-band and
// 65520-byte packets for side-band-64k, minus the 4-byte header and the band
// byte (git's send_sideband uses packet_max - 5).
const (
	SidebandMax    = 1000 - 5
	Sideband64kMax = MaxPacketSize - 5
)

// Sideband is an io.Writer that wraps everything written to it in
// pkt-lines on one band.
type Sideband struct {
	w          io.Writer
	band       []byte
	maxPayload int
}

// NewSideband returns a writer putting data on band in packets of at most
// maxPayload data bytes (SidebandMax or Sideband64kMax, per the capability
// the client chose).
func NewSideband(w io.Writer, band byte, maxPayload int) *Sideband {
	if maxPayload <= 0 || maxPayload > Sideband64kMax {
		maxPayload = Sideband64kMax
	}
	return &Sideband{w: w, band: []byte{band}, maxPayload: maxPayload}
}

// Write splits p into packets. A short count means the packets before the
// failing one were written.
func (s *Sideband) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := min(len(p), s.maxPayload)
		if err := writePacket(s.w, s.band, p[:chunk]); err != nil {
			return written, err
		}
		written += chunk
		p = p[chunk:]
	}
	return written, nil
}

// Progress writes msg on the progress band (2) of a side-band-64k stream.
// Git clients print it as "remote: <msg>"; msg should end in "\n" or "\r".
func Progress(w io.Writer, msg string) error {
	_, err := NewSideband(w, BandProgress, Sideband64kMax).Write([]byte(msg))
	return err
}
