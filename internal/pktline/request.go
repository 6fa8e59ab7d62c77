package pktline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
)

// MaxRequestLines bounds the lines one request may hold, whatever its size
// in bytes: a fetch of every ref of a large mirror wants ~100k objects, and
// the accumulated haves of a long stateless negotiation stay well below
// that too.
const MaxRequestLines = 200_000

// ErrTooLarge is wrapped when a request exceeds maxBytes or MaxRequestLines.
var ErrTooLarge = problem.New(problem.TooLarge, "git request too large")

// ErrUnsupported is wrapped for a well-formed v2 command the pack cache does
// not handle (object-info, bundle-uri); the caller passes the raw bytes to
// git instead.
var ErrUnsupported = problem.New(problem.Invalid, "unsupported git command")

// UploadRequest is one parsed upload-pack request: a v0/v1 fetch (wants,
// then haves, up to "done" or the end of the stateless request) or one v2
// command (fetch or ls-refs).
type UploadRequest struct {
	Version int    // 0, 1 or 2
	Command string // "fetch" or "ls-refs"

	// Capabilities are the v0 capabilities of the first want line or the
	// v2 capability lines, as sent (agent=… included).
	Capabilities  []string
	Agent         string
	ObjectFormat  string
	ServerOptions []string

	Wants    []string
	WantRefs []string
	Haves    []string
	// HaveFlushes records, for v0/v1, where flushes fell among the haves:
	// each entry is the number of haves sent before that flush. They are
	// part of the request's meaning — stateless git answers each flushed
	// round and stops at the first one without "done", so "have X, flush,
	// done" and "have X, done" get different answers.
	HaveFlushes    []int
	Shallows       []string
	Deepen         int
	DeepenSince    int64
	DeepenNot      []string
	DeepenRelative bool
	Filter         string
	Done           bool

	// v2 fetch arguments.
	ThinPack, NoProgress, IncludeTag, OfsDelta, SidebandAll, WaitForDone bool
	PackfileURIs                                                         string

	// v2 ls-refs arguments.
	Peel, Symrefs, Unborn bool
	RefPrefixes           []string

	// Raw is the request exactly as read, to be replayed into git on a
	// cache miss.
	Raw []byte
}

// recorder keeps every byte read and enforces the byte limit.
type recorder struct {
	r     io.Reader
	buf   bytes.Buffer
	limit int64
}

func (rec *recorder) Read(p []byte) (int, error) {
	if int64(rec.buf.Len()) >= rec.limit {
		return 0, fmt.Errorf("%w: over %d bytes", ErrTooLarge, rec.limit)
	}
	if rem := rec.limit - int64(rec.buf.Len()); int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := rec.r.Read(p)
	rec.buf.Write(p[:n])
	return n, err
}

// ParseUploadRequest reads one upload-pack request for protocol version
// (0, 1 or 2) from r, keeping at most maxBytes.
//
// For v0/v1 it reads the want section up to its flush, then haves up to
// "done" or the end of input, as an HTTP stateless-rpc body is laid out. A
// request that is only a flush (the client wants nothing) is valid and has
// no wants. For v2 it reads one command up to its flush; a flush where a
// command should start (the client ending an SSH session) and a clean end of
// input return io.EOF.
func ParseUploadRequest(r io.Reader, version int, maxBytes int64) (*UploadRequest, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("%w: no byte budget", ErrTooLarge)
	}
	rec := &recorder{r: r, limit: maxBytes}
	p := &parser{pr: NewReader(rec), req: &UploadRequest{Version: version}}
	var err error
	switch version {
	case 0, 1:
		p.req.Command = "fetch"
		err = p.parseV0()
	case 2:
		err = p.parseV2()
	default:
		return nil, problem.New(problem.Invalid, "unknown protocol version %d", version)
	}
	if err != nil {
		return nil, err
	}
	p.req.Raw = rec.buf.Bytes()
	return p.req, nil
}

type parser struct {
	pr    *Reader
	req   *UploadRequest
	lines int
}

