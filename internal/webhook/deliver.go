package webhook

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
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

type deliveryArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

// record writes event for every active webhook of the repository that
// subscribes to it and queues the deliveries. render is called at most
// once, and only when some webhook wants the event. Errors are logged,
// never returned: the event has happened whatever its announcement does.
func (s *Service) record(ctx context.Context, repoID int64, event string, render func(context.Context) (any, error)) {
	ctx = context.WithoutCancel(ctx)
	hs, err := s.st.ListWebhooks(ctx, repoID)
	if err != nil {
		s.logger.Warn("list webhooks", "repo_id", repoID, "err", err)
		return
	}
	var body []byte
	for i := range hs {
		h := &hs[i]
		if !h.Active || !subscribed(h, event) {
			continue
		}
		if body == nil {
			payload, err := render(ctx)
			if err != nil {
				s.logger.Warn("render webhook payload", "repo_id", repoID, "event", event, "err", err)
				return
			}
			if body, err = json.Marshal(payload); err != nil {
				s.logger.Error("encode webhook payload", "event", event, "err", err)
				return
			}
		}
		d := &store.WebhookDelivery{WebhookID: h.ID, Event: event, Payload: string(body)}
		if err := s.st.CreateDelivery(ctx, d); err != nil {
			s.logger.Warn("record webhook delivery", "webhook_id", h.ID, "err", err)
			continue
		}
		s.enqueue(d.ID)
	}
}

// enqueue queues one delivery, logging instead of failing: the delivery
// is in the log either way, marked undelivered.
func (s *Service) enqueue(id int64) {
	if s.jobs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.jobs.Enqueue(ctx, JobDeliver, deliveryArgs{DeliveryID: id}, jobs.MaxAttempts(s.cfg.Attempts)); err != nil {
		s.logger.Warn("enqueue webhook delivery", "delivery_id", id, "err", err)
	}
}

// Sign is the X-Hub-Signature value of body under secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// RequestID is the X-Request-Id of a delivery: a UUID, as Bitbucket
// sends, derived from the delivery's id and creation time so that every
// retry of one delivery carries the same id (a receiver can drop the
// duplicates a lost answer causes) while deliveries never share one. It
// is marked version 8 (RFC 9562: custom) since it is not random.
func RequestID(d *store.WebhookDelivery) string {
	sum := sha256.Sum256([]byte("sluice webhook delivery " + strconv.FormatInt(d.ID, 10) + " " +
		strconv.FormatInt(d.CreatedAt.UnixNano(), 10)))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (s *Service) runDelivery(ctx context.Context, payload json.RawMessage) error {
	var args deliveryArgs
	if err := json.Unmarshal(payload, &args); err != nil {
		return fmt.Errorf("decode webhook args: %w", err)
	}
	d, err := s.st.DeliveryByID(ctx, args.DeliveryID)
	if problem.Is(err, problem.NotFound) {
		return nil // the webhook was deleted
	}
	if err != nil {
		return err
	}
	if d.Delivered {
		return nil
	}
	h, err := s.st.WebhookByID(ctx, d.WebhookID)
	if problem.Is(err, problem.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	status, _, sendErr := s.send(ctx, h.URL, h.Secret, d.Event, RequestID(d), []byte(d.Payload))
	errText := ""
	if sendErr != nil {
		errText = sendErr.Error()
	}
	delivered := sendErr == nil
	if err := s.st.RecordAttempt(ctx, d.ID, status, errText, delivered); err != nil {
		s.logger.Warn("record webhook attempt", "delivery_id", d.ID, "err", err)
	}
	if delivered {
		s.deliveries.WithLabelValues("delivered").Inc()
		return nil
	}
	if errors.Is(sendErr, errForbiddenAddress) {
		// Retrying cannot help; the log says why.
		s.deliveries.WithLabelValues("refused").Inc()
		return nil
	}
	s.deliveries.WithLabelValues("failed").Inc()
	return sendErr
}

// maxResponse is how much of a receiver's answer is read: enough for the
// test endpoint to show an error page, little enough that a receiver
// cannot make a delivery expensive.
const maxResponse = 64 << 10

// send makes one delivery attempt and returns the response status and
// the start of its body.
func (s *Service) send(ctx context.Context, url, secret, event, requestID string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Sluice-Webhook")
	req.Header.Set("X-Event-Key", event)
	req.Header.Set("X-Request-Id", requestID)
	if secret != "" {
		req.Header.Set("X-Hub-Signature", Sign(secret, body))
	}
	resp, err := s.client.http.Do(req)
	if err != nil {
		if errors.Is(err, errForbiddenAddress) {
			return 0, nil, errForbiddenAddress
		}
		return 0, nil, fmt.Errorf("webhook post: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, answer, fmt.Errorf("webhook answered %s", resp.Status)
	}
	return resp.StatusCode, answer, nil
}
