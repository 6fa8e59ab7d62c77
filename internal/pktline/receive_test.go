package pktline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

const zero = "0000000000000000000000000000000000000000"

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func TestParseReceiveRequest(t *testing.T) {
	body := pkt(oidA+" "+oidB+" refs/heads/main\x00report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.39\n") +
		pkt(zero+" "+oidA+" refs/heads/new\n") +
		pkt(oidB+" "+zero+" refs/tags/old") + "0000" + "PACK..."
	r := strings.NewReader(body)
	req, err := ParseReceiveRequest(r, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := []RefCommand{{oidA, oidB, "refs/heads/main"}, {zero, oidA, "refs/heads/new"}, {oidB, zero, "refs/tags/old"}}
	if fmt.Sprint(req.Commands) != fmt.Sprint(want) {
		t.Fatalf("commands %v, want %v", req.Commands, want)
	}
	if !req.HasCapability("side-band-64k") || !req.HasCapability("report-status-v2") || req.HasCapability("report-status") {
		t.Fatalf("capabilities %q", req.Capabilities)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "PACK..." {
		t.Fatalf("read past the section's flush: rest %q", rest)
	}
}

func TestParseReceiveRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       error
	}{
		{"cut short", pkt(oidA + " " + oidB + " refs/heads/main\n"), io.ErrUnexpectedEOF},
		{"empty", "", io.ErrUnexpectedEOF},
		{"short id", pkt("1111 "+oidB+" refs/heads/main\n") + "0000", ErrMalformed},
		{"mixed formats", pkt(oidA+" "+strings.Repeat("2", 64)+" refs/heads/main\n") + "0000", ErrMalformed},
		{"no ref", pkt(oidA+" "+oidB+" \n") + "0000", ErrMalformed},
		{"extra field", pkt(oidA+" "+oidB+" refs/heads/a b\n") + "0000", ErrMalformed},
		{"delimiter", pkt(oidA+" "+oidB+" refs/heads/main\n") + "0001", ErrMalformed},
		{"shallow", pkt("shallow "+oidA+"\n") + pkt(oidA+" "+oidB+" refs/heads/main\x00report-status\n") + "0000", ErrNotPlainPush},
		{"signed", pkt("push-cert\x00report-status\n") + pkt("certificate version 0.1\n") + "0000", ErrNotPlainPush},
		{"too large", pkt(oidA+" "+oidB+" refs/heads/main\n") + "0000", ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit := int64(1 << 20)
			if tc.want == ErrTooLarge {
				limit = 20
			}
			_, err := ParseReceiveRequest(strings.NewReader(tc.body), limit)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestWriteReceiveSuccess(t *testing.T) {
	cmds := []RefCommand{{oidA, oidB, "refs/heads/main"}, {zero, oidA, "refs/tags/v1"}}
	report := pkt("unpack ok\n") + pkt("ok refs/heads/main\n") + pkt("ok refs/tags/v1\n") + "0000"
	for _, tc := range []struct {
		caps []string
		want string
	}{
		{[]string{"report-status"}, report},
		{[]string{"report-status-v2", "quiet"}, report},
		{[]string{"report-status", "side-band-64k"}, pkt("\x01"+report) + "0000"},
		{[]string{"report-status", "side-band"}, report},
		{[]string{"side-band-64k"}, "0000"},
		{nil, ""},
	} {
		var b bytes.Buffer
		if err := WriteReceiveSuccess(&b, &ReceiveRequest{Commands: cmds, Capabilities: tc.caps}); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("%q: wrote %q, want %q", tc.caps, b.String(), tc.want)
		}
	}
	// A report longer than one side-band packet is split like git splits it.
	var many []RefCommand
	for i := range 1000 {
		many = append(many, RefCommand{oidA, oidB, fmt.Sprintf("refs/heads/branch-%03d-%s", i, strings.Repeat("x", 60))})
	}
	var b bytes.Buffer
	if err := WriteReceiveSuccess(&b, &ReceiveRequest{Commands: many, Capabilities: []string{"report-status", "side-band-64k"}}); err != nil {
		t.Fatal(err)
	}
	var inner bytes.Buffer
	pr := NewReader(&b)
	packets := 0
	for {
		p, err := pr.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if p.Type == Flush {
			break
		}
		if p.Payload[0] != BandData {
			t.Fatalf("side-band packet on band %d", p.Payload[0])
		}
		packets++
		inner.Write(p.Payload[1:])
	}
	if packets < 2 || !strings.HasPrefix(inner.String(), pkt("unpack ok\n")) || !strings.HasSuffix(inner.String(), pkt("ok "+many[999].Ref+"\n")+"0000") {
		t.Fatalf("%d packets, report %q…", packets, inner.String()[:100])
	}
}

func FuzzParseReceiveRequest(f *testing.F) {
	f.Add([]byte(pkt(oidA+" "+oidB+" refs/heads/main\x00report-status side-band-64k\n") + "0000PACK"))
	f.Add([]byte(pkt("shallow "+oidA+"\n") + "0000"))
	f.Add([]byte("0000"))
	f.Add([]byte("ffff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ParseReceiveRequest(bytes.NewReader(data), 4096)
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WriteReceiveSuccess(&b, req); err != nil {
			// Only a ref name too long for one pkt-line may fail.
			for _, c := range req.Commands {
				if len(c.Ref) > MaxPayload-4 {
					return
				}
			}
			t.Fatalf("write report: %v", err)
		}
		for _, c := range req.Commands {
			if !validOID(c.Old) || !validOID(c.New) || c.Ref == "" || strings.ContainsAny(c.Ref, " ") {
				t.Fatalf("accepted command %+v", c)
			}
		}
	})
}
