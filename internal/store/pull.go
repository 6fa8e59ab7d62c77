package store

import (
	"context"
	"time"
)

// PullStore is the pull request side of the metadata: pull requests and
// their participants, comments, activity and cached diff; build statuses
// reported by CI; branch restrictions; per-repository pull request
// settings; webhooks and their delivery log. *DB implements it next to
// Store; it is a separate interface so that the services that do not deal
// with pull requests need not know it.
//
// Versions are optimistic locks: an update names the version it read and
// fails with problem.Conflict when the row moved on meanwhile.
type PullStore interface {
	// ReviewStore: default reviewers and Code Insights (review.go).
	ReviewStore

	// CreatePullRequest inserts pr with the next number of its target
	// repository and its participants, and sets ID, Number, Version and
	// the times.
	CreatePullRequest(ctx context.Context, pr *PullRequest, participants []Participant) error
	PullRequestByID(ctx context.Context, id int64) (*PullRequest, error)
	PullRequestByNumber(ctx context.Context, repoID, number int64) (*PullRequest, error)
	ListPullRequests(ctx context.Context, f PullFilter, p Page) ([]PullRequest, error)
	// OpenPullRequestsTouching lists the open pull requests whose target
	// (repo_id, to_ref) or source (from_repo_id, from_ref) is one of refs
	// of repoID.
	OpenPullRequestsTouching(ctx context.Context, repoID int64, refs []string) ([]PullRequest, error)
	// UpdatePullRequest writes title, description, state, merge sha and
	// closed time when the stored version is expectVersion, and bumps it.
	UpdatePullRequest(ctx context.Context, pr *PullRequest, expectVersion int64) error
	// DeletePullRequest removes a pull request with its participants,
	// comments, activity, stored diff and notifications, when the stored
	// version is expectVersion.
	DeletePullRequest(ctx context.Context, id, expectVersion int64) error
	// RescopePullRequest records new source and target commits without
	// bumping the version (rescope is not a user's edit), when the stored
	// ones are still oldFrom and oldTo.
	RescopePullRequest(ctx context.Context, id int64, oldFrom, oldTo, from, to, base string) (bool, error)
	// SetMergeStatus records whether from and to merge cleanly, when they
	// are still the pull request's commits.
	SetMergeStatus(ctx context.Context, id int64, from, to, status, conflicts string) error
	// OpenPullRequestsAuthoredBy and OpenPullRequestsToReview are the
	// dashboard's pull requests across repositories (pulldash.go): open
	// ones userID created, and open ones where userID is a reviewer who
	// has not approved or asked for work yet; only in repositories userID
	// may read; most recently updated first.
	OpenPullRequestsAuthoredBy(ctx context.Context, userID int64, limit int) ([]DashboardPull, error)
	OpenPullRequestsToReview(ctx context.Context, userID int64, limit int) ([]DashboardPull, error)

	Participants(ctx context.Context, prID int64) ([]Participant, error)
	// PutParticipant inserts or replaces one participant.
	PutParticipant(ctx context.Context, prID int64, p Participant) error
	// ResetApprovals sets every APPROVED participant back to UNAPPROVED
	// (used when the source branch gets new commits and the repository
	// asks for it).
	ResetApprovals(ctx context.Context, prID int64) error

	// Watchers are the users watching a pull request (in id order);
	// Watch and Unwatch are idempotent.
	Watchers(ctx context.Context, prID int64) ([]int64, error)
	Watch(ctx context.Context, prID, userID int64) error
	Unwatch(ctx context.Context, prID, userID int64) error

	CreateComment(ctx context.Context, c *PullComment) error
	CommentByID(ctx context.Context, prID, id int64) (*PullComment, error)
	ListComments(ctx context.Context, prID int64) ([]PullComment, error)
	// UpdateComment writes text, severity and state when the stored
	// version is expectVersion, and bumps it.
	UpdateComment(ctx context.Context, c *PullComment, expectVersion int64) error
	// MoveComment records an inline comment's new anchor after a rescope.
	MoveComment(ctx context.Context, c *PullComment) error
	DeleteComment(ctx context.Context, prID, id, expectVersion int64) error

	AddActivity(ctx context.Context, a *PullActivity) error
	ListActivities(ctx context.Context, prID int64, p Page) ([]PullActivity, error)

	// PutPullDiff replaces the cached diff of a pull request.
	PutPullDiff(ctx context.Context, d *PullDiff) error
	// PullDiff is the cached diff (NotFound when none).
	PullDiff(ctx context.Context, prID int64) (*PullDiff, error)

	// PutBuildStatus records b once for each of repoIDs, replacing what
	// each repository had under the same commit and key, in one
	// transaction; b.RepoID is ignored.
	PutBuildStatus(ctx context.Context, b *BuildStatus, repoIDs []int64) error
	// BuildStatuses lists a commit's statuses in every repository, newest
	// first; callers show a reader only the rows of repositories they may
	// read.
	BuildStatuses(ctx context.Context, sha string) ([]BuildStatus, error)
	// RepoBuildStatuses lists a commit's statuses in one repository,
	// newest first.
	RepoBuildStatuses(ctx context.Context, repoID int64, sha string) ([]BuildStatus, error)
	// RecentlyPushedRepos lists up to limit repositories userID may read,
	// most recently pushed first (dashboard.go); build statuses posted
	// without a repository look for their commit there.
	RecentlyPushedRepos(ctx context.Context, userID int64, limit int) ([]Repository, error)
	// HasOpenPullRequestFrom reports whether an open pull request into
	// repoID has sha as its source commit.
	HasOpenPullRequestFrom(ctx context.Context, repoID int64, sha string) (bool, error)

	CreateRestriction(ctx context.Context, r *BranchRestriction) error
	RestrictionByID(ctx context.Context, id int64) (*BranchRestriction, error)
	// ListRestrictions lists the restrictions of exactly one scope: a
	// repository (projectID 0) or a project (repoID 0).
	ListRestrictions(ctx context.Context, repoID, projectID int64) ([]BranchRestriction, error)
	// RestrictionsFor lists every restriction that applies to repoID: its
	// own and its project's.
	RestrictionsFor(ctx context.Context, repoID, projectID int64) ([]BranchRestriction, error)
	DeleteRestriction(ctx context.Context, id int64) error

	// PullSettings is the repository's settings document ("" when unset).
	PullSettings(ctx context.Context, repoID int64) (string, error)
	PutPullSettings(ctx context.Context, repoID int64, config string) error

	CreateWebhook(ctx context.Context, h *Webhook) error
	WebhookByID(ctx context.Context, id int64) (*Webhook, error)
	ListWebhooks(ctx context.Context, repoID int64) ([]Webhook, error)
	// UpdateWebhook rewrites name, URL, secret, events and active of the
	// webhook h.ID of repository h.RepoID.
	UpdateWebhook(ctx context.Context, h *Webhook) error
	DeleteWebhook(ctx context.Context, repoID, id int64) error
	CreateDelivery(ctx context.Context, d *WebhookDelivery) error
	DeliveryByID(ctx context.Context, id int64) (*WebhookDelivery, error)
	// RecordAttempt stores the outcome of one delivery attempt.
	RecordAttempt(ctx context.Context, id int64, statusCode int, errText string, delivered bool) error
	ListDeliveries(ctx context.Context, webhookID int64, p Page) ([]WebhookDelivery, error)
}

