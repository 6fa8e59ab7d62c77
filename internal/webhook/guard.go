package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// client posts to receivers through the SSRF guard.
type client struct {
	http  *http.Client
	allow []netip.Prefix
}

func newClient(allow []netip.Prefix, timeout time.Duration) *client {
	c := &client{allow: allow}
	dialer := &net.Dialer{Timeout: timeout, Control: c.control}
	transport := &http.Transport{
		DialContext:           dialer.DialContext,
		Proxy:                 nil, // a proxy would dial for us, past the guard
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	c.http = &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return c
}

// errForbiddenAddress is the guard's refusal.
var errForbiddenAddress = errors.New("webhook address not allowed")

// control runs on the resolved address of every connection attempt.
func (c *client) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errForbiddenAddress, address)
	}
	if !c.allowed(ap.Addr()) {
		return fmt.Errorf("%w: %s", errForbiddenAddress, ap.Addr())
	}
	return nil
}

func (c *client) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.allow {
		if p.Contains(a) {
			return true
		}
	}
	return !internalAddr(a)
}

// internalAddr reports addresses a webhook must not reach by default.
func internalAddr(a netip.Addr) bool {
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() {
		return true
	}
	for _, p := range internalNets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// internalNets are the special ranges netip has no predicate for:
// carrier-grade NAT (RFC 6598, also used by cloud metadata services),
// "this network" (RFC 1122), benchmarking (RFC 2544) and the IPv6
// translation prefixes that can wrap an internal IPv4 address.
var internalNets = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
}

// ValidURL checks a URL's shape when a webhook is saved (the address is
// checked at each delivery, where it counts: DNS may change meanwhile).
func ValidURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(raw) > 2048 {
		return problem.New(problem.Invalid, "a webhook URL must be an http or https URL without credentials")
	}
	return nil
}
