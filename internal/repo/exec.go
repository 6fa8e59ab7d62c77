package repo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

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

// scan runs cmd and hands its standard output to fn as it is produced,
// failing with TooLarge past maxMetadataOutput. If fn returns before the
// end (errEnough or an error), the process is cancelled at once, so a
// caller that has read a page never waits for git to print the rest of the
// history.
func (m *Manager) scan(ctx context.Context, cmd gitcmd.Cmd, fn func(r *bufio.Reader) error) error {
	return m.stream(ctx, cmd, maxMetadataOutput, fn)
}

// streamAll is scan with no bound on the output, for walks whose output
// is proportional to the repository (object walks, batch reads of a
// push's objects); the caller's context bounds them in time instead.
func (m *Manager) streamAll(ctx context.Context, cmd gitcmd.Cmd, fn func(r *bufio.Reader) error) error {
	return m.stream(ctx, cmd, 0, fn)
}

// scanLines is streamAll one trimmed line at a time, until fn returns
// false.
func (m *Manager) scanLines(ctx context.Context, cmd gitcmd.Cmd, fn func(line string) bool) error {
	return m.streamAll(ctx, cmd, func(r *bufio.Reader) error {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if !fn(strings.TrimSpace(sc.Text())) {
				return errEnough
			}
		}
		return sc.Err()
	})
}

// stream runs cmd with its output handed to fn, at most limit bytes of it
// when limit > 0. An fn that returns errEnough ends the process and the
// call succeeds.
func (m *Manager) stream(ctx context.Context, cmd gitcmd.Cmd, limit int64, fn func(r *bufio.Reader) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	cmd.Stdout = pw
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
	var out io.Reader = pr
	if limit > 0 {
		out = &limitReader{r: pr, n: limit}
	}
	fnErr := fn(bufio.NewReaderSize(out, 64<<10))
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
	}
	return waitErr
}

// output runs cmd and returns its standard output, which must stay under
// maxMetadataOutput.
func (m *Manager) output(ctx context.Context, cmd gitcmd.Cmd) ([]byte, error) {
	out, err := m.git.OutputLimit(ctx, cmd, maxMetadataOutput)
	if errors.Is(err, gitcmd.ErrOutputTooLarge) {
		return nil, problem.Wrap(problem.TooLarge, err, fmt.Sprintf("git output exceeds %d bytes", maxMetadataOutput))
	}
	return out, err
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
