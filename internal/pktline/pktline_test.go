package pktline

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []Packet
		final error // error after the packets; nil means io.EOF
	}{
		{"data and specials", "0009hello0000000100020004", []Packet{
			{Data, []byte("hello")}, {Type: Flush}, {Type: Delim}, {Type: ResponseEnd}, {Data, []byte{}},
		}, nil},
		{"upper-case hex", "000Ahello\n", []Packet{{Data, []byte("hello\n")}}, nil},
		{"length 3", "0003", nil, ErrMalformed},
		{"not hex", "00g1", nil, ErrMalformed},
		{"sign", "-001", nil, ErrMalformed},
		{"over max", "fff1" + strings.Repeat("x", 65521), nil, ErrMalformed},
		{"truncated header", "00", nil, io.ErrUnexpectedEOF},
		{"truncated payload", "0009hel", nil, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in))
			for i, want := range tt.want {
				got, err := r.ReadPacket()
				if err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				if got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) {
					t.Fatalf("packet %d = %v %q, want %v %q", i, got.Type, got.Payload, want.Type, want.Payload)
				}
			}
			_, err := r.ReadPacket()
			want := tt.final
			if want == nil {
				want = io.EOF
			}
			if !errors.Is(err, want) {
				t.Fatalf("final error = %v, want %v", err, want)
			}
		})
	}
	// The largest packet is accepted.
	big := "fff0" + strings.Repeat("x", MaxPayload)
	if p, err := NewReader(strings.NewReader(big)).ReadPacket(); err != nil || len(p.Payload) != MaxPayload {
		t.Fatalf("max packet: %d bytes, %v", len(p.Payload), err)
	}
	if problem.KindOf(ErrMalformed) != problem.Invalid {
		t.Error("ErrMalformed is not problem.Invalid")
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, err := range []error{w.WriteString("# service=git-upload-pack\n"), w.Flush(), w.WriteData([]byte("x")), w.Delim(), w.ResponseEnd()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.String(), "001e# service=git-upload-pack\n00000005x00010002"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	if err := w.WriteData(make([]byte, MaxPayload+1)); err == nil {
		t.Error("oversized payload accepted")
	}
	b.Reset()
	if err := w.WriteData(make([]byte, MaxPayload)); err != nil || b.Len() != MaxPacketSize || b.String()[:4] != "fff0" {
		t.Errorf("max payload: %v, %d bytes, header %q", err, b.Len(), b.String()[:4])
	}
}

func TestWriteError(t *testing.T) {
	var b bytes.Buffer
	if err := WriteError(&b, "repository not found\nsecond line"); err != nil {
		t.Fatal(err)
	}
	p, err := NewReader(&b).ReadPacket()
	if err != nil || string(p.Payload) != "ERR repository not found second line\n" {
		t.Fatalf("got %q, %v", p.Payload, err)
	}
	b.Reset()
	if err := WriteError(&b, strings.Repeat("x", 70000)); err != nil {
		t.Fatal(err)
	}
	if p, err := NewReader(&b).ReadPacket(); err != nil || len(p.Payload) != MaxPayload {
		t.Fatalf("long message: %d bytes, %v", len(p.Payload), err)
	}
}

func TestSideband(t *testing.T) {
	for _, tt := range []struct {
		max, size, packets int
	}{
		{SidebandMax, 995, 1},
		{SidebandMax, 996, 2},
		{SidebandMax, 3000, 4},
		{Sideband64kMax, 65515, 1},
		{Sideband64kMax, 65516, 2},
		{Sideband64kMax, 200000, 4},
	} {
		var b bytes.Buffer
		data := bytes.Repeat([]byte("p"), tt.size)
		n, err := NewSideband(&b, BandData, tt.max).Write(data)
		if err != nil || n != tt.size {
			t.Fatalf("Write = %d, %v", n, err)
		}
		r := NewReader(&b)
		var got []byte
		packets := 0
		for {
			p, err := r.ReadPacket()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			packets++
			if p.Payload[0] != BandData || len(p.Payload)-1 > tt.max || 4+len(p.Payload) > MaxPacketSize {
				t.Fatalf("packet of %d bytes on band %d", len(p.Payload), p.Payload[0])
			}
			got = append(got, p.Payload[1:]...)
		}
		if packets != tt.packets || !bytes.Equal(got, data) {
			t.Errorf("max %d size %d: %d packets (want %d), data intact %v", tt.max, tt.size, packets, tt.packets, bytes.Equal(got, data))
		}
	}
	var b bytes.Buffer
	if err := Progress(&b, "Counting objects\r"); err != nil {
		t.Fatal(err)
	}
	if b.String() != "0016\x02Counting objects\r" {
		t.Errorf("Progress wrote %q", b.String())
	}
}

func FuzzReader(f *testing.F) {
	for _, s := range []string{"0000", "0001", "0002", "0004", "0009hello", "0003", "ffff", "fff0", "00", "zzzz",
		"0008want0000", "000eversion 2\n0000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		consumed := 0
		for {
			p, err := r.ReadPacket()
			if err != nil {
				return
			}
			consumed += 4 + len(p.Payload)
			if len(p.Payload) > MaxPayload || consumed > len(data) {
				t.Fatalf("payload %d bytes, consumed %d of %d", len(p.Payload), consumed, len(data))
			}
			if p.Type != Data && p.Payload != nil {
				t.Fatalf("%v packet with payload", p.Type)
			}
		}
	})
}
