package gitcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrTimeout is the cause of a process's context when Config.Timeout ended
// it.
var ErrTimeout = errors.New("git process timed out")

// ErrOutputTooLarge is returned by Output and OutputLimit when git wrote
// more than the limit; the process is killed as soon as that happens.
var ErrOutputTooLarge = errors.New("git output too large")

// DefaultOutputLimit bounds what Output buffers in memory. Callers reading
// something that can be bigger (blobs, archives, packs) stream with Start
// and a Stdout writer instead.
const DefaultOutputLimit = 64 << 20

// stderrTail is how much of the end of stderr an ExitError keeps. Git puts
// the reason for a failure ("fatal: …") last.
const stderrTail = 4 << 10

// ExitError is a git process that exited unsuccessfully.
type ExitError struct {
	Command string // Cmd.Name
	Code    int    // exit status, -1 if killed by a signal
	Stderr  string // trimmed tail of stderr
}

func (e *ExitError) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("git %s: exit status %d", e.Command, e.Code)
	}
	return fmt.Sprintf("git %s: exit status %d: %s", e.Command, e.Code, e.Stderr)
}

// ExitCode returns the exit status of git if err is an *ExitError, else -1.
// Several plumbing commands use status 1 for "no" (show-ref, rev-parse
// --verify -q, merge-base --is-ancestor).
func ExitCode(err error) int {
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

// Process is a started git process. Wait must be called exactly once to
// release its resources.
type Process struct {
	r    *Runner
	name string
	// bounded: the process runs under the read bounds, and running out of
	// them is reported as a TooLarge problem.
	bounded bool
	cmd     *exec.Cmd
	ctx     context.Context
	cancel  context.CancelFunc
	start   time.Time

	stdinW  *os.File       // our end of the stdin pipe, closed after exit
	copies  sync.WaitGroup // stdout and stderr copiers
	outErr  error          // first error writing to Cmd.Stdout
	errTail tailBuffer
	done    chan struct{} // closed when the process and its copiers are done
}

// Pid is the process id, which is also the process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Run runs c to completion.
func (r *Runner) Run(ctx context.Context, c Cmd) error {
	p, err := r.Start(ctx, c)
	if err != nil {
		return err
	}
	return p.Wait()
}

// Output runs c and returns its stdout, at most DefaultOutputLimit bytes.
func (r *Runner) Output(ctx context.Context, c Cmd) ([]byte, error) {
	return r.OutputLimit(ctx, c, DefaultOutputLimit)
}

// OutputLimit runs c and returns its stdout; more than limit bytes kill the
// process and return ErrOutputTooLarge.
func (r *Runner) OutputLimit(ctx context.Context, c Cmd, limit int64) ([]byte, error) {
	if c.Stdout != nil {
		return nil, invalid("Output with Stdout set")
	}
	buf := &limitBuffer{limit: limit}
	c.Stdout = buf
	err := r.Run(ctx, c)
	if errors.Is(err, ErrOutputTooLarge) {
		return nil, fmt.Errorf("git %s: %w (limit %d bytes)", c.Name, ErrOutputTooLarge, limit)
	}
	return buf.Bytes(), err
}

// Start starts c. The process runs in its own process group; when ctx ends
// (or Config.Timeout passes) the group gets SIGTERM, then SIGKILL after a
// grace period.
//
// Stdin, if not an *os.File, is copied by a goroutine that Wait does not
// wait for: git may exit without reading all of it (an SSH channel, say,
// would then block Wait until the client hung up), so the reader may still
// be read until it returns after Wait.
func (r *Runner) Start(ctx context.Context, c Cmd) (*Process, error) {
	timeout := r.timeout
	if isBounded(c) {
		timeout = r.readTimeout()
	}
	return r.start(ctx, c, timeout)
}

func (r *Runner) start(ctx context.Context, c Cmd, timeout time.Duration) (*Process, error) {
	argv, err := c.argv()
	if err != nil {
		return nil, err
	}
	env, err := r.env(c.Env)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("git %s: %w", c.Name, err)
	}

	p := &Process{r: r, name: c.Name, bounded: isBounded(c), done: make(chan struct{})}
	if timeout > 0 {
		p.ctx, p.cancel = context.WithTimeoutCause(ctx, timeout, ErrTimeout)
	} else {
		p.ctx, p.cancel = context.WithCancel(ctx)
	}
	path, args := r.binary, slices.Concat([]string{"git"}, r.preArgs, argv)
	if p.bounded {
		args = slices.Concat([]string{"git"}, r.preArgs, r.read.configArg, argv)
		if r.read.memory > 0 {
			path, args = r.wrap(args[1:])
		}
	}
	p.cmd = &exec.Cmd{
		Path: path,
		Args: args,
		Env:  env,
		// HomeDir, not the repository: a command without --git-dir must not
		// find a repository by discovery, and GIT_CEILING_DIRECTORIES stops
		// it from walking up.
		Dir:         r.homeDir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}

	// The child's ends of our pipes, closed in the parent once started.
	var childEnds []*os.File
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	var stdinR, stdoutR, stderrR *os.File

	switch in := c.Stdin.(type) {
	case nil:
	case *os.File:
		p.cmd.Stdin = in
	default:
		if stdinR, p.stdinW, err = os.Pipe(); err != nil {
			p.cancel()
			return nil, fmt.Errorf("git %s: %w", c.Name, err)
		}
		p.cmd.Stdin = stdinR
		childEnds = append(childEnds, stdinR)
	}
	var stdoutW *os.File
	switch out := c.Stdout.(type) {
	case nil:
	case *os.File:
		p.cmd.Stdout = out
	default:
		if stdoutR, stdoutW, err = os.Pipe(); err != nil {
			closeAll(childEnds...)
			closeAll(p.stdinW)
			p.cancel()
			return nil, fmt.Errorf("git %s: %w", c.Name, err)
		}
		p.cmd.Stdout = stdoutW
		childEnds = append(childEnds, stdoutW)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(childEnds...)
		closeAll(p.stdinW, stdoutR)
		p.cancel()
		return nil, fmt.Errorf("git %s: %w", c.Name, err)
	}
	p.cmd.Stderr = stderrW
	childEnds = append(childEnds, stderrW)

	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		closeAll(childEnds...)
		closeAll(p.stdinW, stdoutR, stderrR)
		p.cancel()
		return nil, fmt.Errorf("start git %s: %w", c.Name, err)
	}
	closeAll(childEnds...)
	if r.nice > 0 && niced[c.Name] {
		// Set before git has read its request, so the pack-objects it
		// starts afterwards inherits it. Failure only costs priority.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, p.cmd.Process.Pid, r.nice)
	}
	if r.confine != nil && confined(c.Name) {
		if err := r.confine(p.cmd.Process.Pid); err != nil {
			r.logger.Warn("cannot move git into the git cgroup; it runs unconfined", "command", c.Name, "err", err)
		}
	}
	r.started.WithLabelValues(c.Name).Inc()
	r.running.Inc()

	if p.stdinW != nil {
		go func(w *os.File, src io.Reader) {
			// An error here means git stopped reading; its exit status
			// tells the caller what happened.
			_, _ = io.Copy(w, src)
			w.Close()
		}(p.stdinW, c.Stdin)
	}
	if stdoutR != nil {
		p.copies.Add(1)
		go func() {
			defer p.copies.Done()
			defer stdoutR.Close()
			if _, err := io.Copy(c.Stdout, stdoutR); err != nil {
				// Closing our end makes git's next write fail (EPIPE), so
				// a vanished reader stops the process instead of leaving it
				// blocked until the timeout.
				p.outErr = err
			}
		}()
	}
	p.copies.Add(1)
	go func() {
		defer p.copies.Done()
		defer stderrR.Close()
		var w io.Writer = &p.errTail
		if c.Stderr != nil {
			w = io.MultiWriter(&p.errTail, &lenientWriter{w: c.Stderr})
		}
		_, _ = io.Copy(w, stderrR)
	}()
	go p.watch()
	return p, nil
}

