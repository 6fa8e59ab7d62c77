// Package webhook is Sluice's webhooks: a repository's subscriptions,
// the events in Bitbucket Data Center's payload shapes, and their
// delivery with retries behind an SSRF guard.
//
// Payloads. Every event key Bitbucket DC 8.x and 9.x sends is accepted at
// subscription (Events), and the payloads carry Bitbucket's documented
// fields, rendered by package entity exactly as the REST API renders the
// same repository, pull request or comment: Jenkins' Bitbucket Branch
// Source and Atlassian's Bitbucket Server Integration parse both with one
// model (repository.project.key, repository.slug, changes[].ref.displayId,
// pullRequest.fromRef.repository, …). A payload is rendered when the event
// happens, once, and only when an active webhook of the repository
// subscribes to it, so a repository without webhooks pays one query per
// event. The date is Bitbucket's "2006-01-02T15:04:05-0700" (no colon in
// the offset): Java clients parse it with the RFC 822 zone pattern, which
// refuses RFC 3339's "Z".
//
// Delivery. An event is written to the delivery log first and posted by
// a job, so a slow or dead receiver never slows a push or a merge, and a
// failed delivery is retried with River's backoff up to Config.Attempts
// times. Each attempt is recorded on the delivery; statistics are read
// from that log. Headers are Bitbucket's: X-Event-Key, X-Request-Id (a
// random UUID per delivery, the same on every retry so a receiver can
// drop duplicates) and, when the webhook has a secret, X-Hub-Signature:
// sha256=<hex of HMAC-SHA256(secret, body)>.
//
// SSRF: a webhook URL is user input that makes this server open a
// connection. The guard sits in the dialer's Control function, which sees
// the address actually being dialled after DNS resolution, so a name that
// resolves (or re-resolves, DNS rebinding) to a loopback, private,
// link-local or otherwise internal address is refused whatever the URL
// said. Redirects are not followed. Config.Allow lists networks to let
// through anyway (a CI server on the office network).
//
// Callers: pull announces pull request events through the PullRequest
// method (a value it is handed at construction, so pull never depends on
// how webhooks work); app registers RefsChanged with the hooks server.
// Authorization is the transport's job; this package trusts its caller.
package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// JobDeliver is one delivery attempt ({delivery_id}). The name is the one
// it had inside package pull, so deliveries queued before an upgrade run.
const JobDeliver = "pull-webhook"

// Event keys, as Bitbucket names them.
const (
	RefsChanged         = "repo:refs_changed"
	RepoModified        = "repo:modified"
	RepoForked          = "repo:forked"
	RepoCommentAdded    = "repo:comment:added"
	RepoCommentEdited   = "repo:comment:edited"
	RepoCommentDeleted  = "repo:comment:deleted"
	PROpened            = "pr:opened"
	PRFromRefUpdated    = "pr:from_ref_updated"
	PRToRefUpdated      = "pr:to_ref_updated"
	PRModified          = "pr:modified"
	PRReviewerUpdated   = "pr:reviewer:updated"
	PRReviewerApproved  = "pr:reviewer:approved"
	PRReviewerUnapprove = "pr:reviewer:unapproved"
	PRReviewerNeedsWork = "pr:reviewer:needs_work"
	PRMerged            = "pr:merged"
	PRDeclined          = "pr:declined"
	PRDeleted           = "pr:deleted"
	PRCommentAdded      = "pr:comment:added"
	PRCommentEdited     = "pr:comment:edited"
	PRCommentDeleted    = "pr:comment:deleted"
	MirrorSynchronized  = "mirror:repo_synchronized"
	Ping                = "diagnostics:ping"
)

