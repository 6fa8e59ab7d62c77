package webhook

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// memStore is the Store in memory: the payload and delivery tests need
// rows, not SQL (the SQL is store's own suite's business).
type memStore struct {
	mu         sync.Mutex
	users      map[int64]*store.User
	projects   map[int64]*store.Project
	repos      map[int64]*store.Repository
	parts      map[int64][]store.Participant
	hooks      []store.Webhook
	deliveries []store.WebhookDelivery
}

func newMemStore() *memStore {
	return &memStore{users: map[int64]*store.User{}, projects: map[int64]*store.Project{}, repos: map[int64]*store.Repository{},
		parts: map[int64][]store.Participant{}}
}

func (m *memStore) UserByID(_ context.Context, id int64) (*store.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.users[id]; ok {
		c := *u
		return &c, nil
	}
	return nil, problem.New(problem.NotFound, "user not found")
}

func (m *memStore) ProjectByID(_ context.Context, id int64) (*store.Project, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.projects[id]; ok {
		c := *p
		return &c, nil
	}
	return nil, problem.New(problem.NotFound, "project not found")
}

func (m *memStore) RepoByID(_ context.Context, id int64) (*store.Repository, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.repos[id]; ok {
		c := *r
		return &c, nil
	}
	return nil, problem.New(problem.NotFound, "repository not found")
}

func (m *memStore) Participants(_ context.Context, prID int64) ([]store.Participant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.parts[prID]), nil
}

func (m *memStore) CreateWebhook(_ context.Context, h *store.Webhook) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	h.ID = int64(len(m.hooks) + 1)
	h.CreatedAt = time.Now().UTC()
	m.hooks = append(m.hooks, *h)
	return nil
}

func (m *memStore) find(id int64) int {
	return slices.IndexFunc(m.hooks, func(h store.Webhook) bool { return h.ID == id })
}

func (m *memStore) WebhookByID(_ context.Context, id int64) (*store.Webhook, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(id); i >= 0 {
		h := m.hooks[i]
		return &h, nil
	}
	return nil, problem.New(problem.NotFound, "webhook not found")
}

func (m *memStore) ListWebhooks(_ context.Context, repoID int64) ([]store.Webhook, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Webhook
	for _, h := range m.hooks {
		if h.RepoID == repoID {
			out = append(out, h)
		}
	}
	return out, nil
}

func (m *memStore) UpdateWebhook(_ context.Context, h *store.Webhook) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(h.ID); i >= 0 && m.hooks[i].RepoID == h.RepoID {
		m.hooks[i] = *h
		return nil
	}
	return problem.New(problem.NotFound, "webhook not found")
}

func (m *memStore) DeleteWebhook(_ context.Context, repoID, id int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(id); i >= 0 && m.hooks[i].RepoID == repoID {
		m.hooks = slices.Delete(m.hooks, i, i+1)
		return nil
	}
	return problem.New(problem.NotFound, "webhook not found")
}

func (m *memStore) CreateDelivery(_ context.Context, d *store.WebhookDelivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d.ID = int64(len(m.deliveries) + 1)
	d.CreatedAt = time.Now().UTC()
	d.UpdatedAt = d.CreatedAt
	m.deliveries = append(m.deliveries, *d)
	return nil
}

func (m *memStore) DeliveryByID(_ context.Context, id int64) (*store.WebhookDelivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id < 1 || int(id) > len(m.deliveries) {
		return nil, problem.New(problem.NotFound, "delivery not found")
	}
	d := m.deliveries[id-1]
	return &d, nil
}

func (m *memStore) RecordAttempt(_ context.Context, id int64, statusCode int, errText string, delivered bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &m.deliveries[id-1]
	d.Attempts++
	d.StatusCode, d.Error, d.Delivered, d.UpdatedAt = statusCode, errText, delivered, time.Now().UTC()
	return nil
}

func (m *memStore) ListDeliveries(_ context.Context, webhookID int64, p store.Page) ([]store.WebhookDelivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []store.WebhookDelivery
	for i := len(m.deliveries) - 1; i >= 0; i-- {
		if m.deliveries[i].WebhookID == webhookID {
			all = append(all, m.deliveries[i])
		}
	}
	start := min(p.Start, len(all))
	end := len(all)
	if p.Limit > 0 {
		end = min(start+p.Limit, len(all))
	}
	return all[start:end], nil
}

// delivered returns the deliveries recorded so far.
func (m *memStore) recorded() []store.WebhookDelivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deliveries)
}