// watch signals the process group when the context ends before the process
// and its output copiers are done.
func (p *Process) watch() {
	select {
	case <-p.done:
		return
	case <-p.ctx.Done():
	}
	pgid := p.cmd.Process.Pid
	// Negative pid: the whole group, so pack-objects and hooks die too. The
	// group id cannot be reused while any member is alive.
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.r.logger.Warn("git process ignored SIGTERM, killing", "command", p.name, "pid", pgid)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// Wait waits for the process to exit and its output to be copied. It
// returns nil on success, an *ExitError on a non-zero exit, the context's
// cause when the process was cancelled or timed out, or the error writing
// to Cmd.Stdout.
func (p *Process) Wait() error {
	waitErr := p.cmd.Wait()
	if p.stdinW != nil {
		// Unblocks the stdin copier if it is still writing.
		p.stdinW.Close()
	}
	p.copies.Wait()
	close(p.done)
	elapsed := time.Since(p.start)
	p.r.running.Dec()
	p.r.duration.WithLabelValues(p.name).Observe(elapsed.Seconds())
	ctxErr := p.ctx.Err()
	cause := context.Cause(p.ctx)
	p.cancel()

	code := 0
	if waitErr != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			code = ee.ExitCode()
		}
	}
	p.r.logger.Debug("git process done", "command", p.name, "pid", p.cmd.Process.Pid, "exit_code", code, "duration", elapsed)

	switch {
	case p.outErr != nil:
		return fmt.Errorf("git %s: write output: %w", p.name, p.outErr)
	case waitErr == nil:
		return nil
	case ctxErr != nil:
		err := fmt.Errorf("git %s: %w", p.name, cause)
		if p.bounded && errors.Is(cause, ErrTimeout) {
			return p.r.boundError(p.name, err, true, false)
		}
		return err
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return fmt.Errorf("git %s: %w", p.name, waitErr)
	}
	exitErr := &ExitError{Command: p.name, Code: code, Stderr: strings.TrimSpace(p.errTail.String())}
	if p.bounded && p.r.read.memory > 0 {
		var sig syscall.Signal
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig = ws.Signal()
		}
		if memoryFailure(exitErr.Stderr, sig) {
			return p.r.boundError(p.name, exitErr, false, true)
		}
	}
	return exitErr
}

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > stderrTail {
		return string(t.buf[len(t.buf)-stderrTail:])
	}
	return string(t.buf)
}

// lenientWriter forwards to w until w fails, then drops: stderr must keep
// draining (or git blocks) even when the caller's stderr sink has gone.
type lenientWriter struct {
	w      io.Writer
	failed bool
}

func (l *lenientWriter) Write(b []byte) (int, error) {
	if !l.failed {
		if _, err := l.w.Write(b); err != nil {
			l.failed = true
		}
	}
	return len(b), nil
}

// limitBuffer is a buffer that refuses to grow past limit. It does not
// embed bytes.Buffer: io.Copy would use the embedded ReadFrom and bypass
// the limit.
type limitBuffer struct {
	buf   bytes.Buffer
	limit int64
}

func (l *limitBuffer) Write(b []byte) (int, error) {
	if int64(l.buf.Len())+int64(len(b)) > l.limit {
		return 0, ErrOutputTooLarge
	}
	return l.buf.Write(b)
}

func (l *limitBuffer) Bytes() []byte { return l.buf.Bytes() }
