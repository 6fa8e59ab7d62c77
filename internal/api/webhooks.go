package api

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// Webhooks of a repository, at Bitbucket's paths, served by package
// webhook. All of them need REPO_ADMIN: a webhook's URL and delivery log
// say where a repository's events go.

func (s *server) webhookRoutes() []route {
	if s.Webhooks == nil {
		return nil
	}
	hook := repository + "/webhooks/{webhookId}"
	return []route{
		{Method: "GET", Pattern: repository + "/webhooks", Summary: "List webhooks (REPO_ADMIN)", Paged: true,
			Query:  []param{q("event", "only webhooks subscribed to this event"), q("statistics", "true adds each webhook's statistics")},
			handle: (*call).listWebhooks},
		{Method: "POST", Pattern: repository + "/webhooks", Summary: "Add a webhook (REPO_ADMIN)", Success: 201,
			Body: "{name, url, events, active, configuration: {secret}}", handle: (*call).createWebhook},
		{Method: "POST", Pattern: repository + "/webhooks/test", Summary: "Send diagnostics:ping to a URL and show the answer (REPO_ADMIN)",
			Query:  []param{q("url", "the receiver"), q("webhookId", "test this webhook's URL and secret")},
			handle: (*call).testWebhook},
		{Method: "GET", Pattern: hook, Summary: "Get a webhook (REPO_ADMIN)",
			Query: []param{q("statistics", "true adds the webhook's statistics")}, handle: (*call).getWebhook},
		{Method: "PUT", Pattern: hook, Summary: "Change a webhook; fields left out stay (REPO_ADMIN)",
			Body: "{name, url, events, active, configuration: {secret}}", handle: (*call).updateWebhook},
		{Method: "DELETE", Pattern: hook, Summary: "Remove a webhook (REPO_ADMIN)", Success: 204, handle: (*call).deleteWebhook},
		{Method: "GET", Pattern: hook + "/deliveries", Summary: "A webhook's delivery log (REPO_ADMIN)", Paged: true,
			handle: (*call).listDeliveries},
		{Method: "GET", Pattern: hook + "/statistics", Summary: "Last success, failure and error of a webhook, and counts (REPO_ADMIN)",
			Query: []param{q("event", "only deliveries of this event")}, handle: (*call).webhookStatistics},
		{Method: "GET", Pattern: hook + "/statistics/summary", Summary: "Counts of a webhook's recent deliveries by outcome (REPO_ADMIN)",
			handle: (*call).webhookSummary},
	}
}

type webhookJSON struct {
	ID                      int64               `json:"id"`
	Name                    string              `json:"name"`
	URL                     string              `json:"url"`
	Events                  []string            `json:"events"`
	Active                  bool                `json:"active"`
	CreatedDate             int64               `json:"createdDate"`
	Configuration           map[string]string   `json:"configuration"`
	ScopeType               string              `json:"scopeType"`
	SSLVerificationRequired bool                `json:"sslVerificationRequired"`
	Statistics              *webhook.Statistics `json:"statistics,omitempty"`
}

func webhookOut(h *store.Webhook) webhookJSON {
	cfg := map[string]string{}
	if h.Secret != "" {
		cfg["secret"] = "********" // never shown again
	}
	// Certificates are always verified: Go's client has no switch for it here.
	return webhookJSON{ID: h.ID, Name: h.Name, URL: h.URL, Events: h.Events, Active: h.Active, CreatedDate: millis(h.CreatedAt),
		Configuration: cfg, ScopeType: "repository", SSLVerificationRequired: true}
}

// withStatistics adds the statistics when the caller asked for them.
func (c *call) withStatistics(h *store.Webhook, out *webhookJSON) error {
	if !strings.EqualFold(c.query("statistics"), "true") {
		return nil
	}
	st, err := c.s.Webhooks.Statistics(c.ctx, h.RepoID, h.ID, "")
	if err != nil {
		return err
	}
	out.Statistics = st
	return nil
}

func (c *call) listWebhooks() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	hs, err := c.s.Webhooks.List(c.ctx, r.ID)
	if err != nil {
		return err
	}
	if ev := c.query("event"); ev != "" {
		hs = slices.DeleteFunc(hs, func(h store.Webhook) bool { return !slices.Contains(h.Events, ev) })
	}
	page := slicePage(hs, pg)
	out := pageJSON[webhookJSON]{Size: page.Size, Limit: page.Limit, Start: page.Start, IsLastPage: page.IsLastPage,
		NextPageStart: page.NextPageStart, Values: []webhookJSON{}}
	for i := range page.Values {
		wj := webhookOut(&page.Values[i])
		if err := c.withStatistics(&page.Values[i], &wj); err != nil {
			return err
		}
		out.Values = append(out.Values, wj)
	}
	return c.json(out)
}

// webhookBody is a webhook as a client sends it; nil fields were left out.
type webhookBody struct {
	Name          *string           `json:"name"`
	URL           *string           `json:"url"`
	Events        *[]string         `json:"events"`
	Active        *bool             `json:"active"`
	Configuration map[string]string `json:"configuration"`
}

