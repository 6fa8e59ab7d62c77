package sshd

import (
	"context"

	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/problem"
)

// msgReadOnly answers a push while the node's database is unavailable. It
// says what is going on and that waiting is the remedy: the push was not
// wrong, and clones and fetches may still work (from the pack cache).
const msgReadOnly = "read-only: the database is unavailable; pushes are refused until it returns"

// refuseWhileReadOnly refuses a push before anything else happens when
// Config.ReadOnly says the database is away. Without it a push on a
// read-only node would fail somewhere inside (its key cannot be checked,
// its repository not resolved, its ref update not recorded) with a
// message about that step, not about the outage. The refusal is
// Unavailable, so the exit status is 75 (EX_TEMPFAIL): the same push
// succeeds once the database returns.
func (s *Server) refuseWhileReadOnly(ctx context.Context, service string) error {
	if service != hosting.ReceivePack || s.cfg.ReadOnly == nil || !s.cfg.ReadOnly(ctx) {
		return nil
	}
	return problem.New(problem.Unavailable, msgReadOnly)
}
