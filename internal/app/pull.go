package app

import (
	"fmt"

	"github.com/sluice-scm/sluice/internal/pull"
	"github.com/sluice-scm/sluice/internal/repo"
)

// newPulls builds the pull request service. It registers its job handlers,
// so it must run before the job queue is first used, and it installs the
// branch permission policy in the hooks server.
func (a *App) newPulls() error {
	cfg := a.Config
	p, err := pull.New(pull.Deps{
		Store:         a.Store,
		Pulls:         a.DB,
		Notifications: a.DB,
		Auth:          a.Auth,
		Repos:         a.Repos,
		Git:           a.Git,
		Hooks:         a.Hooks,
		Jobs:          a.Jobs,
		Logger:        a.Logger,
		Registerer:    a.Registry,
		Config: pull.Config{
			WebhookAllow: cfg.WebhookAllow(),
			PushLimits:   repo.PushLimits{MaxBlobSize: int64(cfg.Git.MaxBlobSize), MaxTreeDepth: cfg.Git.MaxTreeDepth},
			SMTP: pull.SMTPConfig{
				Host:     cfg.SMTP.Host,
				Port:     cfg.SMTP.Port,
				From:     cfg.SMTP.From,
				Username: cfg.SMTP.Username,
				Password: cfg.SMTP.Password,
				BaseURL:  cfg.Server.BaseURL,
			},
		},
	})
	if err != nil {
		return fmt.Errorf("pull requests: %w", err)
	}
	a.Pulls = p
	return nil
}
