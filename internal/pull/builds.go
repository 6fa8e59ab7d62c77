package pull

import (
	"context"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Build states, as Bitbucket names them.
const (
	BuildSuccessful = "SUCCESSFUL"
	BuildFailed     = "FAILED"
	BuildInProgress = "INPROGRESS"
)

func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// PutBuildStatus records what CI reports for a commit; a second report
// under the same key replaces the first.
func (s *Service) PutBuildStatus(ctx context.Context, b *store.BuildStatus) error {
	b.CommitSHA = strings.ToLower(b.CommitSHA)
	if !validSHA(b.CommitSHA) {
		return problem.New(problem.Invalid, "invalid commit id %q", b.CommitSHA)
	}
	switch b.State {
	case BuildSuccessful, BuildFailed, BuildInProgress:
	default:
		return problem.New(problem.Invalid, "invalid build state %q (SUCCESSFUL, FAILED or INPROGRESS)", b.State)
	}
	if err := checkText("key", b.Key, 255, true); err != nil {
		return err
	}
	for _, f := range []struct{ what, v string }{{"name", b.Name}, {"url", b.URL}, {"description", b.Description}} {
		if err := checkText(f.what, f.v, 2048, false); err != nil {
			return err
		}
	}
	return s.ps.PutBuildStatus(ctx, b)
}

// BuildStatuses lists the statuses of a commit, newest first.
func (s *Service) BuildStatuses(ctx context.Context, sha string) ([]store.BuildStatus, error) {
	sha = strings.ToLower(sha)
	if !validSHA(sha) {
		return nil, problem.New(problem.Invalid, "invalid commit id %q", sha)
	}
	return s.ps.BuildStatuses(ctx, sha)
}