// next returns the next packet; data payloads lose one trailing LF.
func (p *parser) next() (Packet, error) {
	pkt, err := p.pr.ReadPacket()
	if err != nil {
		return pkt, err
	}
	if p.lines++; p.lines > MaxRequestLines {
		return pkt, fmt.Errorf("%w: over %d lines", ErrTooLarge, MaxRequestLines)
	}
	if pkt.Type == Data {
		pkt.Payload = bytes.TrimSuffix(pkt.Payload, []byte{'\n'})
	}
	return pkt, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// unexpectedEOF turns a clean EOF inside a request into an error.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (p *parser) parseV0() error {
	req := p.req
	first := true
	for {
		pkt, err := p.next()
		if err != nil {
			if first && err == io.EOF {
				return io.EOF
			}
			return unexpectedEOF(err)
		}
		if pkt.Type == Flush {
			break
		}
		if pkt.Type != Data {
			return malformed("%s packet in v0 request", pkt.Type)
		}
		line := string(pkt.Payload)
		if first {
			first = false
			if rest, ok := strings.CutPrefix(line, "want "); ok {
				oid, caps, _ := strings.Cut(rest, " ")
				line = "want " + oid
				for c := range strings.FieldsSeq(caps) {
					req.addCapability(c)
				}
			}
		}
		if err := p.v0WantLine(line); err != nil {
			return err
		}
	}
	if len(req.Wants) == 0 {
		return nil
	}
	for {
		pkt, err := p.next()
		if err == io.EOF {
			// A stateless negotiation round: haves without "done".
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case pkt.Type == Flush:
			req.HaveFlushes = append(req.HaveFlushes, len(req.Haves))
			continue
		case pkt.Type != Data:
			return malformed("%s packet in v0 haves", pkt.Type)
		case string(pkt.Payload) == "done":
			req.Done = true
			return nil
		}
		oid, ok := strings.CutPrefix(string(pkt.Payload), "have ")
		if !ok || !validOID(oid) {
			return malformed("unexpected line %q", truncate(pkt.Payload))
		}
		req.Haves = append(req.Haves, oid)
	}
}

func (p *parser) v0WantLine(line string) error {
	req := p.req
	verb, arg, _ := strings.Cut(line, " ")
	switch verb {
	case "want":
		if !validOID(arg) {
			return malformed("bad want %q", truncate([]byte(arg)))
		}
		req.Wants = append(req.Wants, arg)
	case "shallow":
		if !validOID(arg) {
			return malformed("bad shallow %q", truncate([]byte(arg)))
		}
		req.Shallows = append(req.Shallows, arg)
	case "deepen", "deepen-since", "deepen-not", "filter":
		return p.deepenOrFilter(verb, arg)
	default:
		return malformed("unexpected line %q", truncate([]byte(line)))
	}
	return nil
}

func (p *parser) deepenOrFilter(verb, arg string) error {
	req := p.req
	switch verb {
	case "deepen":
		n, err := strconv.Atoi(arg)
		if err != nil || n <= 0 {
			return malformed("bad deepen %q", truncate([]byte(arg)))
		}
		req.Deepen = n
	case "deepen-since":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return malformed("bad deepen-since %q", truncate([]byte(arg)))
		}
		req.DeepenSince = n
	case "deepen-not":
		if !validToken(arg) {
			return malformed("bad deepen-not %q", truncate([]byte(arg)))
		}
		req.DeepenNot = append(req.DeepenNot, arg)
	case "filter":
		if !validToken(arg) || req.Filter != "" {
			return malformed("bad filter %q", truncate([]byte(arg)))
		}
		req.Filter = arg
	}
	return nil
}

func (req *UploadRequest) addCapability(c string) {
	req.Capabilities = append(req.Capabilities, c)
	if v, ok := strings.CutPrefix(c, "agent="); ok {
		req.Agent = v
	}
	if v, ok := strings.CutPrefix(c, "object-format="); ok {
		req.ObjectFormat = v
	}
	if v, ok := strings.CutPrefix(c, "server-option="); ok {
		req.ServerOptions = append(req.ServerOptions, v)
	}
}

