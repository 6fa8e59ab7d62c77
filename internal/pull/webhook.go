package pull

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Webhooks. An event is written to the delivery log first and delivered
// by a job, so a slow or dead receiver never slows a push or a merge, and
// a failed delivery is retried with River's backoff up to
// Config.WebhookAttempts times. Each attempt is recorded on the delivery.
//
// The body is signed like Bitbucket's: X-Hub-Signature: sha256=<hex of
// HMAC-SHA256(secret, body)> when the webhook has a secret.
//
// SSRF: a webhook URL is user input that makes this server open a
// connection. The guard sits in the dialer's Control function, which sees
// the address actually being dialled after DNS resolution, so a name that
// resolves (or re-resolves, DNS rebinding) to a loopback, private,
// link-local or otherwise internal address is refused whatever the URL
// said. Redirects are not followed. Config.WebhookAllow lists networks to
// let through anyway (a CI server on the office network).

// Events a webhook may subscribe to (Bitbucket's keys).
var WebhookEvents = []string{
	"repo:refs_changed", "pr:opened", "pr:from_ref_updated", "pr:modified", "pr:merged", "pr:declined", "pr:deleted",
	"pr:comment:added", "pr:reviewer:approved", "pr:reviewer:unapproved", "pr:reviewer:needswork",
}

type webhookArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

type webhookClient struct {
	client *http.Client
	allow  []netip.Prefix
}

func newWebhookClient(allow []netip.Prefix, timeout time.Duration) *webhookClient {
	w := &webhookClient{allow: allow}
	dialer := &net.Dialer{Timeout: timeout, Control: w.control}
	transport := &http.Transport{
		DialContext:           dialer.DialContext,
		Proxy:                 nil, // a proxy would dial for us, past the guard
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	w.client = &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return w
}

// errForbiddenAddress is the guard's refusal.
var errForbiddenAddress = errors.New("webhook address not allowed")

// control runs on the resolved address of every connection attempt.
func (w *webhookClient) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errForbiddenAddress, address)
	}
	if !w.allowed(ap.Addr()) {
		return fmt.Errorf("%w: %s", errForbiddenAddress, ap.Addr())
	}
	return nil
}

func (w *webhookClient) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range w.allow {
		if p.Contains(a) {
			return true
		}
	}
	return !internalAddr(a)
}

// internalAddr reports addresses a webhook must not reach by default.
func internalAddr(a netip.Addr) bool {
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() {
		return true
	}
	for _, p := range internalNets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// internalNets are the special ranges netip has no predicate for:
// carrier-grade NAT (RFC 6598, also used by cloud metadata services),
// "this network" (RFC 1122), benchmarking (RFC 2544) and the IPv6
// translation prefixes that can wrap an internal IPv4 address.
var internalNets = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
}

// ValidWebhookURL checks a URL's shape when a webhook is saved (the
// address is checked at each delivery, where it counts).
func ValidWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(raw) > 2048 {
		return problem.New(problem.Invalid, "a webhook URL must be an http or https URL without credentials")
	}
	return nil
}

// CreateWebhook validates and stores a webhook.
func (s *Service) CreateWebhook(ctx context.Context, h *store.Webhook) error {
	if err := checkText("webhook name", h.Name, 255, true); err != nil {
		return err
	}
	if err := ValidWebhookURL(h.URL); err != nil {
		return err
	}
	if len(h.Events) == 0 {
		return problem.New(problem.Invalid, "a webhook needs at least one event")
	}
	for _, e := range h.Events {
		if !contains(WebhookEvents, e) {
			return problem.New(problem.Invalid, "unknown event %q (one of %s)", e, strings.Join(WebhookEvents, ", "))
		}
	}
	return s.ps.CreateWebhook(ctx, h)
}

// Webhooks lists a repository's webhooks.
func (s *Service) Webhooks(ctx context.Context, repoID int64) ([]store.Webhook, error) {
	return s.ps.ListWebhooks(ctx, repoID)
}

// DeleteWebhook removes a webhook of a repository.
func (s *Service) DeleteWebhook(ctx context.Context, repoID, id int64) error {
	return s.ps.DeleteWebhook(ctx, repoID, id)
}

// Deliveries pages through a webhook's delivery log, newest first.
func (s *Service) Deliveries(ctx context.Context, repoID, webhookID int64, pg store.Page) ([]store.WebhookDelivery, error) {
	h, err := s.ps.WebhookByID(ctx, webhookID)
	if err != nil {
		return nil, err
	}
	if h.RepoID != repoID {
		return nil, problem.New(problem.NotFound, "webhook not found")
	}
	return s.ps.ListDeliveries(ctx, webhookID, pg)
}

