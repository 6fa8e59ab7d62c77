package sshd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2)
// prefixes a proxied TCP stream with the client's real address. Only the
// parts a TCP load balancer in front of SSH sends are supported: v1 TCP4,
// TCP6 and UNKNOWN; v2 PROXY and LOCAL over TCP/IPv4 and TCP/IPv6, with any
// TLVs skipped.

// v2Signature opens every version 2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// v1MaxLen is the longest v1 line the specification allows, CRLF included.
const v1MaxLen = 107

// v2MaxLen bounds the address-and-TLV block of a v2 header. The format
// allows 64 KiB, but a proxy in front of SSH sends addresses and a few
// short TLVs; refusing more bounds what an untrusted header can make us read.
const v2MaxLen = 4096

var errNotProxy = errors.New("no PROXY protocol header")

// looksLikeProxyHeader reports whether the first bytes of a stream are the
// start of a PROXY header of either version. SSH clients open with
// "SSH-", so the two never collide.
func looksLikeProxyHeader(r *bufio.Reader) bool {
	b, _ := r.Peek(len(v2Signature))
	if bytes.HasPrefix(b, []byte("PROXY ")) {
		return true
	}
	return len(b) >= 6 && bytes.HasPrefix(v2Signature, b[:min(len(b), len(v2Signature))])
}

// readProxyHeader consumes a PROXY header from r. It returns the source
// address the proxy reports, or nil when the header carries none (v1
// UNKNOWN, v2 LOCAL — health checks — or an address family other than
// TCP), in which case the connection's own address stands. errNotProxy
// means the stream does not start with a header at all.
func readProxyHeader(r *bufio.Reader) (net.Addr, error) {
	b, err := r.Peek(len(v2Signature))
	if err != nil && len(b) < 6 {
		return nil, fmt.Errorf("read proxy header: %w", err)
	}
	switch {
	case bytes.Equal(b, v2Signature):
		return readProxyV2(r)
	case bytes.HasPrefix(b, []byte("PROXY ")):
		return readProxyV1(r)
	}
	return nil, errNotProxy
}

func readProxyV1(r *bufio.Reader) (net.Addr, error) {
	// ReadSlice would accept an arbitrarily long line up to the buffer
	// size; read byte by byte up to the specification's limit instead.
	var line []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("read proxy v1 header: %w", err)
		}
		line = append(line, c)
		if c == '\n' {
			break
		}
		if len(line) >= v1MaxLen {
			return nil, errors.New("proxy v1 header too long")
		}
	}
	s, ok := strings.CutSuffix(string(line), "\r\n")
	if !ok {
		return nil, errors.New("proxy v1 header does not end with CRLF")
	}
	f := strings.Split(s, " ")
	if len(f) < 2 || f[0] != "PROXY" {
		return nil, errors.New("malformed proxy v1 header")
	}
	switch f[1] {
	case "UNKNOWN":
		// The rest of the line is to be ignored.
		return nil, nil
	case "TCP4", "TCP6":
	default:
		return nil, fmt.Errorf("proxy v1 header: unsupported protocol %q", f[1])
	}
	if len(f) != 6 {
		return nil, errors.New("malformed proxy v1 header")
	}
	src, err := netip.ParseAddr(f[2])
	if err != nil {
		return nil, fmt.Errorf("proxy v1 header: source address: %w", err)
	}
	dst, err := netip.ParseAddr(f[3])
	if err != nil {
		return nil, fmt.Errorf("proxy v1 header: destination address: %w", err)
	}
	if src.Is4() != (f[1] == "TCP4") || dst.Is4() != (f[1] == "TCP4") || src.Zone() != "" {
		return nil, errors.New("proxy v1 header: address does not match its family")
	}
	sport, err := parsePort(f[4])
	if err != nil {
		return nil, err
	}
	if _, err := parsePort(f[5]); err != nil {
		return nil, err
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, sport)), nil
}

// parsePort reads a decimal port without sign or leading zeros, as the
// specification writes them.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') || strings.ContainsAny(s, "+-") {
		return 0, fmt.Errorf("proxy v1 header: bad port %q", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("proxy v1 header: bad port %q", s)
	}
	return uint16(n), nil
}

func readProxyV2(r *bufio.Reader) (net.Addr, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read proxy v2 header: %w", err)
	}
	verCmd, fam := hdr[12], hdr[13]
	n := int(binary.BigEndian.Uint16(hdr[14:16]))
	if verCmd>>4 != 2 {
		return nil, fmt.Errorf("proxy v2 header: unsupported version %d", verCmd>>4)
	}
	if n > v2MaxLen {
		return nil, fmt.Errorf("proxy v2 header: %d bytes of addresses is more than %d", n, v2MaxLen)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read proxy v2 header: %w", err)
	}
	switch verCmd & 0x0f {
	case 0x0: // LOCAL: the proxy's own connection, e.g. a health check.
		return nil, nil
	case 0x1: // PROXY
	default:
		return nil, fmt.Errorf("proxy v2 header: unsupported command %d", verCmd&0x0f)
	}
	switch fam {
	case 0x11: // TCP over IPv4
		if n < 12 {
			return nil, errors.New("proxy v2 header: short IPv4 address block")
		}
		src := netip.AddrFrom4([4]byte(body[0:4]))
		port := binary.BigEndian.Uint16(body[8:10])
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, port)), nil
	case 0x21: // TCP over IPv6
		if n < 36 {
			return nil, errors.New("proxy v2 header: short IPv6 address block")
		}
		src := netip.AddrFrom16([16]byte(body[0:16]))
		port := binary.BigEndian.Uint16(body[32:34])
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, port)), nil
	default:
		// UNSPEC, UDP or unix sockets: no TCP source to report.
		return nil, nil
	}
}

func trusted(prefixes []netip.Prefix, addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip := ta.AddrPort().Addr().Unmap()
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// proxiedConn is a connection whose first bytes went through a
// bufio.Reader (to look for a PROXY header) and whose remote address may
// be the one the proxy reported.
type proxiedConn struct {
	net.Conn
	r      *bufio.Reader
	remote net.Addr
}

func (c *proxiedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *proxiedConn) RemoteAddr() net.Addr       { return c.remote }
