// Package loadgen is the performance lab's git client: it speaks the smart
// HTTP protocol (v0 and v2 for fetches, v0 for receive-pack) at the wire
// level and does none of a real client's local work.
//
// A load test measures the server, so the client must be cheap and must not
// need disk: a clone streams the pack out of side band 1 straight into a
// SHA-1 and is checked (header "PACK", version, object count, trailing
// checksum) without being stored, indexed or unpacked. That keeps one load
// machine able to drive many concurrent clones, and still catches a server
// that sends a truncated or corrupted pack. Response bodies are read into
// one pooled buffer per response and parsed where they lie (see pkt.go).
// Where even SHA-1 is too slow — a cached clone arrives over loopback
// faster than one core hashes it — VerifyFingerprint checks repeated
// clones against one that was checksummed. A push builds its one-commit
// pack (blob, tree, commit on top of the advertised tip) in memory.
//
// Each operation issues the same HTTP requests, in the same order, as git
// itself (info/refs, then ls-refs and fetch for v2), so the server does the
// same work it would for real clients; credentials are sent up front rather
// than after a 401, as a git credential helper would after its first
// request. One Client shares one keep-alive connection pool across all
// workers of a run.
//
// Run drives one operation for a bounded time and count, either from N
// concurrent workers (a closed loop) or arriving at a fixed rate however
// slowly the server answers (an open loop, Spec.Rate), optionally cutting
// off what still runs when the window ends, and reports throughput,
// errors and a latency histogram.
package loadgen

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Protocol is a git wire protocol version.
type Protocol int

const (
	V0 Protocol = 0
	V2 Protocol = 2
)

func (p Protocol) String() string { return fmt.Sprintf("v%d", int(p)) }

// zeroOID is the all-zero SHA-1 git uses for "no object".
const zeroOID = "0000000000000000000000000000000000000000"

// Options configure a Client.
type Options struct {
	// Username and Password authenticate every request whose URL has no
	// userinfo of its own.
	Username, Password string
	// Agent is sent as the agent capability; default "sluice-loadgen/1".
	Agent string
	// MaxConnsPerHost bounds idle keep-alive connections kept per host;
	// default 64, enough for every worker of a run to keep its own.
	MaxConnsPerHost int
	// Transport replaces the HTTP transport (tests wrap it to corrupt
	// responses); nil builds a keep-alive transport.
	Transport http.RoundTripper
}

// Client runs git operations over smart HTTP. It is safe for concurrent use.
type Client struct {
	hc    *http.Client
	user  string
	pass  string
	agent string

	// fps holds the fingerprints of checksummed packs by request, for
	// VerifyFingerprint.
	fpMu sync.Mutex
	fps  map[string]packFingerprint
}

// Verify says how a fetched pack is checked. Every mode checks the
// pkt-line framing, side-band errors, the pack header (magic, version,
// object count) and that the stream ends in a 20-byte trailer.
type Verify int

const (
	// VerifyChecksum, the default, computes every pack's SHA-1 and
	// compares it with the trailer, as git's index-pack does.
	VerifyChecksum Verify = iota
	// VerifyFingerprint checksums the first pack for each distinct
	// request (repository URL or SSH path, and request body) of a Client
	// as VerifyChecksum does, and records its fingerprint: length,
	// object count, trailer and the CRC-32C of its bytes. A later pack
	// for the same request is not hashed with SHA-1 but must match that
	// fingerprint, so it is byte for byte the checksummed pack except
	// with the probability of a CRC-32C collision (2^-32; bursts of up to
	// 32 flipped bits are always caught). CRC-32C runs about twenty times
	// faster than SHA-1 here.
	//
	// It suits a storm of identical clones of an unchanged repository:
	// git answers the same request with the same pack (pack-objects
	// reuses the packed objects, in the same order), and a pack cache
	// replays one. A server whose packs for one request differ fails the
	// check, visibly, as an error.
	VerifyFingerprint
)

// packFingerprint identifies a checksummed pack.
type packFingerprint struct {
	size    int64
	objects uint32
	crc     uint32
	trailer [20]byte
}

func (f packFingerprint) String() string {
	return fmt.Sprintf("%d bytes, %d objects, crc32c %08x, trailer %x", f.size, f.objects, f.crc, f.trailer)
}