// Pull request states, reviewer statuses and roles, as Bitbucket names them.
const (
	PullOpen     = "OPEN"
	PullDeclined = "DECLINED"
	PullMerged   = "MERGED"

	StatusApproved   = "APPROVED"
	StatusNeedsWork  = "NEEDS_WORK"
	StatusUnapproved = "UNAPPROVED"

	RoleAuthor      = "AUTHOR"
	RoleReviewer    = "REVIEWER"
	RoleParticipant = "PARTICIPANT"
)

// PullRequest is one pull request from a branch of FromRepoID to a branch
// of RepoID (the same repository, or the fork's origin).
type PullRequest struct {
	ID          int64
	RepoID      int64
	Number      int64
	FromRepoID  int64
	FromRef     string // full ref name: refs/heads/feature
	FromSHA     string
	ToRef       string
	ToSHA       string
	BaseSHA     string // merge base of FromSHA and ToSHA when last rescoped
	Title       string
	Description string
	State       string
	AuthorID    int64
	Version     int64
	MergeStatus string // UNKNOWN, CLEAN or CONFLICTED
	Conflicts   string // conflicted paths, one a line
	MergeSHA    string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ClosedAt    *time.Time
}

// PullFilter selects pull requests of one target repository, or, with
// FromRepoID instead, those whose source branch is in that repository
// (Bitbucket's OUTGOING direction, which crosses into the repositories
// forks are merged into).
type PullFilter struct {
	RepoID     int64
	FromRepoID int64
	State      string // "" or "ALL": every state
	AuthorID   int64
	// Newest first unless Oldest.
	Oldest bool
}