// Events lists every key a webhook may subscribe to: all that Bitbucket
// DC 8.x and 9.x send. repo:comment:* (commit comments) and
// mirror:repo_synchronized are accepted so that clients registering
// Bitbucket's full list (Jenkins does) are not refused; Sluice has no
// commit comments or mirrors yet, so they are never sent.
var Events = []string{
	RefsChanged, RepoModified, RepoForked, RepoCommentAdded, RepoCommentEdited, RepoCommentDeleted,
	PROpened, PRFromRefUpdated, PRToRefUpdated, PRModified,
	PRReviewerUpdated, PRReviewerApproved, PRReviewerUnapprove, PRReviewerNeedsWork,
	PRMerged, PRDeclined, PRDeleted, PRCommentAdded, PRCommentEdited, PRCommentDeleted,
	MirrorSynchronized, Ping,
}

// legacyNeedsWork is the key Sluice once stored for pr:reviewer:needs_work;
// webhooks saved with it keep receiving the event.
const legacyNeedsWork = "pr:reviewer:needswork"

// subscribed reports whether h wants event.
func subscribed(h *store.Webhook, event string) bool {
	return slices.Contains(h.Events, event) || (event == PRReviewerNeedsWork && slices.Contains(h.Events, legacyNeedsWork))
}

// Config holds the delivery settings. Zero values mean the defaults.
type Config struct {
	// Allow lists networks webhooks may reach even though they are
	// loopback, private or link-local (all refused otherwise).
	Allow []netip.Prefix
	// Timeout bounds one delivery attempt (default 10 s).
	Timeout time.Duration
	// Attempts bounds deliveries of one event (default 5).
	Attempts int
}

// Store is what the service reads and writes: *store.DB.
type Store interface {
	UserByID(ctx context.Context, id int64) (*store.User, error)
	ProjectByID(ctx context.Context, id int64) (*store.Project, error)
	RepoByID(ctx context.Context, id int64) (*store.Repository, error)
	Participants(ctx context.Context, prID int64) ([]store.Participant, error)

	CreateWebhook(ctx context.Context, h *store.Webhook) error
	WebhookByID(ctx context.Context, id int64) (*store.Webhook, error)
	ListWebhooks(ctx context.Context, repoID int64) ([]store.Webhook, error)
	UpdateWebhook(ctx context.Context, h *store.Webhook) error
	DeleteWebhook(ctx context.Context, repoID, id int64) error
	CreateDelivery(ctx context.Context, d *store.WebhookDelivery) error
	DeliveryByID(ctx context.Context, id int64) (*store.WebhookDelivery, error)
	RecordAttempt(ctx context.Context, id int64, statusCode int, errText string, delivered bool) error
	ListDeliveries(ctx context.Context, webhookID int64, p store.Page) ([]store.WebhookDelivery, error)
}

// Deps is what the service needs from the node.
type Deps struct {
	Store Store
	// Jobs delivers; nil records deliveries that nothing sends (tests).
	Jobs *jobs.Queue
	// Entities renders payload entities. It is a function because the
	// node's base URL is known only once it listens.
	Entities   func() *entity.Renderer
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Config     Config
}

// Service is the webhooks of one node.
type Service struct {
	st         Store
	jobs       *jobs.Queue
	entities   func() *entity.Renderer
	logger     *slog.Logger
	cfg        Config
	client     *client
	deliveries *prometheus.CounterVec
}

// New builds the service and registers its delivery job. Call it before
// the job queue starts.
func New(d Deps) (*Service, error) {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Config.Timeout <= 0 {
		d.Config.Timeout = 10 * time.Second
	}
	if d.Config.Attempts <= 0 {
		d.Config.Attempts = 5
	}
	if d.Entities == nil {
		d.Entities = func() *entity.Renderer { return &entity.Renderer{} }
	}
	s := &Service{
		st: d.Store, jobs: d.Jobs, entities: d.Entities, logger: d.Logger.With("component", "webhook"), cfg: d.Config,
		client: newClient(d.Config.Allow, d.Config.Timeout),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_webhook_deliveries_total",
			Help: "Webhook delivery attempts, by outcome (delivered, failed, refused).",
		}, []string{"outcome"}),
	}
	if d.Registerer != nil {
		if err := d.Registerer.Register(s.deliveries); err != nil {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
	}
	if s.jobs != nil {
		s.jobs.Handle(JobDeliver, s.runDelivery)
	}
	return s, nil
}