// fingerprint returns the recorded fingerprint for a request.
func (c *Client) fingerprint(key string) (packFingerprint, bool) {
	c.fpMu.Lock()
	defer c.fpMu.Unlock()
	f, ok := c.fps[key]
	return f, ok
}

// maxFingerprints bounds the table: a storm has one request, a run with
// distinct requests (throttling's storm) should not grow it without end.
const maxFingerprints = 1024

func (c *Client) remember(key string, f packFingerprint) {
	c.fpMu.Lock()
	defer c.fpMu.Unlock()
	if c.fps == nil {
		c.fps = map[string]packFingerprint{}
	}
	if len(c.fps) < maxFingerprints {
		c.fps[key] = f
	}
}

// NewClient returns a Client with its own connection pool.
func NewClient(opts Options) *Client {
	c := &Client{user: opts.Username, pass: opts.Password, agent: opts.Agent}
	if c.agent == "" {
		c.agent = "sluice-loadgen/1"
	}
	rt := opts.Transport
	if rt == nil {
		idle := opts.MaxConnsPerHost
		if idle <= 0 {
			idle = 64
		}
		rt = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4 * idle,
			MaxIdleConnsPerHost: idle,
			IdleConnTimeout:     90 * time.Second,
			// git does not compress responses it can't shrink (packs
			// are already deflated); asking for gzip would only cost
			// server CPU the baseline doesn't spend.
			DisableCompression: true,
		}
	}
	c.hc = &http.Client{
		Transport: rt,
		// git follows no redirects for POSTs either; a redirect here
		// means a misconfigured URL and should fail loudly.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// CloseIdleConnections closes the pool's idle connections.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Ref is one advertised reference.
type Ref struct {
	Name string
	OID  string
	// Peeled is the object an annotated tag points at, if advertised.
	Peeled string
	// Target is the ref a symbolic ref (HEAD) points at, if advertised.
	Target string
}

// Result describes one clone or fetch.
type Result struct {
	// Refs is how many refs were advertised, Wants and Haves how many
	// object ids were sent, Common how many haves the server acknowledged.
	Refs, Wants, Haves, Common int
	// Objects is the object count from the pack header.
	Objects uint32
	// Checksummed says the pack's SHA-1 was computed and matched its
	// trailer; with VerifyFingerprint, false means it matched the
	// fingerprint of a pack that was.
	Checksummed bool
	// PackBytes is the size of the pack including header and trailer.
	PackBytes int64
	// Bytes counts every response body byte of the operation.
	Bytes int64
	// TTFB is the time from the start of the operation to the first pack
	// byte: for the server, ref advertisement plus counting and compressing
	// up to the first object.
	TTFB time.Duration
	// Total is the time of the whole operation.
	Total time.Duration
}

// CloneOptions configure a clone.
type CloneOptions struct {
	Protocol Protocol
	Verify   Verify
}

// FetchOptions configure a fetch.
type FetchOptions struct {
	Protocol Protocol
	// Wants are the objects asked for; empty means the tips of every
	// branch and tag, as a clone or a fetch of all refs would ask.
	Wants []string
	// Haves are commits the client claims to have, newest first.
	Haves []string
	// Verify says how the pack is checked.
	Verify Verify
}

// Clone fetches every branch and tag with no haves, as `git clone` does.
func (c *Client) Clone(ctx context.Context, rawURL string, opts CloneOptions) (Result, error) {
	return c.Fetch(ctx, rawURL, FetchOptions{Protocol: opts.Protocol, Verify: opts.Verify})
}

// Fetch negotiates with opts.Haves and downloads and verifies the pack.
func (c *Client) Fetch(ctx context.Context, rawURL string, opts FetchOptions) (Result, error) {
	ep, err := c.endpoint(rawURL)
	if err != nil {
		return Result{}, err
	}
	op := &fetchOp{c: c, ep: ep, where: ep.base, start: time.Now(), opts: opts}
	switch opts.Protocol {
	case V0:
		err = op.runV0(ctx)
	case V2:
		err = op.runV2(ctx)
	default:
		err = fmt.Errorf("unsupported protocol %v", opts.Protocol)
	}
	op.res.Total = time.Since(op.start)
	return op.res, err
}

// LsRemote lists the refs of the repository as `git ls-remote` does.
func (c *Client) LsRemote(ctx context.Context, rawURL string, proto Protocol) ([]Ref, error) {
	ep, err := c.endpoint(rawURL)
	if err != nil {
		return nil, err
	}
	var n int64
	switch proto {
	case V0:
		adv, err := c.advertisement(ctx, ep, "git-upload-pack", &n)
		if err != nil {
			return nil, err
		}
		return adv.refs, nil
	case V2:
		caps, err := c.v2Capabilities(ctx, ep, &n)
		if err != nil {
			return nil, err
		}
		return c.lsRefs(ctx, ep, caps, nil, &n)
	}
	return nil, fmt.Errorf("unsupported protocol %v", proto)
}

// endpoint is a repository URL split into its base and credentials.
type endpoint struct {
	base       string
	user, pass string
	auth       bool
}

func (c *Client) endpoint(rawURL string) (endpoint, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return endpoint{}, fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return endpoint{}, fmt.Errorf("unsupported url scheme %q", u.Scheme)
	}
	ep := endpoint{user: c.user, pass: c.pass, auth: c.user != "" || c.pass != ""}
	if u.User != nil {
		ep.user = u.User.Username()
		ep.pass, _ = u.User.Password()
		ep.auth = true
		u.User = nil
	}
	u.RawQuery, u.Fragment = "", ""
	ep.base = strings.TrimSuffix(u.String(), "/")
	return ep, nil
}

