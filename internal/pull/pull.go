// Package pull is Sluice's pull requests: creation, reviews, comments and
// their drift, the precomputed diff, merge checks, merges without a work
// tree, build statuses and Code Insights, and the fork-push check. What
// happens to a pull request is announced to an Announcer (package
// webhook) handed in at construction. Branch permissions are package
// branchperm's: the merge checks ask it, and the hooks server judges the
// merge's ref moves with the policy app installs.
//
// The design follows the lessons Bitbucket Cloud wrote down (see
// shared/REFERENCES.md): do the expensive work once, in the background,
// and keep the synchronous paths short.
//
//   - Diff and diffstat are computed by a job when a pull request is
//     created or rescoped and stored in the database (pull_request_diffs),
//     keyed by the pull request and the two commits. A request that arrives
//     before the job has finished joins the same computation (a
//     singleflight keyed by pull request, base and source commit), so it is
//     never answered with an empty diff. Every diff is bounded (files,
//     lines, bytes) and says "truncated" when a bound cut it, instead of
//     timing out. Each node renders the whole diff to the API's JSON once
//     (DiffJSON) and serves those bytes, with an entity tag made of the
//     pull request and its two commits, from then on: parsing 300 files
//     into hunks and encoding them was most of a cached read. The stat
//     is rendered once the same way, one value per file (ChangesJSON), so
//     a page of it costs a copy.
//
//   - Merges run on the object database only: `git merge-tree
//     --write-tree` gives the merged tree (or the conflicted files),
//     `commit-tree` writes the commit, and `update-ref REF NEW OLD` moves
//     the target branch only if it is still where the merge started from
//     — git's own compare-and-swap under the ref's lock file. There is no
//     repository-wide lock; two merges into one branch race on that CAS,
//     and the loser recomputes on the new tip (a few times) before it
//     gives up with a retryable conflict. Nothing else happens on the
//     synchronous path: rescoping the other pull requests, housekeeping and
//     webhooks are jobs, started by the ref change itself through the hooks
//     server's listeners (app registers them). Git 2.39 has neither `merge-tree --merge-base` nor `git
//     replay`, so a rebase replays each commit C onto the new tip T as
//     merge-tree of a synthetic commit (T's tree with C's parent as its
//     parent) and C: the merge base is C's parent, so the result is T plus
//     C's change.
//
//   - Merge checks live in one place (Service.checks). Each is off by default;
//     a refusal lists every check that failed, not the first.
//
//   - Build statuses belong to repositories (builds.go): a report is
//     stored for each repository, among those the reporter may read, that
//     holds the commit (its branches and tags reach it, or it is an open
//     pull request's source), and the build check of a pull request
//     counts only its own repository's statuses. A commit id is the same
//     in every repository that has it; a status reported through one must
//     neither show to nor vouch for the readers of another.
//
//   - "Can it merge?" (CanMerge, asked by every view of an open pull
//     request) runs the checks live but never merges on the request path
//     when it need not: whether two commits merge under a strategy is
//     remembered per (source commit, target commit, strategy), in memory
//     and in the pull request's row (recorded by the prepare job), and a
//     dry run, when one is needed, writes into a scratch object directory
//     that is thrown away, so a GET leaves nothing in the repository
//     (mergestatus.go).
//
//   - Rescope: RefsChanged, a hooks.OnRefsChanged listener app registers,
//     enqueues a job for every moved branch; the job finds the open pull
//     requests whose source or target it is, records the new commits,
//     moves inline comments with the code (a line keeps its comment when
//     lines above it change, and the comment is marked outdated when its
//     line is gone), then recomputes the diff and the merge preview.
//
//   - Every pull request has refs/pull-requests/{id}/from (its source
//     commit, fetched from the fork when it comes from one: a parent
//     cannot read a fork's objects) and refs/pull-requests/{id}/merge (the
//     preview merge, while it merges cleanly), for CI: advertised to and
//     fetchable by the target's readers (Jenkins builds pull requests
//     from +refs/pull-requests/N/from, as from Bitbucket), written only by
//     the server (gitcmd.ServerRefs: receive.hideRefs refuses pushes to
//     them), never announced as repo:refs_changed, and deleted with the
//     pull request.
//
//   - Forks: the parent cannot read a fork's objects, so a fork's source
//     commit is fetched into the parent's refs/pull-requests/N/from. That
//     makes the fork's commits present in the parent, but not part of its
//     history: repo.IsReachable (what the commit, raw and diff APIs check
//     before serving a commit named by id) leaves refs/pull-requests out,
//     so they are served by the parent only through the pull request,
//     until a merge brings them into a branch. The other way, a fork
//     reads its parent's objects through alternates, but serves only what
//     its own refs reach, so a parent's commits made after the fork (or
//     after the fork's owner lost access) never show through it.
//
//   - Who is told what (review requested, a comment on one's pull
//     request, merged, declined) is package notify's: pull says what
//     happened to a Notifier handed in at construction (notifier.go).
//
//   - A push to a fork may not borrow objects only the parent has
//     (forkpush.go): CheckForkPush is one of the checks of the push
//     policy app composes and installs in the hooks server.
//
// Authorization is the transport's job (auth.Authorize on the target
// repository, and on the source repository for a fork); this package
// trusts the principal it is given to be allowed to do what it asks.
package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Job kinds.
const (
	JobRescope = "pull-rescope" // {repo_id, refs}: a branch moved
	JobPrepare = "pull-prepare" // {pr_id}: diff, diffstat, merge preview
)

