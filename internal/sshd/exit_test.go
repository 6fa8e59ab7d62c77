package sshd

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

func TestExitStatus(t *testing.T) {
	gitFailed := &gitcmd.ExitError{Command: "upload-pack", Code: 128, Stderr: "fatal: bad object"}
	throttled := problem.New(problem.Throttled, "too many git operations; slow down")
	throttled.RetryAfter = 7
	cases := []struct {
		name   string
		err    error
		status uint32
		stderr string
	}{
		{"success", nil, 0, ""},
		{"not found", problem.New(problem.NotFound, "repository not found"), 1, msgDenied + "\n"},
		{"unauthenticated", problem.New(problem.Unauthenticated, "authentication required"), 1, msgDenied + "\n"},
		{"forbidden", problem.New(problem.Forbidden, "this access key only has read scope"), 1, "this access key only has read scope\n"},
		// Worth retrying: EX_TEMPFAIL.
		{"throttled", throttled, 75, "too many git operations; slow down (retry in 7s)\n"},
		{"unavailable", problem.New(problem.Unavailable, "server is busy"), 75, "server is busy\n"},
		{"too large", problem.New(problem.TooLarge, "push is larger than 1 GiB"), 1, "push is larger than 1 GiB\n"},
		// git already explained itself on the session's stderr.
		{"git failed before output", problem.Wrap(problem.Internal, fmt.Errorf("git upload-pack: %w", gitFailed), "git failed to serve the request"), 128, ""},
		{"git failed after output", fmt.Errorf("git upload-pack: %w", gitFailed), 128, ""},
		{"internal", errors.New("database on fire"), 1, "internal server error\n"},
	}
	for _, tc := range cases {
		var stderr strings.Builder
		if got := exitStatus(tc.err, &stderr); got != tc.status || stderr.String() != tc.stderr {
			t.Errorf("%s: status %d, stderr %q; want %d, %q", tc.name, got, stderr.String(), tc.status, tc.stderr)
		}
	}
}
