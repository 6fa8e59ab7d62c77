package hosting

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sluice-scm/sluice/internal/pktline"
)

// Queue progress. Admission reports, while a request waits for a hosting
// ticket, how many are ahead of it. Over SSH that text goes to the
// session's stderr, which the user sees. Smart HTTP has no side channel and
// nothing may precede git's first byte on protocol v0, but a protocol v2
// fetch that ends with "done" and asks for no shallow information, no
// wanted refs and no packfile URIs gets a response that git begins with
// the "packfile" section header, after which everything is on the
// side-band, where band 2 is progress the client prints. packfileWriter
// sends that header itself as soon as there is something to say, then the
// queue messages on band 2, and drops git's own header when git starts.
//
// The messages reach packfileWriter as an argument, not with the writer
// git writes to: on a pack cache miss git runs in the cache's producer,
// whose output is the cache file and must be exactly git's. serveStateless
// gives pw.progress to the cache (packcache.Cache.Serve's progress), which
// fans the producer's messages out to every request following it, and to
// run when git runs for this request alone.

// packfileHeader is git's "packfile" section header in a v2 fetch response.
var packfileHeader = []byte("000dpackfile\n")

// earlyPackfile says whether git's response to the v2 request body starts
// with the packfile section header, so that packfileWriter may send it
// before git runs, and whether the client wants progress at all.
func earlyPackfile(ur *pktline.UploadRequest, bodyLen int) bool {
	if len(ur.Raw) != bodyLen {
		return false
	}
	// Without done git may answer with acknowledgments; shallow lines and
	// deepening bring shallow-info, want-ref wanted-refs, packfile-uris its
	// section; sideband-all multiplexes the section headers too.
	return ur.Command == "fetch" && ur.Done && len(ur.Wants) > 0 && !ur.NoProgress &&
		len(ur.Shallows) == 0 && ur.Deepen == 0 && ur.DeepenSince == 0 && len(ur.DeepenNot) == 0 &&
		!ur.DeepenRelative && len(ur.WantRefs) == 0 && ur.PackfileURIs == "" && !ur.SidebandAll && !ur.WaitForDone
}

// packfileWriter is the response writer of a request earlyPackfile
// accepted (see above).
type packfileWriter struct {
	w io.Writer

	mu        sync.Mutex
	announced bool   // the header went out, from here
	started   bool   // git's (or the cache's) bytes began
	checked   bool   // git's own header was seen and dropped
	head      []byte // git's first bytes, while announced and not checked
	closed    bool   // the request is over: nothing more may be written
}

// progress sends msg on band 2, announcing the packfile section first.
// Once the response proper has started, or the request is over, it does
// nothing: the text would land inside git's stream.
func (p *packfileWriter) progress(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.started {
		return
	}
	if !p.announced {
		if _, err := p.w.Write(packfileHeader); err != nil {
			p.closed = true
			return
		}
		p.announced = true
	}
	if err := pktline.Progress(p.w, msg+"\n"); err != nil {
		p.closed = true
	}
}

// Write passes the response on, without git's packfile header when it was
// sent already.
func (p *packfileWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	if !p.announced || p.checked {
		return p.w.Write(b)
	}
	k := min(len(packfileHeader)-len(p.head), len(b))
	p.head = append(p.head, b[:k]...)
	if len(p.head) < len(packfileHeader) {
		return len(b), nil
	}
	if !bytes.Equal(p.head, packfileHeader) {
		// earlyPackfile let through a request git answers differently.
		return 0, fmt.Errorf("git's fetch response began with %q, not the packfile section", p.head)
	}
	p.checked = true
	n, err := p.w.Write(b[k:])
	return k + n, err
}

// ReadFrom keeps a cache hit's sendfile path (see countingWriter) when
// nothing was announced, which is always the case for a hit.
func (p *packfileWriter) ReadFrom(r io.Reader) (int64, error) {
	p.mu.Lock()
	direct := !p.announced
	if direct {
		p.started = true
	}
	p.mu.Unlock()
	if direct {
		if rf, ok := p.w.(io.ReaderFrom); ok {
			return rf.ReadFrom(r)
		}
	}
	return io.Copy(struct{ io.Writer }{p}, r)
}

// SetContentLength forwards a hit's length while nothing was written.
func (p *packfileWriter) SetContentLength(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.announced {
		return
	}
	if ls, ok := p.w.(interface{ SetContentLength(int64) }); ok {
		ls.SetContentLength(n)
	}
}

// finish ends the request's use of the writer. When err stopped the
// request after the header was announced but before git said anything (the
// queue wait ran out), the client is told why on band 3, which it prints
// as "remote: …", and the returned error says so to the transport.
func (p *packfileWriter) finish(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if err == nil || !p.announced || p.started {
		return err
	}
	if werr := pktline.WriteProblem(p.w, pktline.AsBand3, err); werr != nil {
		return err
	}
	_, _ = io.WriteString(p.w, "0000")
	return reportedError{err}
}

// reportedError is an error the client was already told about inside the
// protocol.
type reportedError struct{ error }

func (e reportedError) Unwrap() error { return e.error }

// Reported says whether err was already reported to the client inside the
// protocol: the response is complete, and the transport should end it
// normally instead of aborting it or writing an error of its own.
func Reported(err error) bool {
	var r reportedError
	return errors.As(err, &r)
}