func (c *call) createWebhook() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	var in webhookBody
	if err := c.decode(&in, false); err != nil {
		return err
	}
	h := &store.Webhook{RepoID: r.ID, Active: in.Active == nil || *in.Active, Secret: in.Configuration["secret"]}
	if in.Name != nil {
		h.Name = *in.Name
	}
	if in.URL != nil {
		h.URL = *in.URL
	}
	if in.Events != nil {
		h.Events = *in.Events
	}
	if err := c.s.Webhooks.Create(c.ctx, h); err != nil {
		return err
	}
	return c.jsonStatus(http.StatusCreated, webhookOut(h))
}

func (c *call) webhookID() (int64, error) {
	id, err := strconv.ParseInt(c.path("webhookId"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "webhook not found")
	}
	return id, nil
}

// webhookRef reads the {webhookId} webhook of a repository the caller
// administers.
func (c *call) webhookRef() (*store.Repository, int64, error) {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return nil, 0, err
	}
	id, err := c.webhookID()
	if err != nil {
		return nil, 0, err
	}
	return r, id, nil
}

func (c *call) getWebhook() error {
	r, id, err := c.webhookRef()
	if err != nil {
		return err
	}
	h, err := c.s.Webhooks.Get(c.ctx, r.ID, id)
	if err != nil {
		return err
	}
	out := webhookOut(h)
	if err := c.withStatistics(h, &out); err != nil {
		return err
	}
	return c.json(out)
}

func (c *call) updateWebhook() error {
	r, id, err := c.webhookRef()
	if err != nil {
		return err
	}
	var in webhookBody
	if err := c.decode(&in, false); err != nil {
		return err
	}
	ch := webhook.Change{Name: in.Name, URL: in.URL, Events: in.Events, Active: in.Active}
	// The masked secret we show is not a new secret: sending back what
	// GET answered keeps the old one.
	if secret, ok := in.Configuration["secret"]; ok && secret != "********" {
		ch.Secret = &secret
	}
	h, err := c.s.Webhooks.Update(c.ctx, r.ID, id, ch)
	if err != nil {
		return err
	}
	return c.json(webhookOut(h))
}

func (c *call) deleteWebhook() error {
	r, id, err := c.webhookRef()
	if err != nil {
		return err
	}
	if err := c.s.Webhooks.Delete(c.ctx, r.ID, id); err != nil {
		return err
	}
	return c.noContent()
}

func (c *call) listDeliveries() error {
	r, id, err := c.webhookRef()
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	ds, err := c.s.Webhooks.Deliveries(c.ctx, r.ID, id, probe(pg))
	if err != nil {
		return err
	}
	type deliveryJSON struct {
		ID          int64  `json:"id"`
		Event       string `json:"event"`
		RequestID   string `json:"requestId"`
		Attempts    int    `json:"attempts"`
		StatusCode  int    `json:"statusCode,omitempty"`
		Error       string `json:"error,omitempty"`
		Delivered   bool   `json:"delivered"`
		CreatedDate int64  `json:"createdDate"`
		UpdatedDate int64  `json:"updatedDate"`
	}
	return c.json(mapPage(newPage(ds, pg), func(d store.WebhookDelivery) deliveryJSON {
		return deliveryJSON{ID: d.ID, Event: d.Event, RequestID: webhook.RequestID(&d), Attempts: d.Attempts, StatusCode: d.StatusCode,
			Error: d.Error, Delivered: d.Delivered, CreatedDate: millis(d.CreatedAt), UpdatedDate: millis(d.UpdatedAt)}
	}))
}

func (c *call) webhookStatistics() error {
	r, id, err := c.webhookRef()
	if err != nil {
		return err
	}
	st, err := c.s.Webhooks.Statistics(c.ctx, r.ID, id, c.query("event"))
	if err != nil {
		return err
	}
	return c.json(st)
}

func (c *call) webhookSummary() error {
	r, id, err := c.webhookRef()
	if err != nil {
		return err
	}
	st, err := c.s.Webhooks.Statistics(c.ctx, r.ID, id, "")
	if err != nil {
		return err
	}
	return c.json(st.Counts)
}

func (c *call) testWebhook() error {
	_, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	url, secret := c.query("url"), ""
	if raw := c.query("webhookId"); raw != "" {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || id <= 0 {
			return problem.New(problem.NotFound, "webhook not found")
		}
		h, err := c.s.Webhooks.Get(c.ctx, r.ID, id)
		if err != nil {
			return err
		}
		secret = h.Secret
		if url == "" {
			url = h.URL
		}
	}
	if url == "" {
		return problem.New(problem.Invalid, "the url query parameter or a webhookId is required")
	}
	res, err := c.s.Webhooks.Test(c.ctx, url, secret)
	if err != nil {
		return err
	}
	return c.json(res)
}