func (p *parser) parseV2() error {
	req := p.req
	pkt, err := p.next()
	if err != nil {
		return err // io.EOF: the client is done
	}
	if pkt.Type == Flush {
		return io.EOF
	}
	cmd, ok := strings.CutPrefix(string(pkt.Payload), "command=")
	if pkt.Type != Data || !ok {
		return malformed("expected a command")
	}
	switch cmd {
	case "fetch", "ls-refs":
		req.Command = cmd
	default:
		if validToken(cmd) {
			return fmt.Errorf("%w %q", ErrUnsupported, cmd)
		}
		return malformed("bad command %q", truncate([]byte(cmd)))
	}
	// Capability lines up to the delimiter (or a flush: no arguments).
	for {
		pkt, err := p.next()
		if err != nil {
			return unexpectedEOF(err)
		}
		if pkt.Type == Flush {
			return nil
		}
		if pkt.Type == Delim {
			break
		}
		if pkt.Type != Data || !validToken(string(pkt.Payload)) {
			return malformed("bad capability %q", truncate(pkt.Payload))
		}
		req.addCapability(string(pkt.Payload))
	}
	for {
		pkt, err := p.next()
		if err != nil {
			return unexpectedEOF(err)
		}
		if pkt.Type == Flush {
			return nil
		}
		if pkt.Type != Data {
			return malformed("%s packet in arguments", pkt.Type)
		}
		line := string(pkt.Payload)
		if req.Command == "fetch" {
			err = p.fetchArg(line)
		} else {
			err = p.lsRefsArg(line)
		}
		if err != nil {
			return err
		}
	}
}

func (p *parser) fetchArg(line string) error {
	req := p.req
	verb, arg, hasArg := strings.Cut(line, " ")
	if !hasArg {
		flag := map[string]*bool{
			"done": &req.Done, "thin-pack": &req.ThinPack, "no-progress": &req.NoProgress,
			"include-tag": &req.IncludeTag, "ofs-delta": &req.OfsDelta, "deepen-relative": &req.DeepenRelative,
			"sideband-all": &req.SidebandAll, "wait-for-done": &req.WaitForDone,
		}[verb]
		if flag == nil {
			return malformed("unexpected fetch argument %q", truncate([]byte(line)))
		}
		*flag = true
		return nil
	}
	switch verb {
	case "want", "have", "shallow":
		if !validOID(arg) {
			return malformed("bad %s %q", verb, truncate([]byte(arg)))
		}
		dst := map[string]*[]string{"want": &req.Wants, "have": &req.Haves, "shallow": &req.Shallows}[verb]
		*dst = append(*dst, arg)
	case "want-ref":
		if !validToken(arg) {
			return malformed("bad want-ref %q", truncate([]byte(arg)))
		}
		req.WantRefs = append(req.WantRefs, arg)
	case "deepen", "deepen-since", "deepen-not", "filter":
		return p.deepenOrFilter(verb, arg)
	case "packfile-uris":
		if !validToken(arg) {
			return malformed("bad packfile-uris %q", truncate([]byte(arg)))
		}
		req.PackfileURIs = arg
	default:
		return malformed("unexpected fetch argument %q", truncate([]byte(line)))
	}
	return nil
}

func (p *parser) lsRefsArg(line string) error {
	req := p.req
	switch {
	case line == "peel":
		req.Peel = true
	case line == "symrefs":
		req.Symrefs = true
	case line == "unborn":
		req.Unborn = true
	case strings.HasPrefix(line, "ref-prefix "):
		prefix := line[len("ref-prefix "):]
		if !validToken(prefix) {
			return malformed("bad ref-prefix %q", truncate([]byte(prefix)))
		}
		req.RefPrefixes = append(req.RefPrefixes, prefix)
	default:
		return malformed("unexpected ls-refs argument %q", truncate([]byte(line)))
	}
	return nil
}

// validOID accepts a lower-case hex SHA-1 or SHA-256 object id.
func validOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// validToken accepts a non-empty value of printable ASCII (spaces allowed:
// server options may hold them). Keeping control characters out keeps every
// Canonical line a single line.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func truncate(b []byte) string {
	const n = 64
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Key returns a hex SHA-256 of Canonical: requests with equal keys get the
// same response from the same repository state.
func (req *UploadRequest) Key() string {
	sum := sha256.Sum256([]byte(req.Canonical()))
	return hex.EncodeToString(sum[:])
}

