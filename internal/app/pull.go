package app

import (
	"fmt"

	"github.com/sluice-scm/sluice/internal/branchperm"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/notify"
	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/webhook"
)

// newPulls builds the webhooks, branch permissions, notifications and the
// pull request service. Webhooks, notify and pull register job handlers,
// so this must run before the job queue is first used; none of them
// registers anything on the hooks server (pushes.go does).
func (a *App) newPulls() error {
	cfg := a.Config
	hooks, err := webhook.New(webhook.Deps{
		Store: a.DB,
		Jobs:  a.Jobs,
		// Payload links carry the bound address, known after Listen.
		Entities: func() *entity.Renderer {
			return &entity.Renderer{BaseURL: a.BaseURL(), SSHBaseURL: a.SSHBaseURL(), Markdown: pull.RenderMarkdown}
		},
		Logger:     a.Logger,
		Registerer: a.Registry,
		Config:     webhook.Config{Allow: cfg.WebhookAllow()},
	})
	if err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	a.Webhooks = hooks
	a.closers = append(a.closers, func() error { hooks.Close(); return nil })

	a.BranchPerms = branchperm.New(branchperm.Deps{Store: a.Store, Restrictions: a.DB, Repos: a.Repos, Git: a.Git, Logger: a.Logger})
	a.Notify = notify.New(notify.Deps{
		Store:         a.Store,
		Pulls:         a.DB,
		Notifications: a.DB,
		Auth:          a.Auth,
		Jobs:          a.Jobs,
		Logger:        a.Logger,
		SMTP: notify.SMTPConfig{
			Host:     cfg.SMTP.Host,
			Port:     cfg.SMTP.Port,
			From:     cfg.SMTP.From,
			Username: cfg.SMTP.Username,
			Password: cfg.SMTP.Password,
			BaseURL:  cfg.Server.BaseURL,
		},
	})
	p, err := pull.New(pull.Deps{
		Store:       a.Store,
		Pulls:       a.DB,
		Auth:        a.Auth,
		Repos:       a.Repos,
		Git:         a.Git,
		Hooks:       a.Hooks,
		Jobs:        a.Jobs,
		Webhooks:    hooks,
		Notifier:    a.Notify,
		BranchPerms: a.BranchPerms,
		Logger:      a.Logger,
		Registerer:  a.Registry,
	})
	if err != nil {
		return fmt.Errorf("pull requests: %w", err)
	}
	a.Pulls = p
	return nil
}
