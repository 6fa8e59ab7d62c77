package githttp

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestFramingReader(t *testing.T) {
	cases := []struct {
		name         string
		in           string
		firstSection bool
		pass         string // what must reach git
		kind         problem.Kind
		ok           bool
	}{
		{"flush only", "0000", false, "0000", 0, true},
		{"valid stream", "0009have\n0001000200040000", false, "0009have\n0001000200040000", 0, true},
		{"upper-case hex", "000Ahave\n\n0000", false, "000Ahave\n\n0000", 0, true},
		{"length 3", "0003", false, "", problem.Invalid, false},
		{"not hex", "0009have\nzzzz", false, "0009have\n", problem.Invalid, false},
		{"too long", "fff1", false, "", problem.Invalid, false},
		{"cut in payload", "0009ha", false, "0009ha", problem.Invalid, false},
		{"cut in header", "00", false, "00", problem.Invalid, false},
		{"pack after first section", "0009have\n0000PACK\x00\x01", true, "0009have\n0000PACK\x00\x01", 0, true},
		{"pack without a section", "PACK", true, "", problem.Invalid, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// One byte at a time: headers split across reads must work.
			f := &framingReader{r: iotest.OneByteReader(strings.NewReader(c.in)), firstSection: c.firstSection}
			got, err := io.ReadAll(f)
			if c.ok {
				if err != nil || string(got) != c.pass {
					t.Fatalf("got %q, %v; want %q", got, err, c.pass)
				}
				return
			}
			if !problem.Is(err, c.kind) {
				t.Fatalf("error %v, want kind %v", err, c.kind)
			}
			if c.pass != "" && string(got) != c.pass {
				t.Fatalf("passed %q, want %q", got, c.pass)
			}
		})
	}
}

func TestPeekSideband(t *testing.T) {
	cmd := "0000000000000000000000000000000000000000 1111111111111111111111111111111111111111 refs/heads/main"
	cases := []struct {
		body string
		want bool
	}{
		{hex4(len(cmd)+4+len("\x00report-status side-band-64k\n")) + cmd + "\x00report-status side-band-64k\n0000PACK", true},
		{hex4(len(cmd)+4+len("\x00side-band\n")) + cmd + "\x00side-band\n0000", true},
		{hex4(len(cmd)+4+len("\x00report-status\n")) + cmd + "\x00report-status\n0000", false},
		{hex4(len(cmd)+4+len("\x00report-status side-band-64kx\n")) + cmd + "\x00report-status side-band-64kx\n0000", false},
		{"0000", false},
		{"", false},
		{"zzzz", false},
		{"00ff" + cmd, false}, // shorter than it claims
	}
	for _, c := range cases {
		br, got := peekSideband(strings.NewReader(c.body))
		if got != c.want {
			t.Errorf("%q: sideband %v, want %v", c.body, got, c.want)
		}
		// Peeking consumed nothing.
		rest, _ := io.ReadAll(br)
		if string(rest) != c.body {
			t.Errorf("%q: reader yields %q", c.body, rest)
		}
	}
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}

func TestCapReader(t *testing.T) {
	for _, n := range []int{0, 1, 99, 100, 101, 5000} {
		c := &capReader{r: iotest.HalfReader(strings.NewReader(strings.Repeat("x", n))), left: 100, limit: 100}
		got, err := io.ReadAll(c)
		if n <= 100 {
			if err != nil || len(got) != n {
				t.Errorf("%d bytes: got %d, %v", n, len(got), err)
			}
			continue
		}
		if !problem.Is(err, problem.TooLarge) || len(got) > 100 {
			t.Errorf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
	}
}
