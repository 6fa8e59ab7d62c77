package hosting

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

func pkts(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		switch l {
		case "0000", "0001":
			b.WriteString(l)
		default:
			fmt.Fprintf(&b, "%04x%s\n", len(l)+5, l)
		}
	}
	return b.String()
}

func TestReadV0Request(t *testing.T) {
	oid := strings.Repeat("a", 40)
	want := "want " + oid + " multi_ack_detailed side-band-64k"
	cases := []struct {
		name string
		in   string
		got  v0Request
		err  error
		// read is how much of in must be consumed: everything, or up to
		// the first flush where the client waits for the server.
		read string
	}{
		{"clone", pkts(want, "0000", "done") + "trailing", v0Complete, nil, pkts(want, "0000", "done")},
		{"few haves", pkts(want, "want "+oid, "0000", "have "+oid, "have "+oid, "done"), v0Complete, nil, ""},
		{"filter", pkts(want, "filter blob:none", "0000", "done"), v0Complete, nil, ""},
		{"negotiation", pkts(want, "0000", "have "+oid, "0000", "have "+oid), v0Stateful, nil, pkts(want, "0000", "have "+oid, "0000")},
		{"deepen waits for the server", pkts(want, "deepen 1", "0000") + "more", v0Deepen, nil, pkts(want, "deepen 1", "0000")},
		{"shallow", pkts(want, "shallow "+oid, "0000", "done"), v0Stateful, nil, pkts(want, "shallow "+oid, "0000")},
		{"unknown line", pkts(want, "frobnicate", "0000", "done"), v0Stateful, nil, pkts(want, "frobnicate")},
		{"unknown after wants", pkts(want, "0000", "nonsense"), v0Stateful, nil, ""},
		{"ls-remote", "0000", v0Stateful, io.EOF, ""},
		{"hang up", "", v0Stateful, io.EOF, ""},
		{"cut in the wants", pkts(want), v0Stateful, io.ErrUnexpectedEOF, ""},
		{"cut in the haves", pkts(want, "0000", "have "+oid), v0Stateful, io.ErrUnexpectedEOF, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var seen bytes.Buffer
			got, err := readV0Request(io.TeeReader(strings.NewReader(c.in), &seen), 1<<20)
			if got != c.got || !errors.Is(err, c.err) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, c.got, c.err)
			}
			read := c.read
			if read == "" && c.err == nil {
				read = c.in
			}
			if c.err == nil && seen.String() != read {
				t.Fatalf("read %q, want %q", seen.String(), read)
			}
		})
	}

	// A first request over the limit is handed to git as it is.
	big := pkts(want, "0000") + strings.Repeat(pkts("have "+oid), 100) + pkts("done")
	if got, err := readV0Request(strings.NewReader(big), 1000); got != v0Stateful || err != nil {
		t.Fatalf("over the limit: %v, %v", got, err)
	}
}

func TestDropPrefix(t *testing.T) {
	ad := pkts("0123 HEAD", "0000")
	sum := sha256.Sum256([]byte(ad))
	cases := []struct {
		name     string
		writes   []string
		out      string
		mismatch bool
	}{
		{"same advertisement, one write", []string{ad + "NAK"}, "NAK", false},
		{"same advertisement, split", []string{ad[:3], ad[3:7], ad[7:] + "NA", "K"}, "NAK", false},
		{"other refs", []string{strings.Replace(ad, "0123", "4567", 1) + "NAK"}, "", true},
		{"shorter", []string{ad[:5]}, "", true},
		{"nothing", nil, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			d := &dropPrefix{w: &out, n: int64(len(ad)), total: int64(len(ad)), want: sum[:], h: sha256.New()}
			var err error
			for _, w := range c.writes {
				if _, err = d.Write([]byte(w)); err != nil {
					break
				}
			}
			if d.mismatch() != c.mismatch || out.String() != c.out {
				t.Fatalf("mismatch %v, out %q (err %v)", d.mismatch(), out.String(), err)
			}
			if c.mismatch && len(c.writes[0]) >= len(ad) && !errors.Is(err, errRefsMoved) {
				t.Fatalf("write error %v", err)
			}
		})
	}
}