// response is an HTTP response body being read as pkt-lines, counting the
// bytes it delivers into *n.
type response struct {
	body io.ReadCloser
	pkt  *pktReader
}

func (r *response) close() {
	// Draining what little may follow the final flush lets the connection
	// go back to the pool; a large remainder means a broken exchange, and
	// closing without draining is then the right thing.
	io.CopyN(io.Discard, r.body, 64<<10)
	r.body.Close()
	r.pkt.release()
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// do sends one request and checks status and content type.
func (c *Client) do(ctx context.Context, ep endpoint, method, path string, body []byte, hdr map[string]string, wantType string, n *int64) (*response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, ep.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("User-Agent", "git/"+c.agent)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if ep.auth {
		req.SetBasicAuth(ep.user, ep.pass)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &HTTPError{Method: method, Path: path, Status: resp.StatusCode, Body: strings.TrimSpace(string(msg))}
	}
	if ct := resp.Header.Get("Content-Type"); ct != wantType {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: content type %q, want %q", method, path, ct, wantType)
	}
	// No bufio: the pkt-line reader's buffer is the one read buffer.
	return &response{body: resp.Body, pkt: newPktReader(&countingReader{r: resp.Body, n: n})}, nil
}

// HTTPError is a non-200 answer.
type HTTPError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: http %d: %s", e.Method, e.Path, e.Status, e.Body)
}

// RemoteError is an error the server reported in the protocol (an ERR
// pkt-line or side band 3).
type RemoteError struct{ Message string }

func (e *RemoteError) Error() string { return "remote: " + e.Message }

// advertisement is a v0 ref advertisement.
type advertisement struct {
	refs []Ref
	caps map[string]string
}

// advertisement fetches and parses GET info/refs for a v0 service.
func (c *Client) advertisement(ctx context.Context, ep endpoint, service string, n *int64) (*advertisement, error) {
	resp, err := c.do(ctx, ep, http.MethodGet, "/info/refs?service="+service, nil, nil,
		"application/x-"+service+"-advertisement", n)
	if err != nil {
		return nil, err
	}
	defer resp.close()
	kind, line, err := resp.pkt.line()
	if err != nil {
		return nil, fmt.Errorf("read advertisement: %w", err)
	}
	if kind != pktData || line != "# service="+service {
		return nil, fmt.Errorf("read advertisement: unexpected first line %q", line)
	}
	if kind, _, err := resp.pkt.line(); err != nil || kind != pktFlush {
		return nil, fmt.Errorf("read advertisement: no flush after service line: %v", err)
	}
	return readRefAdvertisement(resp.pkt)
}

