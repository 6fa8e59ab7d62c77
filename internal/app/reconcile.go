package app

import (
	"context"
	"time"

	"github.com/sluice-scm/sluice/internal/cluster"
	"github.com/sluice-scm/sluice/internal/config"
)

// Crash reconciliation wiring (see internal/hooks/reconcile.go): the hooks
// server reconciles at start (New) and every node.reconcile_interval, and
// asks the node registry whether the process that recorded a ref
// transaction still runs.

// processLive is hooks.Config.ProcessLive. Until this node has registered
// (Serve) it judges every other process alive: a node that cannot see the
// registry must not take a live push's lock away.
func (a *App) processLive(ctx context.Context, nodeID, instance string) (bool, error) {
	if a.cluster == nil {
		return true, nil
	}
	a.cluster.mu.Lock()
	reg := a.cluster.registry
	a.cluster.mu.Unlock()
	if reg == nil {
		return true, nil
	}
	return reg.ProcessLive(ctx, nodeID, instance)
}

// reconcileInterval is the background reconciler's period; the admin CLI
// runs none (it serves no git, and a server may be running beside it).
func reconcileInterval(cfg config.Config, admin bool) time.Duration {
	if admin {
		return 0
	}
	return cfg.Node.ReconcileInterval.Duration
}

// newInstance names this process start for the registry and the hooks.
func newInstance() string { return cluster.NewInstance() }
