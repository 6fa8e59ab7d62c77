package pktline

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestWriteProblem(t *testing.T) {
	busy := &problem.Error{Kind: problem.Throttled, Message: "server is busy", RetryAfter: 7}
	wrapped := fmt.Errorf("admit: %w", busy)
	internal := problem.Wrap(problem.Internal, errors.New("disk on fire at /srv/repos/7"), "internal server error")
	twoLines := problem.New(problem.Unavailable, "sluice: ref update not recorded\nsluice: nothing changed\n")
	cases := []struct {
		name string
		err  error
		form ErrorForm
		want string
	}{
		{"ERR", busy, AsERR, pkt("ERR server is busy (retry in 7s)\n")},
		{"band 3", busy, AsBand3, pkt("\x03server is busy (retry in 7s)")},
		{"stderr", busy, AsText, "server is busy (retry in 7s)\n"},
		{"wrapped", wrapped, AsText, "server is busy (retry in 7s)\n"},
		{"no retry hint", problem.New(problem.Forbidden, "read only"), AsERR, pkt("ERR read only\n")},
		{"internal stays in the log", internal, AsERR, pkt("ERR internal server error\n")},
		{"plain error", errors.New("secret detail"), AsText, "internal server error\n"},
		{"ERR is one line", twoLines, AsERR, pkt("ERR sluice: ref update not recorded sluice: nothing changed \n")},
		{"band 3 keeps lines, ends none", twoLines, AsBand3, pkt("\x03sluice: ref update not recorded\nsluice: nothing changed")},
	}
	for _, c := range cases {
		var b bytes.Buffer
		if err := WriteProblem(&b, c.form, c.err); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if b.String() != c.want {
			t.Errorf("%s: wrote %q, want %q", c.name, b.String(), c.want)
		}
	}
}

// An over-long message is cut to one packet, on a character boundary.
func TestWriteProblemLong(t *testing.T) {
	long := problem.New(problem.Invalid, "%s", strings.Repeat("é", 40000))
	for _, form := range []ErrorForm{AsERR, AsBand3} {
		var b bytes.Buffer
		if err := WriteProblem(&b, form, long); err != nil {
			t.Fatal(err)
		}
		r := NewReader(&b)
		p, err := r.ReadPacket()
		if err != nil || len(p.Payload) > MaxPayload || !utf8.Valid(p.Payload) {
			t.Fatalf("form %d: %d bytes, valid UTF-8 %v, %v", form, len(p.Payload), utf8.Valid(p.Payload), err)
		}
		if _, err := r.ReadPacket(); err == nil {
			t.Fatalf("form %d: more than one packet", form)
		}
	}
}
