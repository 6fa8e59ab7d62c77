package gitcmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// catfileIdle is how long an unused cat-file process is kept. Page views of
// one repository come in bursts (a tree, then its README, then a blob); 30 s
// covers a burst without keeping a process per repository ever visited.
const catfileIdle = 30 * time.Second

// maxIdlePerRepo bounds the idle processes kept for one repository; more
// concurrent readers than this start extra processes that exit on release.
const maxIdlePerRepo = 4

// ErrObjectNotFound is returned by CatFile reads of a missing or ambiguous
// object name.
var ErrObjectNotFound = errors.New("object not found")

// ObjectInfo describes one object.
type ObjectInfo struct {
	OID  string
	Type string // commit, tree, blob or tag
	Size int64
}

// CatFile is a long-lived `git cat-file --batch-command` process for one
// repository: reading many objects costs one process instead of one each.
// It is used by one goroutine at a time, between CatFile and release.
type CatFile struct {
	r        *Runner
	dir      string
	proc     *Process
	cancel   context.CancelFunc
	in       *os.File
	out      *bufio.Reader
	outFile  *os.File
	broken   atomic.Bool // set from the context watcher too
	lastUsed time.Time
	stopCtx  func() bool
	once     sync.Once
}

// CatFile returns a batch process for the repository dir, reusing an idle
// one when there is one. release must be called when done; it returns the
// process to the pool. If ctx ends while the process is checked out, the
// process is killed and reads fail.
func (r *Runner) CatFile(ctx context.Context, dir string) (*CatFile, func(), error) {
	r.catfileMu.Lock()
	if r.closed {
		r.catfileMu.Unlock()
		return nil, nil, errors.New("git runner closed")
	}
	var c *CatFile
	if list := r.catfiles[dir]; len(list) > 0 {
		c = list[len(list)-1]
		r.catfiles[dir] = list[:len(list)-1]
		if len(r.catfiles[dir]) == 0 {
			delete(r.catfiles, dir)
		}
	}
	r.catfileMu.Unlock()
	if c == nil {
		var err error
		if c, err = r.startCatFile(dir); err != nil {
			return nil, nil, err
		}
	}
	c.stopCtx = context.AfterFunc(ctx, func() {
		c.broken.Store(true)
		c.cancel()
	})
	return c, func() { r.releaseCatFile(c) }, nil
}

func (r *Runner) startCatFile(dir string) (*CatFile, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	// The process outlives any one request; its own context ends when it
	// is reaped, and Config.Timeout does not apply.
	ctx, cancel := context.WithCancel(context.Background())
	p, err := r.start(ctx, Cmd{Dir: dir, Name: "cat-file", Flags: []string{"--batch-command"}, Stdin: inR, Stdout: outW}, 0)
	inR.Close()
	outW.Close()
	if err != nil {
		cancel()
		inW.Close()
		outR.Close()
		return nil, err
	}
	return &CatFile{r: r, dir: dir, proc: p, cancel: cancel, in: inW, out: bufio.NewReader(outR), outFile: outR}, nil
}

func (r *Runner) releaseCatFile(c *CatFile) {
	if c.stopCtx != nil && !c.stopCtx() {
		// The AfterFunc already ran: the process is being killed.
		c.broken.Store(true)
	}
	c.stopCtx = nil
	r.catfileMu.Lock()
	if c.broken.Load() || r.closed || len(r.catfiles[c.dir]) >= maxIdlePerRepo {
		r.catfileMu.Unlock()
		c.close()
		return
	}
	c.lastUsed = time.Now()
	r.catfiles[c.dir] = append(r.catfiles[c.dir], c)
	if r.catfileTimer == nil {
		r.catfileTimer = time.AfterFunc(r.catfileIdle, r.reapCatFiles)
	}
	r.catfileMu.Unlock()
}