// Canonical is the normalised text the Key hashes. It holds, one per line:
//
//   - the protocol version (v0 and v1 fetch responses are identical, but the
//     cache keeps them apart rather than depend on that) and the command;
//   - every capability except agent= and session-id=, sorted: capabilities
//     choose the response's framing (side-band, side-band-64k), negotiation
//     (multi_ack, multi_ack_detailed, no-done), pack encoding (ofs-delta,
//     thin-pack), extras (include-tag, no-progress) and the hash
//     (object-format); agent and session-id only name the client, and
//     dropping them is what lets different git versions share an entry.
//     Unknown capabilities are kept, so something new never shares an entry
//     with something old;
//   - wants, want-refs, shallows, deepen-not values and ref-prefixes, sorted
//     and de-duplicated: the server treats each as a set;
//   - haves, sorted and de-duplicated only for a v2 fetch with done (the
//     response then has no acknowledgments section, so the set decides the
//     pack), and otherwise in the order sent, because v0 ACK lines and the
//     v2 acknowledgments follow the client's order; for v0/v1 the flushes
//     among them too, where they fell (HaveFlushes), because a stateless
//     git answers round by round and stops at the first flush without
//     "done" — without them two requests with different answers would
//     share an entry, and one could poison the other;
//   - deepen, deepen-since, deepen-relative, filter, done and the v2
//     boolean arguments, each only when set;
//   - packfile-uris, which changes the response layout.
//
// Raw bytes are not part of it: pkt-line framing (trailing LFs, capability
// order) differs between client versions without changing the meaning.
func (req *UploadRequest) Canonical() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %d\ncommand %s\n", req.Version, req.Command)
	var caps []string
	for _, c := range req.Capabilities {
		if strings.HasPrefix(c, "agent=") || strings.HasPrefix(c, "session-id=") || c == "agent" {
			continue
		}
		caps = append(caps, c)
	}
	writeSet(&b, "capability", caps)
	writeSet(&b, "want", req.Wants)
	writeSet(&b, "want-ref", req.WantRefs)
	writeSet(&b, "shallow", req.Shallows)
	if req.Version == 2 && req.Done {
		writeSet(&b, "have", req.Haves)
	} else {
		flushes := req.HaveFlushes
		for i, h := range req.Haves {
			for len(flushes) > 0 && flushes[0] == i {
				b.WriteString("flush\n")
				flushes = flushes[1:]
			}
			fmt.Fprintf(&b, "have %s\n", h)
		}
		for range flushes {
			b.WriteString("flush\n")
		}
	}
	if req.Deepen > 0 {
		fmt.Fprintf(&b, "deepen %d\n", req.Deepen)
	}
	if req.DeepenSince != 0 {
		fmt.Fprintf(&b, "deepen-since %d\n", req.DeepenSince)
	}
	writeSet(&b, "deepen-not", req.DeepenNot)
	if req.Filter != "" {
		fmt.Fprintf(&b, "filter %s\n", req.Filter)
	}
	if req.PackfileURIs != "" {
		fmt.Fprintf(&b, "packfile-uris %s\n", req.PackfileURIs)
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{req.DeepenRelative, "deepen-relative"}, {req.Done, "done"}, {req.ThinPack, "thin-pack"},
		{req.NoProgress, "no-progress"}, {req.IncludeTag, "include-tag"}, {req.OfsDelta, "ofs-delta"},
		{req.SidebandAll, "sideband-all"}, {req.WaitForDone, "wait-for-done"},
		{req.Peel, "peel"}, {req.Symrefs, "symrefs"}, {req.Unborn, "unborn"},
	} {
		if f.set {
			b.WriteString(f.name + "\n")
		}
	}
	writeSet(&b, "ref-prefix", req.RefPrefixes)
	return b.String()
}

func writeSet(b *strings.Builder, name string, values []string) {
	s := slices.Clone(values)
	slices.Sort(s)
	for _, v := range slices.Compact(s) {
		fmt.Fprintf(b, "%s %s\n", name, v)
	}
}