func TestEarlyPackfile(t *testing.T) {
	oid := strings.Repeat("b", 40)
	v2 := func(args ...string) []byte {
		return []byte(pkts(append([]string{"command=fetch", "agent=git/2.39.5", "object-format=sha1", "0001"}, append(args, "0000")...)...))
	}
	cases := []struct {
		name string
		body []byte
		ok   bool
	}{
		{"clone", v2("thin-pack", "ofs-delta", "include-tag", "want "+oid, "done"), true},
		{"partial", v2("ofs-delta", "want "+oid, "filter blob:none", "done"), true},
		{"haves with done", v2("want "+oid, "have "+oid, "done"), true},
		{"no-progress", v2("no-progress", "want "+oid, "done"), false},
		{"negotiation", v2("want "+oid, "have "+oid), false},
		{"shallow", v2("want "+oid, "deepen 1", "done"), false},
		{"shallow client", v2("want "+oid, "shallow "+oid, "done"), false},
		{"deepen-since", v2("want "+oid, "deepen-since 1700000000", "done"), false},
		{"want-ref", v2("want-ref refs/heads/main", "done"), false},
		{"packfile-uris", v2("want "+oid, "packfile-uris https", "done"), false},
		{"sideband-all", v2("sideband-all", "want "+oid, "done"), false},
		{"ls-refs", []byte(pkts("command=ls-refs", "0001", "peel", "0000")), false},
		{"two commands", append(v2("want "+oid, "done"), v2("want "+oid, "done")...), false},
		{"garbage", []byte("nonsense"), false},
	}
	for _, c := range cases {
		ur, err := parseV2(c.body)
		if err != nil {
			if c.ok {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if got := earlyPackfile(ur, len(c.body)); got != c.ok {
			t.Errorf("%s: %v, want %v", c.name, got, c.ok)
		}
	}
}

// lengthRecorder is a transport's writer that takes a hit's length.
type lengthRecorder struct {
	bytes.Buffer
	length int64
}

func (l *lengthRecorder) SetContentLength(n int64) { l.length = n }

func TestPackfileWriter(t *testing.T) {
	const git = "000dpackfile\n0009\x01PACK"
	band := func(b byte, msg string) string { return fmt.Sprintf("%04x%c%s", len(msg)+5, b, msg) }
	progress := band(2, "sluice: waiting for capacity, 2 ahead of you\n")
	t.Run("no wait: git's bytes untouched", func(t *testing.T) {
		var out lengthRecorder
		p := &packfileWriter{w: &out}
		p.SetContentLength(int64(len(git)))
		if _, err := p.ReadFrom(strings.NewReader(git)); err != nil {
			t.Fatal(err)
		}
		p.progress("too late")
		if err := p.finish(nil); err != nil || out.String() != git || out.length != int64(len(git)) {
			t.Fatalf("%q (length %d), %v", out.String(), out.length, err)
		}
	})
	t.Run("wait: header first, git's dropped", func(t *testing.T) {
		var out lengthRecorder
		p := &packfileWriter{w: &out}
		p.progress("sluice: waiting for capacity, 2 ahead of you")
		p.SetContentLength(123) // a length no longer holds once we wrote
		for _, chunk := range []string{git[:4], git[4:10], git[10:]} {
			if _, err := p.Write([]byte(chunk)); err != nil {
				t.Fatal(err)
			}
		}
		p.progress("after git started")
		if want := "000dpackfile\n" + progress + "0009\x01PACK"; out.String() != want || out.length != 0 {
			t.Fatalf("got %q (length %d), want %q", out.String(), out.length, want)
		}
	})
	t.Run("git answers with another section", func(t *testing.T) {
		var out bytes.Buffer
		p := &packfileWriter{w: &out}
		p.progress("waiting")
		if _, err := p.Write([]byte("0011shallow-info\n")); err == nil {
			t.Fatal("a response without the packfile header was accepted")
		}
	})
	t.Run("wait ran out", func(t *testing.T) {
		var out bytes.Buffer
		p := &packfileWriter{w: &out}
		p.progress("sluice: waiting for capacity, 2 ahead of you")
		refusal := problem.New(problem.Unavailable, "waited 1s for capacity; try again later")
		refusal.RetryAfter = 3
		err := p.finish(refusal)
		if !Reported(err) || !problem.Is(err, problem.Unavailable) {
			t.Fatalf("finish: %v", err)
		}
		want := "000dpackfile\n" + progress + band(3, "waited 1s for capacity; try again later (retry in 3s)") + "0000"
		if out.String() != want {
			t.Fatalf("got %q, want %q", out.String(), want)
		}
		p.progress("after the end")
		if out.String() != want {
			t.Fatal("progress after finish was written")
		}
	})
	t.Run("refusal before any progress", func(t *testing.T) {
		var out bytes.Buffer
		p := &packfileWriter{w: &out}
		refusal := problem.New(problem.Unavailable, "queue full")
		if err := p.finish(refusal); Reported(err) || out.Len() != 0 {
			t.Fatalf("finish wrote %q, %v: the transport reports this one", out.String(), err)
		}
	})
}