// reapCatFiles closes processes idle for catfileIdle and re-arms itself
// while any remain.
func (r *Runner) reapCatFiles() {
	now := time.Now()
	var stale []*CatFile
	r.catfileMu.Lock()
	for dir, list := range r.catfiles {
		keep := list[:0]
		for _, c := range list {
			if now.Sub(c.lastUsed) >= r.catfileIdle {
				stale = append(stale, c)
			} else {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(r.catfiles, dir)
		} else {
			r.catfiles[dir] = keep
		}
	}
	r.catfileTimer = nil
	if len(r.catfiles) > 0 && !r.closed {
		r.catfileTimer = time.AfterFunc(r.catfileIdle/2, r.reapCatFiles)
	}
	r.catfileMu.Unlock()
	for _, c := range stale {
		c.close()
	}
}

// IdleCatFiles reports how many idle cat-file processes the pool holds.
func (r *Runner) IdleCatFiles() int {
	r.catfileMu.Lock()
	defer r.catfileMu.Unlock()
	n := 0
	for _, list := range r.catfiles {
		n += len(list)
	}
	return n
}

// close ends the process: EOF on stdin is cat-file's signal to exit, and
// closing stdout unblocks it if it was mid-write for an abandoned read.
func (c *CatFile) close() error {
	var err error
	c.once.Do(func() {
		c.in.Close()
		c.outFile.Close()
		werr := c.proc.Wait()
		c.cancel()
		if !c.broken.Load() && werr != nil && ExitCode(werr) != 0 {
			err = werr
		}
	})
	return err
}

// Info returns the type and size of the object rev names.
func (c *CatFile) Info(rev string) (ObjectInfo, error) {
	return c.request("info", rev)
}

// Contents returns the object rev names and its content; objects larger
// than limit return ErrOutputTooLarge without being held in memory.
func (c *CatFile) Contents(rev string, limit int64) (ObjectInfo, []byte, error) {
	info, err := c.request("contents", rev)
	if err != nil {
		return info, nil, err
	}
	if info.Size > limit {
		// Skip the content (and its trailing LF) so the process stays usable.
		if _, err := io.CopyN(io.Discard, c.out, info.Size+1); err != nil {
			c.broken.Store(true)
			return info, nil, fmt.Errorf("git cat-file: %w", err)
		}
		return info, nil, fmt.Errorf("object %s: %w (limit %d bytes)", info.OID, ErrOutputTooLarge, limit)
	}
	buf := make([]byte, info.Size+1)
	if _, err := io.ReadFull(c.out, buf); err != nil {
		c.broken.Store(true)
		return info, nil, fmt.Errorf("git cat-file: %w", err)
	}
	if buf[info.Size] != '\n' {
		c.broken.Store(true)
		return info, nil, errors.New("git cat-file: object not followed by newline")
	}
	return info, buf[:info.Size], nil
}

func (c *CatFile) request(verb, rev string) (ObjectInfo, error) {
	if c.broken.Load() {
		return ObjectInfo{}, errors.New("git cat-file: process unusable")
	}
	if rev == "" || strings.ContainsAny(rev, "\x00\r\n") {
		return ObjectInfo{}, invalid("object name %q", rev)
	}
	if _, err := io.WriteString(c.in, verb+" "+rev+"\n"); err != nil {
		c.broken.Store(true)
		return ObjectInfo{}, fmt.Errorf("git cat-file: %w", err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		c.broken.Store(true)
		return ObjectInfo{}, fmt.Errorf("git cat-file: %w", err)
	}
	line = strings.TrimSuffix(line, "\n")
	if line == rev+" missing" || line == rev+" ambiguous" {
		return ObjectInfo{}, fmt.Errorf("%q: %w", rev, ErrObjectNotFound)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		c.broken.Store(true)
		return ObjectInfo{}, fmt.Errorf("git cat-file: unexpected reply %q", line)
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		c.broken.Store(true)
		return ObjectInfo{}, fmt.Errorf("git cat-file: unexpected reply %q", line)
	}
	return ObjectInfo{OID: f[0], Type: f[1], Size: size}, nil
}
