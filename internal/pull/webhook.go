package pull

import (
	"context"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// Announcer hears what happens to pull requests: webhook.Service, handed
// in by app. pull says what happened; how a webhook renders and delivers
// it is not its business.
type Announcer interface {
	PullRequest(ctx context.Context, ev webhook.PullEvent)
}

// announce tells the announcer, if there is one, that ev happened to pr.
func (s *Service) announce(ctx context.Context, pr *store.PullRequest, key string, actor *auth.Principal, ev webhook.PullEvent) {
	if s.webhooks == nil {
		return
	}
	ev.Key, ev.PR, ev.Actor = key, pr, actor
	s.webhooks.PullRequest(ctx, ev)
}

// emit announces an event that carries nothing beyond the pull request.
func (s *Service) emit(ctx context.Context, pr *store.PullRequest, key string, actor *auth.Principal) {
	s.announce(ctx, pr, key, actor, webhook.PullEvent{})
}

// Webhooks lists a repository's webhooks (the web settings page).
func (s *Service) Webhooks(ctx context.Context, repoID int64) ([]store.Webhook, error) {
	return s.ps.ListWebhooks(ctx, repoID)
}

// WebhookEvents is webhook.Events, for callers that read it here from
// before webhooks left this package.
var WebhookEvents = webhook.Events
