package hosting

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/pktline"
)

func TestReadV0Deepen(t *testing.T) {
	oid := strings.Repeat("b", 40)
	want := "want " + oid + " multi_ack_detailed shallow"
	for _, in := range []string{
		pkts(want, "deepen 2", "0000"),
		pkts(want, "shallow "+oid, "deepen 1", "0000"),
		pkts(want, "deepen-since 1700000000", "0000"),
		pkts(want, "deepen-not refs/heads/x", "filter blob:none", "0000"),
	} {
		if got, err := readV0Request(strings.NewReader(in+pkts("done")), 1<<20); got != v0Deepen || err != nil {
			t.Fatalf("%q: %v, %v; want v0Deepen", in, got, err)
		}
	}
}

func TestReadV0Haves(t *testing.T) {
	oid := strings.Repeat("c", 40)
	cases := []struct {
		name string
		in   string
		got  v0Request
		err  error
	}{
		{"clone", pkts("done"), v0Complete, nil},
		{"haves", pkts("have "+oid, "have "+oid, "done"), v0Complete, nil},
		{"negotiation", pkts("have "+oid, "0000", "done"), v0Stateful, nil},
		{"unknown", pkts("frobnicate"), v0Stateful, nil},
		{"hang up", "", v0Stateful, io.EOF},
		{"cut", pkts("have " + oid), v0Stateful, io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := readV0Haves(pktline.NewReader(strings.NewReader(c.in)))
			if got != c.got || !errors.Is(err, c.err) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, c.got, c.err)
			}
		})
	}
}

func TestShallowSection(t *testing.T) {
	oid := strings.Repeat("d", 40)
	section := pkts("shallow "+oid, "unshallow "+oid, "0000")
	cases := []struct {
		name, in, want string
		ok             bool
	}{
		{"section and NAK", section + pkts("NAK"), section, true},
		{"nothing shallow", pkts("0000", "NAK"), "0000", true},
		{"no NAK", section, "", false},
		{"more after NAK", section + pkts("NAK", "NAK"), "", false},
		{"ACK instead", section + pkts("ACK "+oid), "", false},
		{"not a shallow line", pkts("NAK", "0000", "NAK"), "", false},
		{"cut", section[:10], "", false},
		{"empty", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := shallowSection([]byte(c.in))
			if ok != c.ok || string(got) != c.want {
				t.Fatalf("got %q, %v; want %q, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