// emit records a pull request event for the repository's webhooks.
func (s *Service) emit(ctx context.Context, pr *store.PullRequest, event string, actor *auth.Principal) {
	payload := map[string]any{
		"eventKey": event,
		"date":     nowUTC().Format(time.RFC3339),
		"pullRequest": map[string]any{
			"id": pr.Number, "version": pr.Version, "title": pr.Title, "state": pr.State,
			"fromRef": map[string]any{"id": pr.FromRef, "latestCommit": pr.FromSHA, "repositoryId": pr.FromRepoID},
			"toRef":   map[string]any{"id": pr.ToRef, "latestCommit": pr.ToSHA, "repositoryId": pr.RepoID},
		},
	}
	if actor != nil {
		payload["actor"] = map[string]any{"name": actor.Name, "id": actor.UserID}
	}
	s.deliver(ctx, pr.RepoID, event, payload)
}

// emitPush records a push event (repo:refs_changed).
func (s *Service) emitPush(ctx context.Context, req hooks.Request, updates []hooks.RefUpdate) {
	changes := make([]map[string]string, 0, len(updates))
	for _, u := range updates {
		if strings.HasPrefix(u.Ref, "refs/pull-requests/") {
			continue
		}
		typ := "UPDATE"
		switch {
		case isZero(u.Old):
			typ = "ADD"
		case isZero(u.New):
			typ = "DELETE"
		}
		changes = append(changes, map[string]string{"refId": u.Ref, "fromHash": u.Old, "toHash": u.New, "type": typ})
	}
	if len(changes) == 0 {
		return
	}
	payload := map[string]any{"eventKey": "repo:refs_changed", "date": nowUTC().Format(time.RFC3339), "changes": changes,
		"repository": map[string]any{"id": req.RepoID}}
	if req.Principal != nil {
		payload["actor"] = map[string]any{"name": req.Principal.Name, "id": req.Principal.UserID}
	}
	s.deliver(ctx, req.RepoID, "repo:refs_changed", payload)
}

// OnPushed is the hooks.Server listener (called when a push request ends) for push webhooks.
func (s *Service) OnPushed(req hooks.Request, updates []hooks.RefUpdate) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.emitPush(ctx, req, updates)
}

func (s *Service) deliver(ctx context.Context, repoID int64, event string, payload any) {
	ctx = context.WithoutCancel(ctx)
	hs, err := s.ps.ListWebhooks(ctx, repoID)
	if err != nil {
		s.logger.Warn("list webhooks", "repo_id", repoID, "err", err)
		return
	}
	var body []byte
	for _, h := range hs {
		if !h.Active || !contains(h.Events, event) {
			continue
		}
		if body == nil {
			if body, err = json.Marshal(payload); err != nil {
				s.logger.Error("encode webhook payload", "err", err)
				return
			}
		}
		d := &store.WebhookDelivery{WebhookID: h.ID, Event: event, Payload: string(body)}
		if err := s.ps.CreateDelivery(ctx, d); err != nil {
			s.logger.Warn("record webhook delivery", "webhook_id", h.ID, "err", err)
			continue
		}
		s.enqueue(JobWebhook, webhookArgs{DeliveryID: d.ID}, jobs.MaxAttempts(s.cfg.WebhookAttempts))
	}
}

// Sign is the X-Hub-Signature value of body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func (s *Service) runWebhook(ctx context.Context, payload json.RawMessage) error {
	var args webhookArgs
	if err := json.Unmarshal(payload, &args); err != nil {
		return fmt.Errorf("decode webhook args: %w", err)
	}
	d, err := s.ps.DeliveryByID(ctx, args.DeliveryID)
	if problem.Is(err, problem.NotFound) {
		return nil // the webhook was deleted
	}
	if err != nil {
		return err
	}
	if d.Delivered {
		return nil
	}
	h, err := s.ps.WebhookByID(ctx, d.WebhookID)
	if problem.Is(err, problem.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	status, sendErr := s.send(ctx, h, d)
	errText := ""
	if sendErr != nil {
		errText = sendErr.Error()
	}
	delivered := sendErr == nil
	if err := s.ps.RecordAttempt(ctx, d.ID, status, errText, delivered); err != nil {
		s.logger.Warn("record webhook attempt", "delivery_id", d.ID, "err", err)
	}
	if delivered {
		s.metrics.deliveries.WithLabelValues("delivered").Inc()
		return nil
	}
	if errors.Is(sendErr, errForbiddenAddress) {
		// Retrying cannot help; the log says why.
		s.metrics.deliveries.WithLabelValues("refused").Inc()
		return nil
	}
	s.metrics.deliveries.WithLabelValues("failed").Inc()
	return sendErr
}

// send makes one delivery attempt and returns the response status.
func (s *Service) send(ctx context.Context, h *store.Webhook, d *store.WebhookDelivery) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader([]byte(d.Payload)))
	if err != nil {
		return 0, fmt.Errorf("webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Sluice-Webhook")
	req.Header.Set("X-Event-Key", d.Event)
	req.Header.Set("X-Request-Id", fmt.Sprintf("%d", d.ID))
	if h.Secret != "" {
		req.Header.Set("X-Hub-Signature", Sign(h.Secret, []byte(d.Payload)))
	}
	resp, err := s.webhook.client.Do(req)
	if err != nil {
		if errors.Is(err, errForbiddenAddress) {
			return 0, errForbiddenAddress
		}
		return 0, fmt.Errorf("webhook post: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("webhook answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
