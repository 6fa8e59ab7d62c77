package pktline

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestCheckFraming(t *testing.T) {
	cases := []struct {
		name       string
		in         string
		untilFlush bool
		pass       string // what reaches the consumer
		ok         bool
	}{
		{"empty", "", false, "", true},
		{"flush only", "0000", false, "0000", true},
		{"valid stream", "0009have\n0001000200040000", false, "0009have\n0001000200040000", true},
		{"upper-case hex", "000Ahave\n\n0000", false, "000Ahave\n\n0000", true},
		{"largest packet", "fff0" + strings.Repeat("x", MaxPayload), false, "fff0" + strings.Repeat("x", MaxPayload), true},
		{"length 3", "0003", false, "", false},
		{"not hex", "0009have\nzzzz", false, "0009have\n", false},
		{"bad digit last", "0009have\n000g", false, "0009have\n", false},
		{"too long", "fff1", false, "", false},
		{"cut in payload", "0009ha", false, "0009ha", false},
		{"cut in header", "0009have\n00", false, "0009have\n", false},
		{"pack after first section", "0009have\n0000PACK\x00\x01", true, "0009have\n0000PACK\x00\x01", true},
		{"delim before the flush", "00010009have\n0000zz", true, "00010009have\n0000zz", true},
		{"section without a flush", "0009have\n", true, "0009have\n", true},
		{"pack without a section", "PACK", true, "", false},
		{"pack checked without a section", "0000PACK", false, "0000", false},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for _, c := range cases {
		for rname, wrap := range readers {
			t.Run(c.name+"/"+rname, func(t *testing.T) {
				check := CheckFraming
				if c.untilFlush {
					check = CheckFramingUntilFlush
				}
				got, err := io.ReadAll(check(wrap(strings.NewReader(c.in))))
				if string(got) != c.pass {
					t.Errorf("passed %q, want %q", got, c.pass)
				}
				if c.ok {
					if err != nil {
						t.Fatalf("error %v", err)
					}
					return
				}
				if !problem.Is(err, problem.Invalid) || !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v, want an Invalid framing error", err)
				}
			})
		}
	}
}

// A tiny read buffer still gets every byte, and errors are sticky.
func TestCheckFramingSmallReads(t *testing.T) {
	in := "0009have\n0000"
	r := CheckFraming(strings.NewReader(in + "zz"))
	var got []byte
	var p [1]byte
	var err error
	for err == nil {
		var n int
		n, err = r.Read(p[:])
		got = append(got, p[:n]...)
	}
	if string(got) != in || !problem.Is(err, problem.Invalid) {
		t.Fatalf("got %q, %v", got, err)
	}
	if n, again := r.Read(p[:]); n != 0 || again != err {
		t.Fatalf("after the error: %d, %v", n, again)
	}
}

// The body's own errors (a size cap, a client gone) pass through as they
// are.
func TestCheckFramingReaderError(t *testing.T) {
	boom := problem.New(problem.TooLarge, "request body is larger than 1 KiB")
	r := CheckFraming(io.MultiReader(strings.NewReader("0009have\n00"), iotest.ErrReader(boom)))
	got, err := io.ReadAll(r)
	if string(got) != "0009have\n" || !errors.Is(err, boom) {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestPeekSideband(t *testing.T) {
	cmd := "0000000000000000000000000000000000000000 1111111111111111111111111111111111111111 refs/heads/main"
	cases := []struct {
		body string
		want bool
	}{
		{pkt(cmd+"\x00report-status side-band-64k\n") + "0000PACK", true},
		{pkt(cmd+"\x00side-band\n") + "0000", true},
		{pkt(cmd+"\x00report-status\n") + "0000", false},
		{pkt(cmd+"\x00report-status side-band-64kx\n") + "0000", false},
		{pkt(cmd+"\n") + "0000", false},
		{"0000", false},
		{"", false},
		{"zzzz", false},
		{"00ff" + cmd, false}, // shorter than it claims
	}
	for _, c := range cases {
		br, got := PeekSideband(strings.NewReader(c.body))
		if got != c.want {
			t.Errorf("%q: sideband %v, want %v", c.body, got, c.want)
		}
		// Peeking consumed nothing.
		if rest, _ := io.ReadAll(br); string(rest) != c.body {
			t.Errorf("%q: reader yields %q", c.body, rest)
		}
	}
}

// FuzzCheckFraming holds the framing check to the Reader: a stream passes
// exactly when ReadPacket reads it to a clean end (or, until the flush, to
// the first flush), what passes is always a prefix of the input, and a
// failure is always an Invalid problem.
func FuzzCheckFraming(f *testing.F) {
	for _, s := range []string{"", "0000", "0001", "0002", "0003", "0004", "0009hello", "ffff", "fff0", "00", "zzzz",
		"0008want0000", "000eversion 2\n0000", "0009have\n0000PACK\x00\x01", "0009ha"} {
		f.Add([]byte(s), false, uint8(0))
		f.Add([]byte(s), true, uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, untilFlush bool, chunk uint8) {
		var in io.Reader = bytes.NewReader(data)
		if chunk%4 != 0 {
			in = &chunkReader{r: in, n: int(chunk % 4)}
		}
		check := CheckFraming
		if untilFlush {
			check = CheckFramingUntilFlush
		}
		got, err := io.ReadAll(check(in))
		if !bytes.HasPrefix(data, got) {
			t.Fatalf("passed %q, not a prefix of the input", got)
		}
		if err != nil && !problem.Is(err, problem.Invalid) {
			t.Fatalf("error %v is not Invalid", err)
		}
		if err == nil && len(got) != len(data) {
			t.Fatalf("passed %d of %d bytes without an error", len(got), len(data))
		}
		if want := wellFramed(data, untilFlush); (err == nil) != want {
			t.Fatalf("error %v, but the Reader says well-framed=%v", err, want)
		}
	})
}

// wellFramed is the oracle: ReadPacket over the whole input.
func wellFramed(data []byte, untilFlush bool) bool {
	r := NewReader(bytes.NewReader(data))
	for {
		p, err := r.ReadPacket()
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
		if p.Type == Flush && untilFlush {
			return true
		}
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.n)])
}
