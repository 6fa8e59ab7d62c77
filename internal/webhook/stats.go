package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestResult is the outcome of POST …/webhooks/test: what the receiver
// answered, or why nothing did.
type TestResult struct {
	StatusCode int    `json:"statusCode"`
	Body       string `json:"body"`
	Error      string `json:"error,omitempty"`
}

// Test posts diagnostics:ping ({"test": true}, Bitbucket's) to url
// through the same guard, signature and headers as a delivery, and tells
// what happened. A receiver that cannot be reached is a result, not an
// error: the caller is checking exactly that.
func (s *Service) Test(ctx context.Context, url, secret string) (*TestResult, error) {
	if err := ValidURL(url); err != nil {
		return nil, err
	}
	var id [16]byte
	rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40 // a random (version 4) UUID: no delivery to derive it from
	id[8] = id[8]&0x3f | 0x80
	h := hex.EncodeToString(id[:])
	reqID := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	status, body, err := s.send(ctx, url, secret, Ping, reqID, []byte(`{"test":true}`))
	out := &TestResult{StatusCode: status, Body: string(body)}
	if err != nil {
		out.Error = err.Error()
		if errors.Is(err, errForbiddenAddress) {
			out.Error = "the address is not allowed for webhooks (webhooks.allow_networks)"
		}
	}
	return out, nil
}

// Outcomes of an invocation, as Bitbucket's statistics name them:
// SUCCESS a 2xx answer, FAILURE any other answer, ERROR no answer.
const (
	Success = "SUCCESS"
	Failure = "FAILURE"
	Error   = "ERROR"
)

// Invocation is the last attempt of one delivery.
type Invocation struct {
	ID     int64  `json:"id"`
	Event  string `json:"event"`
	Start  int64  `json:"start"`
	Finish int64  `json:"finish"`
	Result struct {
		Outcome     string `json:"outcome"`
		Description string `json:"description"`
		StatusCode  int    `json:"statusCode,omitempty"`
	} `json:"result"`
	Attempts int `json:"attempts"`
}

// Statistics is what a webhook's recent deliveries came to.
type Statistics struct {
	LastSuccess *Invocation `json:"lastSuccess,omitempty"`
	LastFailure *Invocation `json:"lastFailure,omitempty"`
	LastError   *Invocation `json:"lastError,omitempty"`
	Counts      struct {
		Successes int `json:"successes"`
		Failures  int `json:"failures"`
		Errors    int `json:"errors"`
		Pending   int `json:"pending"`
	} `json:"counts"`
	// Window is how many deliveries, newest first, the counts cover.
	Window int `json:"window"`
}

// statsWindow bounds the deliveries a statistics request reads: the log
// has no running counters, and a busy webhook's thousands of deliveries
// must not make the page slow. Bitbucket's own statistics cover recent
// invocations too.
const statsWindow = 5000

// outcome classifies a delivery ("" while no attempt has finished).
func outcome(d *store.WebhookDelivery) string {
	switch {
	case d.Delivered:
		return Success
	case d.Attempts == 0:
		return ""
	case d.StatusCode != 0:
		return Failure
	default:
		return Error
	}
}

// Statistics summarises the newest deliveries of webhook id, of one
// event when event is not empty.
func (s *Service) Statistics(ctx context.Context, repoID, id int64, event string) (*Statistics, error) {
	if _, err := s.Get(ctx, repoID, id); err != nil {
		return nil, err
	}
	out := &Statistics{}
	for start := 0; start < statsWindow; start += store.MaxPageLimit {
		ds, err := s.st.ListDeliveries(ctx, id, store.Page{Start: start, Limit: store.MaxPageLimit})
		if err != nil {
			return nil, err
		}
		for i := range ds {
			d := &ds[i]
			if event != "" && d.Event != event {
				continue
			}
			out.Window++
			inv := func() *Invocation {
				v := &Invocation{ID: d.ID, Event: d.Event, Start: entity.Millis(d.CreatedAt), Finish: entity.Millis(d.UpdatedAt), Attempts: d.Attempts}
				v.Result.Outcome, v.Result.Description, v.Result.StatusCode = outcome(d), d.Error, d.StatusCode
				return v
			}
			switch outcome(d) {
			case Success:
				out.Counts.Successes++
				if out.LastSuccess == nil {
					out.LastSuccess = inv()
				}
			case Failure:
				out.Counts.Failures++
				if out.LastFailure == nil {
					out.LastFailure = inv()
				}
			case Error:
				out.Counts.Errors++
				if out.LastError == nil {
					out.LastError = inv()
				}
			default:
				out.Counts.Pending++
			}
		}
		if len(ds) < store.MaxPageLimit {
			break
		}
	}
	return out, nil
}
