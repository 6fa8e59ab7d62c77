package api

import (
	"context"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// Throttle is what the admin endpoints show and change of the node's
// admission control; *throttle.Throttle implements it.
type Throttle interface {
	State() throttle.State
	RateLimits() (rl throttle.RateLimits, stored bool)
	SetRateLimits(ctx context.Context, rl throttle.RateLimits) error
}

// sluiceAdminBase holds Sluice's own admin endpoints, which Bitbucket
// does not have.
const sluiceAdminBase = "/rest/sluice/1.0/admin"

// throttleRoutes are the throttling admin endpoints; none without a
// Throttle.
func (s *server) throttleRoutes() []route {
	if s.Throttle == nil {
		return nil
	}
	return []route{
		{Method: "GET", Pattern: sluiceAdminBase + "/throttle", Summary: "Live hosting-ticket, queue and rate-limit state of this node (ADMIN)",
			handle: (*call).throttleState},
		{Method: "GET", Pattern: sluiceAdminBase + "/rate-limits", Summary: "Rate-limit settings in force (ADMIN)",
			handle: (*call).getRateLimits},
		{Method: "PUT", Pattern: sluiceAdminBase + "/rate-limits", Summary: "Replace the rate-limit settings; every node applies them within seconds (ADMIN)",
			Body: "{enabled, bucket, refill, exemptions: [{user | group | token, unlimited | bucket, refill}]}", handle: (*call).putRateLimits},
	}
}

func (c *call) throttleState() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	return c.json(c.s.Throttle.State())
}

// rateLimitsJSON is the settings document with where it came from.
type rateLimitsJSON struct {
	throttle.RateLimits
	// Stored is false while the config file's defaults apply.
	Stored bool `json:"stored"`
}

func (c *call) getRateLimits() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	rl, stored := c.s.Throttle.RateLimits()
	return c.json(rateLimitsJSON{RateLimits: rl, Stored: stored})
}

func (c *call) putRateLimits() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	// The whole document is replaced; enabled must be said explicitly, so
	// that a body missing it cannot switch rate limiting off by accident.
	var body struct {
		throttle.RateLimits
		Enabled *bool `json:"enabled"`
	}
	if err := c.decode(&body, false); err != nil {
		return err
	}
	if body.Enabled == nil {
		return problem.New(problem.Invalid, "enabled is required")
	}
	rl := body.RateLimits
	rl.Enabled = *body.Enabled
	if err := c.s.Throttle.SetRateLimits(c.ctx, rl); err != nil {
		return err
	}
	rl, stored := c.s.Throttle.RateLimits()
	return c.json(rateLimitsJSON{RateLimits: rl, Stored: stored})
}
