package packcache

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// File layout of an entry: header, response, trailer. The header says what
// the file is before anything else is trusted; the trailer, written last,
// says the response is complete and what its checksum is, so a file cut
// short by a crash has no valid trailer at its end.
const (
	headerSize  = 80 // magic 8, version 4, kind 1, pad 3, repo 8, gen 8, created 8, key 32, reserved 8
	trailerSize = 48 // magic 8, length 8, sha256 32
	formatV1    = 1
	tmpPrefix   = "tmp-"
)

var (
	headerMagic  = [8]byte{'S', 'L', 'U', 'I', 'C', 'E', 'P', 'C'}
	trailerMagic = [8]byte{'S', 'L', 'P', 'C', 'D', 'O', 'N', 'E'}
)

// copyBufSize is the chunk a client is fed with when the writer does not
// take the file directly (io.ReaderFrom): large enough that a 13 MB hit is
// a few dozen writes, small enough to pool.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// entry is one cached response: in progress while its producer runs, then
// ready (indexed in the LRU) or gone.
type entry struct {
	key     string
	kind    string
	repoID  int64
	gen     int64
	reqKey  string // lookup.reqKey
	created time.Time
	// refs is the refs digest the response was produced from (see
	// Config.RefsDigest); "" when unknown, as for entries loaded from
	// disk, which an outage lookup therefore never serves.
	refs string

	// Guarded by Cache.mu.
	path       string
	elem       *list.Element // in Cache.lru once ready
	lastAccess time.Time
	dropped    bool // ClearRepo during production: do not keep

	// Also guarded by Cache.mu: who follows the producer, for the bounds
	// on abandoned producers (abandon.go).
	followers       int                // clients streaming it now
	joins           int                // clients that ever did
	requestedBefore bool               // its key was asked for before this production
	produced        bool               // the producer has returned
	cancel          context.CancelFunc // stops the producer; nil for entries loaded from disk
	orphanTimer     *time.Timer        // running while nobody follows

	// orphaned is set while nobody follows the producer: Write then
	// checks the byte budget, and overBudget abandons the entry.
	orphaned   atomic.Bool
	orphanMax  int64
	overBudget func()

	// Producer only.
	file *os.File
	hash hash.Hash
	werr error

	// fan passes the producer's queueing messages ("waiting for
	// capacity") to every request waiting on this entry, not only to the
	// one that started it.
	fan fanout

	// mu guards the progress followers wait on.
	mu        sync.Mutex
	written   int64
	done      bool
	err       error
	notify    chan struct{} // closed and replaced whenever the above change
	abandoned error         // set when the producer was stopped for nobody

	// Known for ready entries.
	length   int64
	sum      [32]byte
	verified atomic.Bool
}

func (e *entry) isReady() bool     { return e.elem != nil }
func (e *entry) payloadLen() int64 { return e.length }
func (e *entry) fileSize() int64   { return headerSize + e.length + trailerSize }

func (e *entry) size() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.written
}

func kindByte(kind string) byte {
	if kind == KindRefs {
		return 1
	}
	return 0
}

func (e *entry) writeHeader() error {
	var h [headerSize]byte
	copy(h[0:8], headerMagic[:])
	binary.LittleEndian.PutUint32(h[8:12], formatV1)
	h[12] = kindByte(e.kind)
	binary.LittleEndian.PutUint64(h[16:24], uint64(e.repoID))
	binary.LittleEndian.PutUint64(h[24:32], uint64(e.gen))
	binary.LittleEndian.PutUint64(h[32:40], uint64(e.created.UnixNano()))
	if _, err := hex.Decode(h[40:72], []byte(e.key)); err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	_, err := e.file.Write(h[:])
	return err
}

