package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// sideBand frames payload into band-b packets of at most size bytes each.
func sideBand(b byte, payload []byte, size int) []byte {
	var out bytes.Buffer
	for len(payload) > 0 {
		n := min(size, len(payload))
		fmt.Fprintf(&out, "%04x", n+5)
		out.WriteByte(b)
		out.Write(payload[:n])
		payload = payload[n:]
	}
	return out.Bytes()
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// readers presents the same bytes the way a socket might: all at once,
// a byte at a time, in odd pieces, and with the last data and EOF in one
// call.
func readers(b []byte) map[string]io.Reader {
	return map[string]io.Reader{
		"whole":    bytes.NewReader(b),
		"one byte": iotest.OneByteReader(bytes.NewReader(b)),
		"half":     iotest.HalfReader(bytes.NewReader(b)),
		"7 bytes":  chunkReader{bytes.NewReader(b), 7},
		"64k+3":    chunkReader{bytes.NewReader(b), 64<<10 + 3},
		"data+eof": iotest.DataErrReader(bytes.NewReader(b)),
	}
}

func TestDemuxSplitReads(t *testing.T) {
	// More than the read buffer holds, in maximal packets (so packets
	// straddle the buffer's end), with progress interleaved and an odd
	// packet size.
	data := make([]byte, readBufSize*2+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var stream bytes.Buffer
	stream.Write(sideBand(1, data[:1000], 999))
	stream.Write(sideBand(2, []byte("Counting objects: 5\r"), 100))
	stream.Write(sideBand(1, data[1000:], maxPktLen-5))
	stream.WriteString("0000")
	stream.WriteString("0009rest\n") // after the flush: not the demuxer's
	for name, r := range readers(stream.Bytes()) {
		t.Run(name, func(t *testing.T) {
			pkt := newPktReader(r)
			defer pkt.release()
			var got bytes.Buffer
			if err := demux(pkt, func(b []byte) error {
				if len(b) == 0 {
					t.Error("empty data slice")
				}
				got.Write(b)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("demuxed %d bytes, want %d (equal prefix %d)", got.Len(), len(data), commonPrefix(got.Bytes(), data))
			}
			if kind, line, err := pkt.line(); err != nil || kind != pktData || line != "rest" {
				t.Errorf("after flush: %v %q %v", kind, line, err)
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func TestDemuxErrors(t *testing.T) {
	tests := []struct {
		name, stream, want string
	}{
		{"band 3", string(sideBand(1, []byte("PACK"), 10)) + string(sideBand(3, []byte("disk full\n"), 100)), "remote: disk full"},
		{"ERR", "000eERR denied", "remote: denied"},
		{"unknown band", string(sideBand(5, []byte("x"), 10)), "unknown band 5"},
		{"empty packet", "0004", "empty packet"},
		{"delimiter", "0001", "unexpected packet"},
		{"bad length", "00zz", "bad pkt-line length"},
		{"length 3", "0003", "bad pkt-line length"},
		{"too long", "fff1", "too long"},
		{"truncated payload", "0010\x01PACK", "unexpected EOF"},
		{"truncated header", "00", "unexpected EOF"},
		{"no flush", string(sideBand(1, []byte("PACK"), 10)), "unexpected EOF"},
	}
	for _, tt := range tests {
		for name, r := range readers([]byte(tt.stream)) {
			pkt := newPktReader(r)
			err := demux(pkt, func([]byte) error { return nil })
			pkt.release()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s/%s: err = %v, want %q", tt.name, name, err, tt.want)
			}
			var re *RemoteError
			if strings.HasPrefix(tt.want, "remote:") && !errors.As(err, &re) {
				t.Errorf("%s/%s: %T is not a RemoteError", tt.name, name, err)
			}
		}
	}
}

func TestPktLinesSplitReads(t *testing.T) {
	var stream pktBuffer
	long := strings.Repeat("x", maxPktLen-5)
	lines := []string{"version 2", "agent=git/2.39", long, "ls-refs=unborn", long, "fetch=shallow"}
	for _, l := range lines {
		stream.line("%s\n", l)
	}
	stream.delim()
	stream.line("after")
	stream.flush()
	for name, r := range readers(stream.Bytes()) {
		pkt := newPktReader(r)
		for i, want := range lines {
			if kind, got, err := pkt.line(); err != nil || kind != pktData || got != want {
				t.Fatalf("%s: line %d: %v %d bytes %v", name, i, kind, len(got), err)
			}
		}
		for _, want := range []pktKind{pktDelim, pktData, pktFlush} {
			if kind, _, err := pkt.line(); err != nil || kind != want {
				t.Fatalf("%s: got %v %v, want %v", name, kind, err, want)
			}
		}
		if _, _, err := pkt.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: at the end: %v", name, err)
		}
		pkt.release()
	}
}

// gatedReader serves one segment per Read call allowed, and fails a Read
// that comes before the test opens the next segment: a client that reads
// ahead of what it needs would block on a real SSH stream.
type gatedReader struct {
	t    *testing.T
	segs [][]byte
	open int
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if len(g.segs) == 0 || g.open == 0 {
		g.t.Error("read beyond the answer the server has sent")
		return 0, io.EOF
	}
	n := copy(p, g.segs[0])
	g.segs[0] = g.segs[0][n:]
	if len(g.segs[0]) == 0 {
		g.segs = g.segs[1:]
		g.open--
	}
	return n, nil
}

func TestPktReaderReadsNoFurtherThanNeeded(t *testing.T) {
	g := &gatedReader{t: t, segs: [][]byte{[]byte("000dversion 20000"), []byte("0009fetch0000")}, open: 1}
	pkt := newPktReader(g)
	defer pkt.release()
	if _, line, err := pkt.line(); err != nil || line != "version 2" {
		t.Fatalf("%q %v", line, err)
	}
	if kind, _, err := pkt.line(); err != nil || kind != pktFlush {
		t.Fatalf("%v %v", kind, err)
	}
	g.open++ // the client "sent its request"; the server answers
	if _, line, err := pkt.line(); err != nil || line != "fetch" {
		t.Fatalf("%q %v", line, err)
	}
}

func TestDemuxDoesNotAllocatePerPacket(t *testing.T) {
	data := bytes.Repeat([]byte("abcdefgh"), 1<<17) // 1 MiB: 17 maximal packets
	stream := append(sideBand(1, data, maxPktLen-5), "0000"...)
	r := bytes.NewReader(stream)
	pkt := newPktReader(r)
	defer pkt.release()
	var n int
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(stream)
		pkt.pos, pkt.end, pkt.err = 0, 0, nil
		n = 0
		if err := demux(pkt, func(b []byte) error { n += len(b); return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if n != len(data) {
		t.Fatalf("demuxed %d bytes, want %d", n, len(data))
	}
	if allocs > 0 {
		t.Errorf("%.0f allocations per 1 MiB demuxed, want none", allocs)
	}
}