// readRefAdvertisement parses a v0 ref advertisement up to its flush: what
// follows the service line over HTTP, and all a server sends first over SSH.
func readRefAdvertisement(pkt *pktReader) (*advertisement, error) {
	adv := &advertisement{caps: map[string]string{}}
	first := true
	for {
		kind, line, err := pkt.line()
		if err != nil {
			return nil, fmt.Errorf("read advertisement: %w", err)
		}
		if kind == pktFlush {
			break
		}
		if kind != pktData {
			return nil, fmt.Errorf("read advertisement: unexpected packet %d", kind)
		}
		if first {
			first = false
			var caps string
			line, caps, _ = strings.Cut(line, "\x00")
			for _, cp := range strings.Fields(caps) {
				k, v, _ := strings.Cut(cp, "=")
				adv.caps[k] = v
			}
			if strings.HasPrefix(line, "version ") {
				return nil, errors.New("read advertisement: server answered with protocol v2")
			}
		}
		oid, name, ok := strings.Cut(line, " ")
		if !ok || !validOID(oid) {
			if strings.HasPrefix(line, "shallow ") {
				continue
			}
			return nil, fmt.Errorf("read advertisement: bad ref line %q", line)
		}
		if name == "capabilities^{}" {
			continue // an empty repository
		}
		if base, ok := strings.CutSuffix(name, "^{}"); ok {
			if len(adv.refs) > 0 && adv.refs[len(adv.refs)-1].Name == base {
				adv.refs[len(adv.refs)-1].Peeled = oid
			}
			continue
		}
		adv.refs = append(adv.refs, Ref{Name: name, OID: oid})
	}
	if sym, ok := adv.caps["symref"]; ok {
		// Only the last symref= survives the map; git advertises one, HEAD.
		if from, to, ok := strings.Cut(sym, ":"); ok {
			for i := range adv.refs {
				if adv.refs[i].Name == from {
					adv.refs[i].Target = to
				}
			}
		}
	}
	return adv, nil
}

// v2Capabilities fetches the v2 capability advertisement.
func (c *Client) v2Capabilities(ctx context.Context, ep endpoint, n *int64) (map[string]string, error) {
	resp, err := c.do(ctx, ep, http.MethodGet, "/info/refs?service=git-upload-pack", nil,
		map[string]string{"Git-Protocol": "version=2"}, "application/x-git-upload-pack-advertisement", n)
	if err != nil {
		return nil, err
	}
	defer resp.close()
	kind, line, err := resp.pkt.line()
	if err != nil {
		return nil, fmt.Errorf("read capabilities: %w", err)
	}
	// Some servers precede the v2 advertisement with the v0 service line.
	if kind == pktData && strings.HasPrefix(line, "# service=") {
		if kind, _, err = resp.pkt.line(); err != nil || kind != pktFlush {
			return nil, fmt.Errorf("read capabilities: no flush after service line: %v", err)
		}
		if kind, line, err = resp.pkt.line(); err != nil {
			return nil, fmt.Errorf("read capabilities: %w", err)
		}
	}
	return readV2Capabilities(resp.pkt, kind, line)
}

// readV2Capabilities parses a v2 capability advertisement whose first
// packet (kind, line) has been read.
func readV2Capabilities(pkt *pktReader, kind pktKind, line string) (map[string]string, error) {
	if kind != pktData || line != "version 2" {
		return nil, fmt.Errorf("server does not speak protocol v2: first line %q", line)
	}
	caps := map[string]string{}
	for {
		kind, line, err := pkt.line()
		if err != nil {
			return nil, fmt.Errorf("read capabilities: %w", err)
		}
		if kind == pktFlush {
			break
		}
		k, v, _ := strings.Cut(line, "=")
		caps[k] = v
	}
	for _, need := range []string{"ls-refs", "fetch"} {
		if _, ok := caps[need]; !ok {
			return nil, fmt.Errorf("server lacks v2 command %q", need)
		}
	}
	if f, ok := caps["object-format"]; ok && f != "sha1" {
		return nil, fmt.Errorf("unsupported object format %q", f)
	}
	return caps, nil
}