// Write is the producer's output: straight to the file, then followers are
// woken. A failing disk fails the producer (and so git), never silently.
func (e *entry) Write(p []byte) (int, error) {
	if e.werr != nil {
		return 0, e.werr
	}
	if err := e.abandonedErr(); err != nil {
		return 0, err
	}
	n, err := e.file.Write(p)
	e.hash.Write(p[:n])
	e.mu.Lock()
	if e.written == 0 {
		// git runs: nobody joining from now on is waiting for capacity.
		e.fan.quiet()
	}
	e.written += int64(n)
	written := e.written
	ch := e.notify
	e.notify = make(chan struct{})
	e.mu.Unlock()
	close(ch)
	if err != nil {
		e.werr = fmt.Errorf("write cache entry: %w", err)
		return n, e.werr
	}
	if e.orphaned.Load() && written > e.orphanMax && e.overBudget != nil {
		e.overBudget()
		if err := e.abandonedErr(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (e *entry) abandonedErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.abandoned
}

// finish writes the trailer and closes the file, then tells followers the
// response is complete.
func (e *entry) finish() error {
	if e.werr != nil {
		return e.werr
	}
	e.length = e.size()
	copy(e.sum[:], e.hash.Sum(nil))
	var t [trailerSize]byte
	copy(t[0:8], trailerMagic[:])
	binary.LittleEndian.PutUint64(t[8:16], uint64(e.length))
	copy(t[16:48], e.sum[:])
	_, err := e.file.Write(t[:])
	if cerr := e.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("finish cache entry: %w", err)
	}
	e.verified.Store(true)
	e.end(nil)
	return nil
}

func (e *entry) end(err error) {
	e.mu.Lock()
	e.done = true
	e.err = err
	ch := e.notify
	e.notify = make(chan struct{})
	e.mu.Unlock()
	close(ch)
}

// fail ends a producer that did not finish: followers get err once they
// have sent what was written, and the file goes (their open descriptors
// keep it readable until they are done).
func (e *entry) fail(err error) {
	e.file.Close()
	os.Remove(e.path)
	e.end(err)
}

// discard removes a complete response that must not be kept.
func (e *entry) discard() { os.Remove(e.path) }

// follow streams the response to w as it is written, from f (an open
// descriptor of the entry's file), until the producer is done. It returns
// the bytes written to w.
func (e *entry) follow(ctx context.Context, f *os.File, w io.Writer) (int64, error) {
	defer f.Close()
	var off int64
	for {
		e.mu.Lock()
		avail, done, err, ch := e.written, e.done, e.err, e.notify
		e.mu.Unlock()
		if off < avail {
			n, werr := copyPayload(w, f, off, avail-off)
			short := n < avail-off
			off += n
			if werr != nil {
				return off, werr
			}
			if short {
				return off, fmt.Errorf("cache file shorter than written: %d bytes", off)
			}
			continue
		}
		if done {
			return off, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return off, ctx.Err()
		}
	}
}

// copyPayload copies n bytes of the response from offset off. The reader
// handed to io.CopyBuffer is a LimitedReader over the *os.File so that a
// writer implementing io.ReaderFrom (net/http's response, a TCP connection)
// can use sendfile.
func copyPayload(w io.Writer, f *os.File, off, n int64) (int64, error) {
	if _, err := f.Seek(headerSize+off, io.SeekStart); err != nil {
		return 0, err
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(w, &io.LimitedReader{R: f, N: n}, *bp)
}

// verify checks an entry found on disk at start against its checksum, once.
func (e *entry) verify(f *os.File) error {
	if e.verified.Load() {
		return nil
	}
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, headerSize, e.length))
	if err != nil {
		return fmt.Errorf("read cache entry: %w", err)
	}
	if n != e.length || !bytes.Equal(h.Sum(nil), e.sum[:]) {
		return errors.New("cache entry checksum mismatch")
	}
	e.verified.Store(true)
	return nil
}

// loadEntry reads the header and trailer of the file at p, named name in
// fan-out directory dir, and returns it as a ready entry to be verified on
// first use.
func loadEntry(p, name, dir string) (*entry, error) {
	if strings.HasPrefix(name, tmpPrefix) {
		return nil, errors.New("unfinished entry")
	}
	if len(name) != 64 || !strings.HasPrefix(name, dir) {
		return nil, errors.New("not a cache entry name")
	}
	if _, err := hex.DecodeString(name); err != nil || strings.ToLower(name) != name {
		return nil, errors.New("not a cache entry name")
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() < headerSize+trailerSize {
		return nil, errors.New("truncated entry")
	}
	var h [headerSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if !bytes.Equal(h[0:8], headerMagic[:]) || binary.LittleEndian.Uint32(h[8:12]) != formatV1 {
		return nil, errors.New("bad header")
	}
	if hex.EncodeToString(h[40:72]) != name {
		return nil, errors.New("header names another key")
	}
	var t [trailerSize]byte
	if _, err := f.ReadAt(t[:], fi.Size()-trailerSize); err != nil {
		return nil, fmt.Errorf("read trailer: %w", err)
	}
	length := int64(binary.LittleEndian.Uint64(t[8:16]))
	if !bytes.Equal(t[0:8], trailerMagic[:]) || length != fi.Size()-headerSize-trailerSize {
		return nil, errors.New("truncated entry")
	}
	e := &entry{
		key:     name,
		kind:    KindPacks,
		repoID:  int64(binary.LittleEndian.Uint64(h[16:24])),
		gen:     int64(binary.LittleEndian.Uint64(h[24:32])),
		created: time.Unix(0, int64(binary.LittleEndian.Uint64(h[32:40]))),
		path:    p,
		length:  length,
		done:    true,
		notify:  make(chan struct{}),
	}
	if h[12] == 1 {
		e.kind = KindRefs
	}
	e.written = length
	e.lastAccess = e.created
	copy(e.sum[:], t[16:48])
	return e, nil
}

func sortByCreated(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int { return a.created.Compare(b.created) })
}

// fanout sends messages to a changing set of receivers. A receiver that
// joins gets the latest message at once: the queue repeats where it stands
// only every few seconds.
type fanout struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(string)
	last string
}

// add makes fn a receiver until the returned function is called; a nil fn
// is not added.
func (f *fanout) add(fn func(string)) (remove func()) {
	if fn == nil {
		return func() {}
	}
	f.mu.Lock()
	if f.fns == nil {
		f.fns = map[int]func(string){}
	}
	id := f.next
	f.next++
	f.fns[id] = fn
	last := f.last
	f.mu.Unlock()
	if last != "" {
		fn(last)
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.fns, id)
	}
}

// quiet forgets the latest message, which is no longer true.
func (f *fanout) quiet() {
	f.mu.Lock()
	f.last = ""
	f.mu.Unlock()
}

// send gives msg to every receiver.
func (f *fanout) send(msg string) {
	f.mu.Lock()
	f.last = msg
	fns := make([]func(string), 0, len(f.fns))
	for _, fn := range f.fns {
		fns = append(fns, fn)
	}
	f.mu.Unlock()
	for _, fn := range fns {
		fn(msg)
	}
}
