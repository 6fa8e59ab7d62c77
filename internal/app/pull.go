package app

import (
	"fmt"

	"github.com/sluice-scm/sluice/internal/pull"
)

// newPulls builds the pull request service. It registers its job handlers,
// so it must run before the job queue is first used, and it installs the
// branch permission policy in the hooks server.
func (a *App) newPulls() error {
	p, err := pull.New(pull.Deps{
		Store:      a.Store,
		Pulls:      a.DB,
		Repos:      a.Repos,
		Git:        a.Git,
		Hooks:      a.Hooks,
		Jobs:       a.Jobs,
		Logger:     a.Logger,
		Registerer: a.Registry,
	})
	if err != nil {
		return fmt.Errorf("pull requests: %w", err)
	}
	a.Pulls = p
	return nil
}