// v2Command starts a v2 command request body.
func (c *Client) v2Command(caps map[string]string, command string) *pktBuffer {
	var b pktBuffer
	b.line("command=%s\n", command)
	b.line("agent=%s\n", c.agent)
	if _, ok := caps["object-format"]; ok {
		b.line("object-format=sha1\n")
	}
	b.delim()
	return &b
}

func (c *Client) v2Post(ctx context.Context, ep endpoint, body []byte, n *int64) (*response, error) {
	return c.do(ctx, ep, http.MethodPost, "/git-upload-pack", body, map[string]string{
		"Git-Protocol": "version=2",
		"Content-Type": "application/x-git-upload-pack-request",
		"Accept":       "application/x-git-upload-pack-result",
	}, "application/x-git-upload-pack-result", n)
}

// lsRefs runs the v2 ls-refs command for HEAD, branches and tags (or the
// given prefixes).
func (c *Client) lsRefs(ctx context.Context, ep endpoint, caps map[string]string, prefixes []string, n *int64) ([]Ref, error) {
	resp, err := c.v2Post(ctx, ep, c.lsRefsRequest(caps, prefixes), n)
	if err != nil {
		return nil, err
	}
	defer resp.close()
	return readLsRefs(resp.pkt)
}

// lsRefsRequest is the body of a v2 ls-refs command for HEAD, branches and
// tags, or the given prefixes.
func (c *Client) lsRefsRequest(caps map[string]string, prefixes []string) []byte {
	b := c.v2Command(caps, "ls-refs")
	b.line("peel\n")
	b.line("symrefs\n")
	if prefixes == nil {
		prefixes = []string{"HEAD", "refs/heads/", "refs/tags/"}
	}
	for _, p := range prefixes {
		b.line("ref-prefix %s\n", p)
	}
	b.flush()
	return b.Bytes()
}

// readLsRefs parses an ls-refs response up to its flush.
func readLsRefs(pkt *pktReader) ([]Ref, error) {
	var refs []Ref
	for {
		kind, line, err := pkt.line()
		if err != nil {
			return nil, fmt.Errorf("read ls-refs: %w", err)
		}
		if kind == pktFlush {
			return refs, nil
		}
		if kind != pktData {
			return nil, fmt.Errorf("read ls-refs: unexpected packet %d", kind)
		}
		f := strings.Split(line, " ")
		if len(f) < 2 || (!validOID(f[0]) && f[0] != "unborn") {
			return nil, fmt.Errorf("read ls-refs: bad line %q", line)
		}
		r := Ref{OID: f[0], Name: f[1]}
		for _, attr := range f[2:] {
			if v, ok := strings.CutPrefix(attr, "peeled:"); ok {
				r.Peeled = v
			} else if v, ok := strings.CutPrefix(attr, "symref-target:"); ok {
				r.Target = v
			}
		}
		refs = append(refs, r)
	}
}

// fetchOp is one Fetch in progress.
type fetchOp struct {
	c  *Client
	ep endpoint
	// where names the repository (URL or SSH address and path); with the
	// request body that asked for the pack, it keys the fingerprint.
	where string
	key   string
	opts  FetchOptions
	start time.Time
	res   Result
}

// asked records the fetch request whose answer is read next.
func (op *fetchOp) asked(body []byte) []byte {
	op.key = op.where + "\x00" + string(body)
	return body
}

// wants returns opts.Wants, or every branch and tag tip, deduplicated.
func (op *fetchOp) wants(refs []Ref) []string {
	if len(op.opts.Wants) > 0 {
		return op.opts.Wants
	}
	var w []string
	for _, r := range refs {
		if strings.HasPrefix(r.Name, "refs/heads/") || strings.HasPrefix(r.Name, "refs/tags/") {
			w = append(w, r.OID)
		}
	}
	slices.Sort(w)
	return slices.Compact(w)
}

