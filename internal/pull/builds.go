package pull

import (
	"context"
	"strings"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Build statuses belong to repositories. A commit id names the same
// content in every repository that has it, but a private repository's
// CI results (names, URLs) are its own, and a build merge check must
// not be satisfied by someone who cannot even read the repository. So a
// report is attached, when it arrives, to repositories chosen by the
// caller (the transport: repositories the reporter may read) that hold
// the commit, and stored once per repository; a status counts for a
// pull request only when attached to the pull request's (target)
// repository, and readers see the statuses of repositories they may
// read, nothing else.
//
// A repository holds a commit when its own refs (branches, tags; not
// refs/pull-requests/*, see repo.IsReachable) reach it, or when it is
// the source commit of one of its open pull requests: a pull request
// from a fork keeps its source under refs/pull-requests/N/from of the
// target only, and CI must be able to report on it there, where the
// merge check looks. Readers of the target see that commit through the
// pull request anyway.

// Build states, as Bitbucket names them (CANCELLED and UNKNOWN since its
// repository build status, 7.4).
const (
	BuildSuccessful = "SUCCESSFUL"
	BuildFailed     = "FAILED"
	BuildInProgress = "INPROGRESS"
	BuildCancelled  = "CANCELLED"
	BuildUnknown    = "UNKNOWN"
)

func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// CheckCommitID normalises a commit id from a request: a full object id,
// any case.
func CheckCommitID(sha string) (string, error) {
	sha = strings.ToLower(sha)
	if !validSHA(sha) {
		return "", problem.New(problem.Invalid, "invalid commit id %q", sha)
	}
	return sha, nil
}

func checkBuild(b *store.BuildStatus) error {
	sha, err := CheckCommitID(b.CommitSHA)
	if err != nil {
		return err
	}
	b.CommitSHA = sha
	switch b.State {
	case BuildSuccessful, BuildFailed, BuildInProgress, BuildCancelled, BuildUnknown:
	default:
		return problem.New(problem.Invalid, "invalid build state %q (SUCCESSFUL, FAILED, INPROGRESS, CANCELLED or UNKNOWN)", b.State)
	}
	if err := checkText("key", b.Key, 255, true); err != nil {
		return err
	}
	for _, f := range []struct{ what, v string }{{"name", b.Name}, {"url", b.URL}, {"description", b.Description},
		{"ref", b.Ref}, {"parent", b.Parent}, {"buildNumber", b.BuildNumber}} {
		if err := checkText(f.what, f.v, 2048, false); err != nil {
			return err
		}
	}
	if b.DurationMS < 0 {
		return problem.New(problem.Invalid, "duration must not be negative")
	}
	if t := b.Tests; t != nil && (t.Successful < 0 || t.Failed < 0 || t.Skipped < 0) {
		return problem.New(problem.Invalid, "test result counts must not be negative")
	}
	return nil
}

// PutBuildStatus records what CI reports for a commit in each of
// candidates that holds it, and returns those. A second report under the
// same key replaces the first in the repositories it reaches. NotFound
// when no candidate holds the commit: the reporter learns nothing about
// repositories it may not read, and a status that no repository holds
// would count for nothing.
func (s *Service) PutBuildStatus(ctx context.Context, b *store.BuildStatus, candidates []int64) ([]int64, error) {
	if err := checkBuild(b); err != nil {
		return nil, err
	}
	var attached []int64
	for _, id := range candidates {
		ok, err := s.holdsCommit(ctx, id, b.CommitSHA)
		if err != nil {
			return nil, err
		}
		if ok {
			attached = append(attached, id)
		}
	}
	if len(attached) == 0 {
		return nil, problem.New(problem.NotFound, "commit %s not found", b.CommitSHA)
	}
	if err := s.ps.PutBuildStatus(ctx, b, attached); err != nil {
		return nil, err
	}
	return attached, nil
}

// holdsCommit reports whether repository id holds commit sha, in the
// sense above. A repository missing on disk holds nothing.
func (s *Service) holdsCommit(ctx context.Context, id int64, sha string) (bool, error) {
	ok, err := s.repos.IsReachable(ctx, id, sha)
	if problem.Is(err, problem.NotFound) {
		return false, nil
	}
	if err != nil || ok {
		return ok, err
	}
	return s.ps.HasOpenPullRequestFrom(ctx, id, sha)
}

// BuildStatuses lists a commit's statuses in the repositories visible
// accepts, newest first, one per key: a report attached to several
// repositories (a fork and its origin) is one build, and a reader of
// both sees it once. visible is where the caller's read permission is
// decided; it is asked once per repository.
func (s *Service) BuildStatuses(ctx context.Context, sha string, visible func(repoID int64) (bool, error)) ([]store.BuildStatus, error) {
	sha, err := CheckCommitID(sha)
	if err != nil {
		return nil, err
	}
	all, err := s.ps.BuildStatuses(ctx, sha)
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	keys := map[string]bool{}
	var out []store.BuildStatus
	for _, b := range all {
		ok, asked := seen[b.RepoID]
		if !asked {
			if ok, err = visible(b.RepoID); err != nil {
				return nil, err
			}
			seen[b.RepoID] = ok
		}
		if !ok || keys[b.Key] {
			continue
		}
		keys[b.Key] = true
		out = append(out, b)
	}
	return out, nil
}

// RepoBuildStatuses lists a commit's statuses in one repository, newest
// first; the caller has checked that the reader may read it.
func (s *Service) RepoBuildStatuses(ctx context.Context, repoID int64, sha string) ([]store.BuildStatus, error) {
	sha, err := CheckCommitID(sha)
	if err != nil {
		return nil, err
	}
	return s.ps.RepoBuildStatuses(ctx, repoID, sha)
}

// BuildCounts counts statuses by state, as Bitbucket's build statistics
// do.
type BuildCounts struct {
	Successful int `json:"successful"`
	Failed     int `json:"failed"`
	InProgress int `json:"inProgress"`
	Cancelled  int `json:"cancelled"`
	Unknown    int `json:"unknown"`
}

// CountBuilds counts bs by state.
func CountBuilds(bs []store.BuildStatus) BuildCounts {
	var c BuildCounts
	for _, b := range bs {
		switch b.State {
		case BuildSuccessful:
			c.Successful++
		case BuildFailed:
			c.Failed++
		case BuildInProgress:
			c.InProgress++
		case BuildCancelled:
			c.Cancelled++
		default:
			c.Unknown++
		}
	}
	return c
}

// MaxBuildCandidates bounds the repositories a status reported without
// one (the global build-status route) is offered to. Each costs an object
// lookup (and, when present, a short rev-list), so the bound keeps such a
// report to well under a second on a reporter that can read thousands of
// repositories. CI reports right after the push that made the commit,
// so its repository is among the most recently pushed the reporter can
// read; a reporter that reads more busy repositories than this reports
// through the repository's own route.
const MaxBuildCandidates = 100

// BuildCandidates lists the repositories, at most MaxBuildCandidates, most
// recently pushed first, that a report from userID without a repository
// is offered to. It narrows in SQL; the caller still checks each with
// auth, the authority.
func (s *Service) BuildCandidates(ctx context.Context, userID int64) ([]store.Repository, error) {
	return s.ps.RecentlyPushedRepos(ctx, userID, MaxBuildCandidates)
}
