package hosting

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// hookRelay carries Sluice's hook messages that git writes to receive-pack's
// stderr into the HTTP response, as side-band progress the client prints
// as "remote: …".
//
// git relays pre-receive's stderr through the side-band itself, but not the
// reference-transaction hook's: that hook inherits receive-pack's stderr,
// which stateless HTTP has no channel for. Without the relay a push whose
// ref update could not be recorded (the database went away after
// pre-receive) showed only "failed to update ref", never why, nor that
// nothing changed. Only lines starting with "sluice: " pass: those are the
// hooks' user-facing messages; git's own stderr may name server paths and
// stays in the log (gitcmd keeps its tail).
//
// The messages can only be slotted between whole packets of the response,
// and only when the client negotiated a side-band (receive-pack's first
// packet then starts with a band number, 1 to 3, where a plain
// report-status starts with "unpack"). The report comes after the hook has
// run but the two pipes are read concurrently, so the relay holds back
// each top-level flush packet until the next packet or Close, and Close,
// called once git has exited and its stderr is drained, writes pending
// messages before the final flush.
type hookRelay struct {
	w io.Writer

	mu       sync.Mutex
	buf      []byte // unparsed tail of the stream: part of one packet
	started  bool   // first data packet seen
	sideband bool
	raw      bool // the stream is not pkt-lines: passed through as is
	held     bool // a flush packet is held back
	lines    []string
	partial  []byte // stderr after its last newline
}

// hookMessagePrefix starts every message Sluice's hooks print for users.
const hookMessagePrefix = "sluice: "

// maxRelayed bounds what the relay keeps from stderr: a hook prints a few
// lines; a flood is cut, not buffered.
const maxRelayed = 64

func newHookRelay(w io.Writer) *hookRelay { return &hookRelay{w: w} }

// Stderr is where git's stderr goes.
func (h *hookRelay) Stderr() io.Writer { return relayStderr{h} }

type relayStderr struct{ h *hookRelay }

func (s relayStderr) Write(p []byte) (int, error) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partial = append(h.partial, p...)
	for {
		i := bytes.IndexByte(h.partial, '\n')
		if i < 0 {
			break
		}
		h.note(string(h.partial[:i]))
		h.partial = h.partial[i+1:]
	}
	if len(h.partial) > 4096 {
		h.partial = h.partial[:0]
	}
	return len(p), nil
}

// note keeps line when it is a hook's message for the user. Callers hold mu.
func (h *hookRelay) note(line string) {
	line = strings.TrimRight(line, "\r ")
	if strings.HasPrefix(line, hookMessagePrefix) && len(h.lines) < maxRelayed {
		h.lines = append(h.lines, line)
	}
}

// Write passes receive-pack's stdout through, packet by packet.
func (h *hookRelay) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.raw {
		return h.w.Write(p)
	}
	h.buf = append(h.buf, p...)
	for len(h.buf) >= 4 {
		n, ok := pktline.Length(h.buf[:4])
		if !ok {
			// Not pkt-line framing: stop parsing and pass everything on.
			err := h.flushHeld()
			if err == nil {
				_, err = h.w.Write(h.buf)
			}
			h.buf = h.buf[:0]
			h.raw = true
			if err != nil {
				return 0, err
			}
			return len(p), nil
		}
		if n == 0 { // flush
			if err := h.flushHeld(); err != nil {
				return 0, err
			}
			h.held = true
			h.buf = h.buf[4:]
			continue
		}
		if n < 4 { // delim, response-end: not used by receive-pack
			n = 4
		}
		if len(h.buf) < n {
			break
		}
		if !h.started && n > 4 {
			h.started = true
			h.sideband = h.buf[4] >= 1 && h.buf[4] <= 3
		}
		if err := h.flushHeld(); err != nil {
			return 0, err
		}
		if _, err := h.w.Write(h.buf[:n]); err != nil {
			return 0, err
		}
		h.buf = h.buf[n:]
	}
	// Keep the tail small and separate from p, which the caller reuses.
	h.buf = append(h.buf[:0:0], h.buf...)
	return len(p), nil
}

// flushHeld writes a flush packet held back. Callers hold mu.
func (h *hookRelay) flushHeld() error {
	if !h.held {
		return nil
	}
	h.held = false
	_, err := io.WriteString(h.w, "0000")
	return err
}

// Close writes the relayed messages, then what is still held back. Call
// it once git has exited.
func (h *hookRelay) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.partial) > 0 {
		h.note(string(h.partial))
		h.partial = nil
	}
	if h.sideband && len(h.lines) > 0 {
		// side-band's smaller packets fit side-band-64k too.
		var b bytes.Buffer
		_, _ = pktline.NewSideband(&b, pktline.BandProgress, pktline.SidebandMax).Write([]byte(strings.Join(h.lines, "\n") + "\n"))
		if _, err := h.w.Write(b.Bytes()); err != nil {
			return err
		}
		h.lines = nil
	}
	if err := h.flushHeld(); err != nil {
		return err
	}
	if len(h.buf) > 0 {
		_, err := h.w.Write(h.buf)
		h.buf = nil
		return err
	}
	return nil
}