func (op *fetchOp) runV2(ctx context.Context) error {
	c, ep := op.c, op.ep
	caps, err := c.v2Capabilities(ctx, ep, &op.res.Bytes)
	if err != nil {
		return err
	}
	refs, err := c.lsRefs(ctx, ep, caps, nil, &op.res.Bytes)
	if err != nil {
		return err
	}
	op.res.Refs = len(refs)
	wants := op.wants(refs)
	op.res.Wants = len(wants)
	if len(wants) == 0 {
		return nil // an empty repository: git fetches nothing either
	}
	op.res.Haves = len(op.opts.Haves)
	haves := op.opts.Haves
	if len(haves) > 0 {
		// One negotiation round without "done": the server acknowledges
		// what it has in common and may say it is ready to send a pack.
		resp, err := c.v2Post(ctx, ep, op.fetchBody(caps, wants, haves, false), &op.res.Bytes)
		if err != nil {
			return err
		}
		common, ready, err := readAcknowledgments(resp.pkt)
		if err != nil {
			resp.close()
			return err
		}
		op.res.Common = len(common)
		if ready {
			err = op.readV2Sections(resp)
			resp.close()
			return err
		}
		resp.close()
		// Not ready: the server needs "done" and, being stateless, the
		// common commits again.
		haves = common
	}
	resp, err := c.v2Post(ctx, ep, op.fetchBody(caps, wants, haves, true), &op.res.Bytes)
	if err != nil {
		return err
	}
	defer resp.close()
	return op.readV2Sections(resp)
}

func (op *fetchOp) fetchBody(caps map[string]string, wants, haves []string, done bool) []byte {
	b := op.c.v2Command(caps, "fetch")
	// thin-pack is left off: a thin pack is only usable by a client that
	// holds the bases locally, and the load client holds nothing.
	b.line("no-progress\n")
	b.line("ofs-delta\n")
	for _, w := range wants {
		b.line("want %s\n", w)
	}
	for _, h := range haves {
		b.line("have %s\n", h)
	}
	if done {
		b.line("done\n")
	}
	b.flush()
	return op.asked(b.Bytes())
}

// readAcknowledgments reads a v2 acknowledgments section. It returns the
// acknowledged haves and whether the server said "ready", in which case the
// section ended with a delimiter and more sections follow.
func readAcknowledgments(pkt *pktReader) (common []string, ready bool, err error) {
	kind, line, err := pkt.line()
	if err != nil {
		return nil, false, fmt.Errorf("read acknowledgments: %w", err)
	}
	if kind != pktData || line != "acknowledgments" {
		return nil, false, fmt.Errorf("read acknowledgments: unexpected %q", line)
	}
	for {
		kind, line, err := pkt.line()
		if err != nil {
			return nil, false, fmt.Errorf("read acknowledgments: %w", err)
		}
		switch kind {
		case pktFlush:
			if ready {
				return nil, false, errors.New("read acknowledgments: ready without a pack")
			}
			return common, false, nil
		case pktDelim:
			if !ready {
				return nil, false, errors.New("read acknowledgments: pack without ready")
			}
			return common, true, nil
		case pktData:
		default:
			return nil, false, fmt.Errorf("read acknowledgments: unexpected packet %d", kind)
		}
		switch {
		case line == "NAK":
		case line == "ready":
			ready = true
		case strings.HasPrefix(line, "ACK ") && validOID(line[4:]):
			common = append(common, line[4:])
		default:
			return nil, false, fmt.Errorf("read acknowledgments: bad line %q", line)
		}
	}
}

// readV2Sections skips the sections before the packfile and reads it.
func (op *fetchOp) readV2Sections(resp *response) error {
	for {
		kind, line, err := resp.pkt.line()
		if err != nil {
			return fmt.Errorf("read fetch response: %w", err)
		}
		if kind != pktData {
			return fmt.Errorf("read fetch response: unexpected packet %d", kind)
		}
		switch line {
		case "packfile":
			return op.readPack(resp)
		case "shallow-info", "wanted-refs", "packfile-uris":
			for {
				kind, _, err := resp.pkt.line()
				if err != nil {
					return fmt.Errorf("read fetch response: %w", err)
				}
				if kind == pktDelim {
					break
				}
				if kind != pktData {
					return fmt.Errorf("read fetch response: section %q not closed by a delimiter", line)
				}
			}
		default:
			return fmt.Errorf("read fetch response: unexpected section %q", line)
		}
	}
}

