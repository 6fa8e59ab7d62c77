package repo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// maxMetadataOutput bounds what one metadata command (ref listing, log,
// tree listing) may print before it is stopped: 32 MiB holds a page of the
// largest commit messages seen in practice many times over, and stops a
// pathological repository from exhausting the server's memory.
const maxMetadataOutput = 32 << 20

// errEnough is returned by a scan callback that has read all it needs; the
// process is then stopped and its exit status ignored.
var errEnough = errors.New("enough output")

// scan runs cmd and hands its standard output to fn as it is produced. If fn
// returns before the end (errEnough or an error), the process is cancelled
// at once, so a caller that has read a page never waits for git to print
// the rest of the history.
func (m *Manager) scan(ctx context.Context, cmd gitcmd.Cmd, fn func(r *bufio.Reader) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if cmd.Stderr == nil {
		cmd.Stderr = &capped{max: 4 << 10}
	}
	p, err := m.git.Start(ctx, cmd)
	if err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() {
		err := p.Wait()
		pw.CloseWithError(err) // nil makes the reader see io.EOF
		waited <- err
	}()
	fnErr := fn(bufio.NewReaderSize(&limitReader{r: pr, n: maxMetadataOutput}, 64<<10))
	if fnErr != nil {
		cancel()
	}
	// Closing the read side makes further writes fail, so git dies of
	// EPIPE instead of blocking on a full pipe.
	pr.CloseWithError(errEnough)
	waitErr := <-waited
	switch {
	case errors.Is(fnErr, errEnough):
		return nil
	case fnErr != nil:
		return fnErr
	case waitErr != nil:
		return gitError(waitErr, cmd.Stderr)
	}
	return nil
}

// output runs cmd and returns its standard output, which must stay under
// maxMetadataOutput.
func (m *Manager) output(ctx context.Context, cmd gitcmd.Cmd) ([]byte, error) {
	var out []byte
	err := m.scan(ctx, cmd, func(r *bufio.Reader) error {
		var err error
		out, err = io.ReadAll(r)
		return err
	})
	return out, err
}

func gitError(err error, stderr io.Writer) error {
	if c, ok := stderr.(*capped); ok && c.buf.Len() > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(c.buf.Bytes()))
	}
	return err
}

// capped keeps the first max bytes written to it and discards the rest, so
// a chatty stderr can be kept for the log without unbounded memory.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// limitReader fails with a TooLarge problem once more than n bytes were
// read, where io.LimitReader would report a silent EOF.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, problem.New(problem.TooLarge, "git output exceeds %d bytes", maxMetadataOutput)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n+1] // one byte more tells "exactly n" from "more than n"
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n + int(l.n), problem.New(problem.TooLarge, "git output exceeds %d bytes", maxMetadataOutput)
	}
	return n, err
}