// runRelayed is run for a receive-pack whose stderr has no channel to the
// user (HTTP): the hooks' messages on it reach the client through a
// hookRelay around out.
func (s *Service) runRelayed(ctx context.Context, op Op, r *store.Repository, t *tracker, flags []string, in io.Reader, out *countingWriter, env []string) error {
	relay := newHookRelay(out.w)
	out.w = relay
	op.Stderr = relay.Stderr()
	head := &headRecorder{r: in, max: maxCommandsHead}
	// Queue messages stay unsaid, as before the relay: relayed at the end
	// of the push they would describe a wait that is over.
	err := s.run(ctx, op, r, t, flags, head, out, env, func(string) {})
	var pe *problem.Error
	if err != nil && out.n.Load() == 0 && ctx.Err() == nil && !errors.As(err, &pe) {
		// git died before answering: a reference-transaction hook that
		// refuses makes receive-pack exit with "ref updates aborted by
		// hook" and no report, which the client took for a remote that
		// hung up. The hook's message is the answer: as the report git
		// would have written (every ref refused, the message as remote
		// progress) when the request shows how, else as the transport's
		// error (band 3 over HTTP).
		if msgs := relay.take(); len(msgs) > 0 {
			perr := problem.Wrap(problem.Unavailable, err, strings.Join(msgs, "\n"))
			if refusalReport(out, head.bytes(), msgs) {
				if cerr := relay.Close(); cerr != nil {
					return fmt.Errorf("write response: %w", cerr)
				}
				return reportedError{perr}
			}
			return perr
		}
	}
	if cerr := relay.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write response: %w", cerr)
	}
	return err
}

// maxCommandsHead bounds what headRecorder keeps: the ref commands of a
// push, before its pack. A push of more refs than fit gets the transport's
// error instead of a report.
const maxCommandsHead = 64 << 10

// headRecorder keeps the first max bytes read through it.
type headRecorder struct {
	r   io.Reader
	max int
	mu  sync.Mutex
	b   []byte
}

func (h *headRecorder) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.mu.Lock()
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(n, room)]...)
	}
	h.mu.Unlock()
	return n, err
}

func (h *headRecorder) bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.b
}

// refusalReport writes to w the answer receive-pack gives when every ref
// update fails: "unpack ok", one "ng" per ref naming why, msgs as remote
// progress. It needs the request's commands, complete in head, and a
// client that asked for a report on a side-band; otherwise it writes
// nothing and returns false.
func refusalReport(w io.Writer, head []byte, msgs []string) bool {
	rd := pktline.NewReader(bytes.NewReader(head))
	var refs []string
	var caps []string
	for {
		pkt, err := rd.ReadPacket()
		if err != nil || pkt.Type == pktline.Delim || pkt.Type == pktline.ResponseEnd {
			return false
		}
		if pkt.Type == pktline.Flush {
			break
		}
		line := strings.TrimSuffix(string(pkt.Payload), "\n")
		if cmd, c, ok := strings.Cut(line, "\x00"); ok {
			line, caps = cmd, strings.Fields(c)
		}
		f := strings.Fields(line)
		if len(f) != 3 || strings.HasPrefix(line, "shallow ") {
			return false
		}
		refs = append(refs, f[2])
	}
	band := 0
	switch {
	case slices.Contains(caps, "side-band-64k"):
		band = pktline.Sideband64kMax
	case slices.Contains(caps, "side-band"):
		band = pktline.SidebandMax
	}
	if len(refs) == 0 || band == 0 || !(slices.Contains(caps, "report-status") || slices.Contains(caps, "report-status-v2")) {
		return false
	}
	reason, _, _ := strings.Cut(strings.TrimPrefix(msgs[0], hookMessagePrefix), ";")
	var report bytes.Buffer
	pw := pktline.NewWriter(&report)
	_ = pw.WriteString("unpack ok\n")
	for _, ref := range refs {
		_ = pw.WriteString("ng " + ref + " " + reason + "\n")
	}
	_ = pw.Flush()
	var b bytes.Buffer
	_, _ = pktline.NewSideband(&b, pktline.BandProgress, band).Write([]byte(strings.Join(msgs, "\n") + "\n"))
	_, _ = pktline.NewSideband(&b, pktline.BandData, band).Write(report.Bytes())
	b.WriteString("0000")
	_, err := w.Write(b.Bytes())
	return err == nil
}

// take returns the hook messages relayed so far and forgets them, for a
// caller that reports them itself.
func (h *hookRelay) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.partial) > 0 {
		h.note(string(h.partial))
		h.partial = nil
	}
	msgs := h.lines
	h.lines = nil
	return msgs
}
