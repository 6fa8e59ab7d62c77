package sshd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func v2Header(cmd, fam byte, body []byte) []byte {
	b := append([]byte{}, v2Signature...)
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

func TestReadProxyHeader(t *testing.T) {
	ipv4 := []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x15, 0xb3, 0x1f, 0x3f} // 203.0.113.7:5555 → 10.0.0.1:7999
	ipv6 := make([]byte, 36)
	copy(ipv6, net.ParseIP("2001:db8::7").To16())
	copy(ipv6[16:], net.ParseIP("2001:db8::1").To16())
	binary.BigEndian.PutUint16(ipv6[32:], 40000)
	binary.BigEndian.PutUint16(ipv6[34:], 7999)
	withTLV := append(append([]byte{}, ipv4...), 0x04, 0x00, 0x03, 'a', 'b', 'c')

	cases := []struct {
		name  string
		in    []byte
		addr  string // "" = no address; "ERR" = error
		after string // what must remain to be read
	}{
		{"v1 tcp4", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 5555 7999\r\nSSH-2.0-x\r\n"), "203.0.113.7:5555", "SSH-2.0-x\r\n"},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 40000 7999\r\nSSH-"), "[2001:db8::7]:40000", "SSH-"},
		{"v1 unknown", []byte("PROXY UNKNOWN whatever\r\nSSH-"), "", "SSH-"},
		{"v1 no crlf", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 5555 7999\nSSH-"), "ERR", ""},
		{"v1 family mismatch", []byte("PROXY TCP4 2001:db8::7 10.0.0.1 5555 7999\r\n"), "ERR", ""},
		{"v1 bad port", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 65536 7999\r\n"), "ERR", ""},
		{"v1 leading zero port", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 05555 7999\r\n"), "ERR", ""},
		{"v1 missing field", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 5555\r\n"), "ERR", ""},
		{"v1 extra field", []byte("PROXY TCP4 203.0.113.7 10.0.0.1 5555 7999 x\r\n"), "ERR", ""},
		{"v1 udp", []byte("PROXY UDP4 203.0.113.7 10.0.0.1 5555 7999\r\n"), "ERR", ""},
		{"v1 too long", []byte("PROXY UNKNOWN " + strings.Repeat("x", 200) + "\r\n"), "ERR", ""},
		{"v1 truncated", []byte("PROXY TCP4 203.0.113.7"), "ERR", ""},
		{"v2 tcp4", append(v2Header(1, 0x11, ipv4), "SSH-"...), "203.0.113.7:5555", "SSH-"},
		{"v2 tcp6", append(v2Header(1, 0x21, ipv6), "SSH-"...), "[2001:db8::7]:40000", "SSH-"},
		{"v2 tlv skipped", append(v2Header(1, 0x11, withTLV), "SSH-"...), "203.0.113.7:5555", "SSH-"},
		{"v2 local", append(v2Header(0, 0x00, nil), "SSH-"...), "", "SSH-"},
		{"v2 unix", append(v2Header(1, 0x31, make([]byte, 216)), "SSH-"...), "", "SSH-"},
		{"v2 short ipv4", v2Header(1, 0x11, ipv4[:8]), "ERR", ""},
		{"v2 bad command", v2Header(2, 0x11, ipv4), "ERR", ""},
		{"v2 bad version", append(append(append([]byte{}, v2Signature...), 0x11, 0x11, 0, 12), ipv4...), "ERR", ""},
		{"v2 too long", v2Header(1, 0x11, make([]byte, v2MaxLen+1)), "ERR", ""},
		{"v2 truncated", v2Header(1, 0x11, ipv4)[:20], "ERR", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReader(bytes.NewReader(tc.in))
			addr, err := readProxyHeader(r)
			if tc.addr == "ERR" {
				if err == nil {
					t.Fatalf("got %v, want an error", addr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if addr != nil {
				got = addr.String()
			}
			if got != tc.addr {
				t.Errorf("address %q, want %q", got, tc.addr)
			}
			rest, _ := io.ReadAll(r)
			if string(rest) != tc.after {
				t.Errorf("left %q, want %q", rest, tc.after)
			}
		})
	}

	if _, err := readProxyHeader(bufio.NewReader(strings.NewReader("SSH-2.0-OpenSSH_9.2\r\n"))); !errors.Is(err, errNotProxy) {
		t.Errorf("plain SSH: %v, want errNotProxy", err)
	}
}

func TestLooksLikeProxyHeader(t *testing.T) {
	for in, want := range map[string]bool{
		"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n": true,
		string(v2Signature) + "\x21\x11":     true,
		"SSH-2.0-OpenSSH_9.2p1\r\n":          false,
		"\r\n\r\n\x00\r\nQU":                 true, // a v2 signature cut short
		"GET / HTTP/1.1\r\n":                 false,
	} {
		if got := looksLikeProxyHeader(bufio.NewReader(strings.NewReader(in))); got != want {
			t.Errorf("looksLikeProxyHeader(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestTrusted(t *testing.T) {
	// Parsed by config.TrustedProxyNets in the node.
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/32")}
	for addr, want := range map[string]bool{
		"10.1.2.3:1":          true,
		"192.0.2.1:1":         true,
		"192.0.2.2:1":         false,
		"[::ffff:10.0.0.1]:1": true,
		"[2001:db8::5]:1":     true,
		"127.0.0.1:1":         false,
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := trusted(nets, a); got != want {
			t.Errorf("trusted(%s) = %v, want %v", addr, got, want)
		}
	}
}

// FuzzProxyHeader: whatever a peer sends as a PROXY header, the parser
// neither panics nor reads past its bounds, and an address it reports is a
// real TCP address.
func FuzzProxyHeader(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 198.51.100.1 56324 7999\r\nSSH-2.0-x\r\n"))
	f.Add([]byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	v2 := append([]byte{}, v2Signature...)
	v2 = append(v2, 0x21, 0x11, 0x00, 0x0c, 192, 0, 2, 1, 198, 51, 100, 1, 0xdc, 0x04, 0x1f, 0x3f)
	f.Add(v2)
	f.Add(append(append([]byte{}, v2Signature...), 0x20, 0x00, 0x00, 0x00))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		if !looksLikeProxyHeader(r) {
			return
		}
		addr, err := readProxyHeader(r)
		if err != nil || addr == nil {
			return
		}
		ta, ok := addr.(*net.TCPAddr)
		if !ok || ta.IP == nil || ta.Port < 0 || ta.Port > 65535 {
			t.Fatalf("bad address %#v from %q", addr, data)
		}
	})
}
