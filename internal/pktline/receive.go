package pktline

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
)

// RefCommand is one ref update of a push: move Ref from Old to New. A zero
// Old creates the ref, a zero New deletes it.
type RefCommand struct {
	Old, New, Ref string
}

// ReceiveRequest is the command section of a protocol v0/v1 receive-pack
// request: the "old new ref" lines up to their flush, the first carrying
// the capabilities after a NUL (gitprotocol-pack(5), "Reference Update
// Request"). The push options and the pack that may follow are not part of
// it.
type ReceiveRequest struct {
	Commands     []RefCommand
	Capabilities []string
}

// ErrNotPlainPush is wrapped for a well-formed receive-pack request this
// package does not interpret: a signed push (push-cert) or one from a
// shallow repository (shallow lines). Callers hand those to git as they
// are.
var ErrNotPlainPush = problem.New(problem.Invalid, "not a plain push")

// ParseReceiveRequest reads the command section of a receive-pack request
// from r, reading at most maxBytes and nothing past the section's flush.
// A request that ends before its flush is io.ErrUnexpectedEOF; one over
// maxBytes wraps ErrTooLarge.
func ParseReceiveRequest(r io.Reader, maxBytes int64) (*ReceiveRequest, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("%w: no byte budget", ErrTooLarge)
	}
	p := &parser{pr: NewReader(&recorder{r: r, limit: maxBytes})}
	req := &ReceiveRequest{}
	for {
		pkt, err := p.next()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
		if pkt.Type == Flush {
			break
		}
		if pkt.Type != Data {
			return nil, fmt.Errorf("%w: %s in a receive-pack request", ErrMalformed, pkt.Type)
		}
		line := pkt.Payload
		if len(req.Commands) == 0 {
			var caps []byte
			var found bool
			if line, caps, found = bytes.Cut(line, []byte{0}); found {
				req.Capabilities = strings.Fields(string(caps))
			}
		}
		if bytes.HasPrefix(line, []byte("shallow ")) || bytes.HasPrefix(line, []byte("push-cert")) {
			return nil, fmt.Errorf("%w: %q", ErrNotPlainPush, firstWord(line))
		}
		cmd, ok := parseRefCommand(string(line))
		if !ok {
			return nil, fmt.Errorf("%w: bad ref update %q", ErrMalformed, cut(line, 100))
		}
		req.Commands = append(req.Commands, cmd)
	}
	// A flush alone (no commands) is a client with nothing to push.
	return req, nil
}

// parseRefCommand parses "old new ref". Both ids must be of one object
// format; the ref is anything without spaces, for the caller to judge.
func parseRefCommand(s string) (RefCommand, bool) {
	f := strings.Split(s, " ")
	if len(f) != 3 || f[2] == "" || !validOID(f[0]) || !validOID(f[1]) || len(f[0]) != len(f[1]) {
		return RefCommand{}, false
	}
	return RefCommand{Old: f[0], New: f[1], Ref: f[2]}, true
}

func firstWord(b []byte) string {
	w, _, _ := bytes.Cut(b, []byte{' '})
	w, _, _ = bytes.Cut(w, []byte{0})
	return string(cut(w, 20))
}

func cut(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// HasCapability says whether the client asked for capability name.
func (q *ReceiveRequest) HasCapability(name string) bool {
	return slices.Contains(q.Capabilities, name)
}

// WriteReceiveSuccess writes what receive-pack answers when the pack
// unpacked and every ref update succeeded: the status report ("unpack ok",
// then "ok <ref>" for each command; report-status and report-status-v2
// agree on these lines), wrapped in band 1 when the client asked for
// side-band-64k, and nothing but the side-band's closing flush when it
// asked for no report.
func WriteReceiveSuccess(w io.Writer, q *ReceiveRequest) error {
	var report bytes.Buffer
	if q.HasCapability("report-status") || q.HasCapability("report-status-v2") {
		pw := NewWriter(&report)
		if err := pw.WriteString("unpack ok\n"); err != nil {
			return err
		}
		for _, c := range q.Commands {
			if err := pw.WriteString("ok " + c.Ref + "\n"); err != nil {
				return err
			}
		}
		if err := pw.Flush(); err != nil {
			return err
		}
	}
	// receive-pack offers side-band-64k only, and answers a client that
	// asks for the old 1000-byte side-band without one.
	if !q.HasCapability("side-band-64k") {
		_, err := w.Write(report.Bytes())
		return err
	}
	var out bytes.Buffer
	if report.Len() > 0 {
		if _, err := NewSideband(&out, BandData, Sideband64kMax).Write(report.Bytes()); err != nil {
			return err
		}
	}
	out.WriteString("0000")
	_, err := w.Write(out.Bytes())
	return err
}