// Config holds the limits of the service. Zero values mean the defaults.
type Config struct {
	// MaxDiffFiles, MaxDiffLines and MaxDiffBytes bound a stored diff.
	// Defaults: 1000 files, 100,000 lines and 8 MiB, a bit above what
	// Bitbucket renders (its page limit is 1,000 files and 10,000 lines per
	// file) so that the truncation is visible long before a browser chokes.
	MaxDiffFiles int
	MaxDiffLines int
	MaxDiffBytes int64
	// MergeRetries is how often a merge recomputes on a target that moved
	// under it before it answers with a retryable conflict (default 5).
	MergeRetries int
}

func (c *Config) defaults() {
	if c.MaxDiffFiles <= 0 {
		c.MaxDiffFiles = 1000
	}
	if c.MaxDiffLines <= 0 {
		c.MaxDiffLines = 100_000
	}
	if c.MaxDiffBytes <= 0 {
		c.MaxDiffBytes = 8 << 20
	}
	if c.MergeRetries <= 0 {
		c.MergeRetries = 5
	}
}

// Deps is what the service needs from the node.
type Deps struct {
	Store store.Store
	Pulls store.PullStore
	// Auth, when set, keeps reviewers who can no longer read the
	// repository out, and lets readers of a fork's parent push to the
	// fork without the borrowed-objects walk.
	Auth  *auth.Service
	Repos *repo.Manager
	Git   *gitcmd.Runner
	Hooks *hooks.Server
	Jobs  *jobs.Queue
	// BranchPerms judges a merge's ref moves among the merge checks; nil
	// lists no branch permission there (the hooks server still judges
	// the moves themselves, with whatever policy app installed).
	BranchPerms *branchperm.Service
	// Webhooks hears pull request events; nil announces nothing.
	Webhooks Announcer
	// Notifier hears the events people are told about; nil tells nobody.
	Notifier   Notifier
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Config     Config
}

// Service is the pull request service of one node.
type Service struct {
	st      store.Store
	ps      store.PullStore
	auth    *auth.Service
	repos   *repo.Manager
	git     *gitcmd.Runner
	hooks   *hooks.Server
	jobs    *jobs.Queue
	logger  *slog.Logger
	cfg     Config
	metrics *metrics
	diffs   flight[*diffResult]
	// dryRuns and outcomes are the merge status (mergestatus.go).
	dryRuns  flight[*mergeOutcome]
	outcomes outcomeCache
	mem      memCache
	merging  branchLocks
	webhooks Announcer
	notifier Notifier
	// branchPerms lists branch permissions among the merge vetoes.
	branchPerms *branchperm.Service
}