// readPack demultiplexes side-band-64k packets until the flush, feeding
// band 1 to the verifier.
func (op *fetchOp) readPack(resp *response) error {
	v := newPackVerifier()
	var want packFingerprint
	known := false
	if op.opts.Verify == VerifyFingerprint {
		v.withCRC = true
		if want, known = op.c.fingerprint(op.key); known {
			v.h = nil
		}
	}
	if err := demux(resp.pkt, func(b []byte) error {
		if v.n == 0 {
			op.res.TTFB = time.Since(op.start)
		}
		_, err := v.Write(b)
		return err
	}); err != nil {
		return err
	}
	op.res.PackBytes = v.n
	if err := v.finish(); err != nil {
		return err
	}
	op.res.Objects = v.objects
	op.res.Checksummed = v.h != nil
	if op.opts.Verify == VerifyFingerprint {
		got := packFingerprint{size: v.n, objects: v.objects, crc: v.crc}
		copy(got.trailer[:], v.tail[:v.ntail])
		switch {
		case !known:
			op.c.remember(op.key, got)
		case got != want:
			return fmt.Errorf("pack differs from the checksummed pack for the same request: got %v, want %v", got, want)
		}
	}
	return nil
}

func (op *fetchOp) runV0(ctx context.Context) error {
	c, ep := op.c, op.ep
	adv, err := c.advertisement(ctx, ep, "git-upload-pack", &op.res.Bytes)
	if err != nil {
		return err
	}
	op.res.Refs = len(adv.refs)
	wants := op.wants(adv.refs)
	op.res.Wants = len(wants)
	if len(wants) == 0 {
		return nil
	}
	body, err := c.v0FetchRequest(adv, wants, op.opts.Haves)
	if err != nil {
		return err
	}
	op.asked(body)
	op.res.Haves = len(op.opts.Haves)
	resp, err := c.do(ctx, ep, http.MethodPost, "/git-upload-pack", body, map[string]string{
		"Content-Type": "application/x-git-upload-pack-request",
		"Accept":       "application/x-git-upload-pack-result",
	}, "application/x-git-upload-pack-result", &op.res.Bytes)
	if err != nil {
		return err
	}
	defer resp.close()
	common, err := readV0Acks(resp.pkt)
	if err != nil {
		return err
	}
	op.res.Common = common
	return op.readPack(resp)
}

// v0FetchRequest is a v0 upload-pack request: wants with the capabilities
// on the first, haves, and "done".
func (c *Client) v0FetchRequest(adv *advertisement, wants, haves []string) ([]byte, error) {
	for _, need := range []string{"side-band-64k", "ofs-delta"} {
		if _, ok := adv.caps[need]; !ok {
			return nil, fmt.Errorf("server lacks capability %q", need)
		}
	}
	caps := "side-band-64k ofs-delta"
	for _, opt := range []string{"multi_ack_detailed", "no-progress"} {
		if _, ok := adv.caps[opt]; ok {
			caps += " " + opt
		}
	}
	caps += " agent=" + c.agent
	var b pktBuffer
	for i, w := range wants {
		if i == 0 {
			b.line("want %s %s\n", w, caps)
		} else {
			b.line("want %s\n", w)
		}
	}
	b.flush()
	for _, h := range haves {
		b.line("have %s\n", h)
	}
	// A single round ending in "done": the server acknowledges common
	// haves as it meets them and then sends the pack, so no second
	// stateless request is needed.
	b.line("done\n")
	return b.Bytes(), nil
}

// readV0Acks reads a v0 negotiation's answer to a request ending in
// "done" (ACKs of common haves, then a final ACK or NAK) and returns how
// many haves were acknowledged.
func readV0Acks(pkt *pktReader) (int, error) {
	common := map[string]bool{}
	for {
		kind, line, err := pkt.line()
		if err != nil {
			return 0, fmt.Errorf("read negotiation: %w", err)
		}
		if kind != pktData {
			return 0, fmt.Errorf("read negotiation: unexpected packet %d", kind)
		}
		if line == "NAK" {
			break
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "ACK" || !validOID(f[1]) {
			return 0, fmt.Errorf("read negotiation: bad line %q", line)
		}
		common[f[1]] = true
		if len(f) == 2 {
			break // the final ACK after "done"
		}
	}
	return len(common), nil
}

func validOID(s string) bool {
	if len(s) != 40 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