// Participant is a user's role and review status on a pull request.
type Participant struct {
	UserID int64
	Role   string
	Status string
}

// PullComment is a general or inline comment, or a reply (ParentID set).
// A BLOCKER comment is a task; its State is OPEN or RESOLVED.
type PullComment struct {
	ID       int64
	PRID     int64
	ParentID int64
	AuthorID int64
	Text     string
	Severity string // NORMAL or BLOCKER
	State    string // OPEN or RESOLVED
	Version  int64
	// Anchor of an inline comment (Path empty for a general comment).
	Path     string
	Line     int
	LineType string // ADDED, REMOVED or CONTEXT
	FileType string // FROM (the target's side) or TO (the source's side)
	FromSHA  string // the diff the anchor refers to
	ToSHA    string
	Outdated bool // the line it was on is gone
	Created  time.Time
	Updated  time.Time
}

// PullActivity is one entry of a pull request's activity stream.
type PullActivity struct {
	ID        int64
	PRID      int64
	UserID    int64
	Action    string // OPENED, UPDATED, COMMENTED, APPROVED, UNAPPROVED, REVIEWED, RESCOPED, MERGED, DECLINED, REOPENED
	CommentID int64
	Detail    string // JSON, action-specific
	CreatedAt time.Time
}

// PullDiff is the cached diff of a pull request from BaseSHA to FromSHA.
type PullDiff struct {
	PRID      int64
	BaseSHA   string
	FromSHA   string
	Stat      string // JSON list of file stats
	Diff      []byte // unified diff text, possibly cut at a limit
	Truncated bool
	CreatedAt time.Time
}

// BuildStatus is what a CI system reported for a commit under a key, in
// one repository.
type BuildStatus struct {
	ID          int64
	RepoID      int64
	CommitSHA   string
	Key         string
	State       string // SUCCESSFUL, FAILED, INPROGRESS, CANCELLED or UNKNOWN
	Name        string
	URL         string
	Description string
	Ref         string // the ref CI built, e.g. refs/heads/main
	Parent      string // the key of the build this one belongs to
	BuildNumber string
	DurationMS  int64
	Tests       *TestResults // nil when CI sent none
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// TestResults are a build's test counts.
type TestResults struct {
	Successful, Failed, Skipped int64
}

// BranchRestriction is a branch permission of a repository or a project.
type BranchRestriction struct {
	ID          int64
	RepoID      int64
	ProjectID   int64
	Type        string // read-only, no-deletes, fast-forward-only, pull-request-only
	MatcherType string // BRANCH (exact) or PATTERN (glob)
	MatcherID   string
	UserIDs     []int64 // exempt users
	GroupIDs    []int64 // exempt groups
	CreatedAt   time.Time
}

// Webhook posts events of one repository to a URL.
type Webhook struct {
	ID        int64
	RepoID    int64
	Name      string
	URL       string
	Secret    string
	Events    []string
	Active    bool
	CreatedAt time.Time
}

// WebhookDelivery is one event sent (or being sent) to a webhook.
type WebhookDelivery struct {
	ID         int64
	WebhookID  int64
	Event      string
	Payload    string
	Attempts   int
	StatusCode int
	Error      string
	Delivered  bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}