type metrics struct {
	merges   *prometheus.HistogramVec
	diffs    *prometheus.CounterVec
	rescopes prometheus.Counter
	// mergeStatus counts CanMerge's merge status lookups by where the
	// answer came from: memory, stored (the pull request row), joined
	// (another caller's dry run) or computed (a dry run).
	mergeStatus *prometheus.CounterVec
	// forkChecks counts pushes to forks checked for borrowed objects, by
	// outcome (forkpush.go).
	forkChecks *prometheus.CounterVec
}

// New builds the service and registers its job handlers (rescope,
// prepare). It registers nothing on the hooks server: app installs the
// push policy (with CheckForkPush) and listens to ref changes with
// RefsChanged. Call it before the job queue starts.
func New(d Deps) (*Service, error) {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	d.Config.defaults()
	m := &metrics{
		merges: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_pull_merge_duration_seconds",
			Help:    "Time of the synchronous merge path, by strategy and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 12),
		}, []string{"strategy", "outcome"}),
		diffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pull_diff_requests_total",
			Help: "Pull request diff reads, by source (cache, joined, computed).",
		}, []string{"source"}),
		rescopes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_pull_rescopes_total",
			Help: "Pull requests rescoped because a branch moved.",
		}),
		mergeStatus: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pull_merge_status_lookups_total",
			Help: "Merge status lookups of CanMerge, by source (memory, stored, joined, computed).",
		}, []string{"source"}),
		forkChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_pull_fork_push_checks_total",
			Help: "Pushes to forks checked for objects borrowed from the parent, by outcome (skipped, accepted, rejected).",
		}, []string{"outcome"}),
	}
	if d.Registerer != nil {
		for _, c := range []prometheus.Collector{m.merges, m.diffs, m.rescopes, m.mergeStatus, m.forkChecks} {
			if err := d.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register pull metrics: %w", err)
			}
		}
	}
	s := &Service{
		st: d.Store, ps: d.Pulls, auth: d.Auth, repos: d.Repos, git: d.Git, hooks: d.Hooks, jobs: d.Jobs,
		logger: d.Logger.With("component", "pull"), cfg: d.Config, metrics: m, webhooks: d.Webhooks, notifier: d.Notifier,
		branchPerms: d.BranchPerms,
	}
	if s.jobs != nil {
		s.jobs.Handle(JobRescope, s.runRescope)
		s.jobs.Handle(JobPrepare, s.runPrepare)
	}
	return s, nil
}

// enqueue adds a job, logging instead of failing: the job's work is
// repeated by the next event or request (rescope, diff) when it is lost.
func (s *Service) enqueue(kind string, payload any, opts ...jobs.EnqueueOption) {
	if s.jobs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.jobs.Enqueue(ctx, kind, payload, opts...); err != nil {
		s.logger.Warn("enqueue job", "kind", kind, "err", err)
	}
}

// actorID is the user a principal acts for (0 for access keys and the
// system).
func actorID(p *auth.Principal) int64 {
	if p == nil {
		return 0
	}
	return p.UserID
}

func (s *Service) activity(ctx context.Context, prID, userID int64, action string, commentID int64, detail any) {
	a := &store.PullActivity{PRID: prID, UserID: userID, Action: action, CommentID: commentID}
	if detail != nil {
		b, _ := json.Marshal(detail)
		a.Detail = string(b)
	}
	if err := s.ps.AddActivity(ctx, a); err != nil {
		s.logger.Warn("record activity", "pr_id", prID, "action", action, "err", err)
	}
}

// Settings is a repository's pull request configuration. Every merge
// check is off by default.
type Settings struct {
	// DefaultStrategy is used when a merge names none (default no-ff).
	DefaultStrategy string `json:"defaultStrategy,omitempty"`
	// Strategies lists the strategies allowed (empty: all).
	Strategies []string `json:"strategies,omitempty"`
	// Checks are the merge checks.
	Checks Checks `json:"checks"`
	// DefaultReviewers are added to new pull requests whose branches match.
	DefaultReviewers []ReviewerRule `json:"defaultReviewers,omitempty"`
	// ResetApprovalsOnChange withdraws every approval when the source
	// branch gets new commits (Bitbucket's "reset approvals when the
	// source branch is modified"): an approval is of the code reviewed.
	ResetApprovalsOnChange bool `json:"resetApprovalsOnChange,omitempty"`
}