// Close drops idle connections to receivers.
func (s *Service) Close() { s.client.http.CloseIdleConnections() }

// check validates a webhook before it is stored.
func check(h *store.Webhook) error {
	if strings.TrimSpace(h.Name) == "" || len(h.Name) > 255 || !utf8.ValidString(h.Name) || strings.ContainsRune(h.Name, 0) {
		return problem.New(problem.Invalid, "a webhook needs a name of at most 255 bytes")
	}
	if err := ValidURL(h.URL); err != nil {
		return err
	}
	if len(h.Events) == 0 {
		return problem.New(problem.Invalid, "a webhook needs at least one event")
	}
	seen := map[string]bool{}
	events := h.Events[:0:0]
	for _, e := range h.Events {
		if e == legacyNeedsWork {
			e = PRReviewerNeedsWork
		}
		if !slices.Contains(Events, e) {
			return problem.New(problem.Invalid, "unknown event %q (one of %s)", e, strings.Join(Events, ", "))
		}
		if !seen[e] {
			seen[e] = true
			events = append(events, e)
		}
	}
	h.Events = events
	if len(h.Secret) > 255 {
		return problem.New(problem.Invalid, "a webhook secret is at most 255 bytes")
	}
	return nil
}

// Create validates and stores a webhook.
func (s *Service) Create(ctx context.Context, h *store.Webhook) error {
	if err := check(h); err != nil {
		return err
	}
	return s.st.CreateWebhook(ctx, h)
}

// List lists a repository's webhooks.
func (s *Service) List(ctx context.Context, repoID int64) ([]store.Webhook, error) {
	return s.st.ListWebhooks(ctx, repoID)
}

// Get reads webhook id of repository repoID; another repository's
// webhook is not found.
func (s *Service) Get(ctx context.Context, repoID, id int64) (*store.Webhook, error) {
	h, err := s.st.WebhookByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if h.RepoID != repoID {
		return nil, problem.New(problem.NotFound, "webhook not found")
	}
	return h, nil
}

// Change is an edit of a webhook; nil fields stay.
type Change struct {
	Name   *string
	URL    *string
	Events *[]string
	Active *bool
	// Secret replaces the secret; an empty string removes it.
	Secret *string
}

// Update edits webhook id of repository repoID.
func (s *Service) Update(ctx context.Context, repoID, id int64, ch Change) (*store.Webhook, error) {
	h, err := s.Get(ctx, repoID, id)
	if err != nil {
		return nil, err
	}
	if ch.Name != nil {
		h.Name = *ch.Name
	}
	if ch.URL != nil {
		h.URL = *ch.URL
	}
	if ch.Events != nil {
		h.Events = *ch.Events
	}
	if ch.Active != nil {
		h.Active = *ch.Active
	}
	if ch.Secret != nil {
		h.Secret = *ch.Secret
	}
	if err := check(h); err != nil {
		return nil, err
	}
	if err := s.st.UpdateWebhook(ctx, h); err != nil {
		return nil, err
	}
	return h, nil
}

// Delete removes a webhook of a repository; its deliveries go with it.
func (s *Service) Delete(ctx context.Context, repoID, id int64) error {
	return s.st.DeleteWebhook(ctx, repoID, id)
}

// Deliveries pages through a webhook's delivery log, newest first.
func (s *Service) Deliveries(ctx context.Context, repoID, id int64, pg store.Page) ([]store.WebhookDelivery, error) {
	if _, err := s.Get(ctx, repoID, id); err != nil {
		return nil, err
	}
	return s.st.ListDeliveries(ctx, id, pg)
}