// Checks configures the merge checks.
type Checks struct {
	MinApprovals        int  `json:"minApprovals,omitempty"`
	NoNeedsWork         bool `json:"noNeedsWork,omitempty"`
	NoOpenTasks         bool `json:"noOpenTasks,omitempty"`
	MinSuccessfulBuilds int  `json:"minSuccessfulBuilds,omitempty"`
}

// ReviewerRule adds Users as reviewers of pull requests from a branch
// matching Source to one matching Target (globs; empty matches all).
type ReviewerRule struct {
	Source string  `json:"sourceMatcher,omitempty"`
	Target string  `json:"targetMatcher,omitempty"`
	Users  []int64 `json:"userIds"`
}

// Strategies, as Bitbucket names them.
const (
	NoFF         = "no-ff"
	FF           = "ff"
	FFOnly       = "ff-only"
	Squash       = "squash"
	SquashFFOnly = "squash-ff-only"
	RebaseNoFF   = "rebase-no-ff"
)

// AllStrategies lists every strategy, the default first.
var AllStrategies = []string{NoFF, FF, FFOnly, Squash, SquashFFOnly, RebaseNoFF}

func validStrategy(s string) bool {
	for _, v := range AllStrategies {
		if v == s {
			return true
		}
	}
	return false
}

// GetSettings reads a repository's settings, with defaults filled in.
func (s *Service) GetSettings(ctx context.Context, repoID int64) (*Settings, error) {
	raw, err := s.ps.PullSettings(ctx, repoID)
	if err != nil {
		return nil, err
	}
	st := &Settings{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), st); err != nil {
			return nil, fmt.Errorf("decode pull settings of repository %d: %w", repoID, err)
		}
	}
	if st.DefaultStrategy == "" {
		st.DefaultStrategy = NoFF
	}
	return st, nil
}

// PutSettings validates and stores a repository's settings.
func (s *Service) PutSettings(ctx context.Context, repoID int64, st *Settings) error {
	if st.DefaultStrategy == "" {
		st.DefaultStrategy = NoFF
	}
	if !validStrategy(st.DefaultStrategy) {
		return problem.New(problem.Invalid, "unknown merge strategy %q (one of %s)", st.DefaultStrategy, strings.Join(AllStrategies, ", "))
	}
	for _, v := range st.Strategies {
		if !validStrategy(v) {
			return problem.New(problem.Invalid, "unknown merge strategy %q (one of %s)", v, strings.Join(AllStrategies, ", "))
		}
	}
	if len(st.Strategies) > 0 && !contains(st.Strategies, st.DefaultStrategy) {
		return problem.New(problem.Invalid, "the default strategy %q must be one of the enabled strategies", st.DefaultStrategy)
	}
	c := st.Checks
	if c.MinApprovals < 0 || c.MinSuccessfulBuilds < 0 || c.MinApprovals > 100 || c.MinSuccessfulBuilds > 100 {
		return problem.New(problem.Invalid, "merge check minimums must be between 0 and 100")
	}
	for _, r := range st.DefaultReviewers {
		for _, g := range []string{r.Source, r.Target} {
			if err := branchperm.ValidPattern(g); err != nil {
				return err
			}
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return s.ps.PutPullSettings(ctx, repoID, string(b))
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// errNotOpen is the answer to acting on a closed pull request.
func errNotOpen(pr *store.PullRequest) error {
	return problem.New(problem.Conflict, "pull request #%d is %s", pr.Number, strings.ToLower(pr.State))
}

// checkVersion compares the version a caller read with the stored one.
func checkVersion(pr *store.PullRequest, version int64) error {
	if version != pr.Version {
		return problem.New(problem.Conflict, "pull request #%d was changed by someone else (version %d, not %d); reload it and try again",
			pr.Number, pr.Version, version)
	}
	return nil
}
