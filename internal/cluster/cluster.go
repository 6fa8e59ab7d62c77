// Package cluster is what lets identical Sluice nodes share one PostgreSQL
// database and one repository filesystem: a node registry with heartbeats,
// and an event bus. Nodes never talk to each other directly; everything
// goes through the database, so a node can die, restart or be added without
// any other node knowing its address.
//
// # Registry
//
// Each node upserts a row into the nodes table at start (id, HTTP and SSH
// address, version, start time) and refreshes heartbeat_at every
// HeartbeatInterval (5 s). Both times are written by the database's clock
// (now(), or strftime('now') on SQLite) and a node counts as gone when its
// heartbeat is older than GoneAfter (30 s) — six missed beats, so a GC
// pause or a database failover does not flap it — judged in SQL against
// that same clock. Clock skew between nodes therefore never matters. A
// registration carries a random instance id: a heartbeat refreshes only its
// own process's row, and a node that finds its row gone (pruned, or taken
// over by a process reusing the id) registers again. A clean shutdown
// deletes the row; a killed node's row stays, shown as gone, until
// PruneAfter.
//
// # Event bus
//
// Bus carries small notifications that let nodes drop state early: "refs"
// (a repository's refs changed: payload is its id, so pack caches free the
// now unreachable entries) and "settings" (a setting such as the rate
// limits changed: payload is its name). On PostgreSQL it is LISTEN/NOTIFY
// (PGBus) on one dedicated connection per node; on SQLite, which supports
// only one server, an in-process fan-out (LocalBus). Events are hints, not
// the source of truth: correctness never depends on one arriving (the pack
// cache keys on the refs generation read from the database). NOTIFY is not
// durable, so a node whose listening connection broke may have missed
// events; after every reconnect the bus calls its OnResync callbacks and
// consumers drop what they cannot trust. When its connection drops it calls
// the OnLost callbacks first: PostgreSQL ends every session of a node at
// once (a restart, a failover), and the app has the store check its pooled
// sessions before reusing them. Publishers also receive their own events.
//
// # SQLite guard
//
// SQLite serves one node. LockSQLite takes an exclusive flock on a file
// next to the database for the server's life, so a second `sluice serve`
// on the same database fails at once with a message naming the holder's
// pid, instead of two servers each believing they own the hooks and the
// job queue. The admin CLI does not take it: SQLite's WAL and busy timeout
// let it write beside a running server.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/store"
)

// Registry defaults. GoneAfter is six heartbeats: long enough that a
// stop-the-world pause or a short database failover does not show a node
// as gone, short enough that an operator looking at the status after a
// crash sees it within half a minute.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultGoneAfter         = 30 * time.Second
	// DefaultPruneAfter is how long a gone node stays listed.
	DefaultPruneAfter = 7 * 24 * time.Hour
)

// Topics of the event bus.
const (
	TopicRefs     = "refs"     // payload: repository id, decimal
	TopicSettings = "settings" // payload: setting name
)

// NodeStore is the part of the store the registry uses (*store.DB).
type NodeStore interface {
	RegisterNode(ctx context.Context, n store.Node, instance string) error
	HeartbeatNode(ctx context.Context, id, instance string) (bool, error)
	DeregisterNode(ctx context.Context, id, instance string) error
	ListNodes(ctx context.Context, goneAfter time.Duration) ([]store.Node, error)
	PruneNodes(ctx context.Context, olderThan time.Duration) (int, error)
}

// Config describes this node to the registry.
type Config struct {
	NodeID     string
	Address    string // HTTP host:port
	SSHAddress string // "" when SSH is off
	Version    string
	// Instance identifies this process start; empty means a random one.
	// The app hands the same one to the hooks server, which stamps it on
	// every ref transaction, so ProcessLive can tell whether the process
	// that recorded a transaction still runs.
	Instance string
	// HeartbeatInterval, GoneAfter and PruneAfter default to the
	// Default* constants; tests shorten them.
	HeartbeatInterval time.Duration
	GoneAfter         time.Duration
	PruneAfter        time.Duration
}

// Registry registers this node and keeps its heartbeat going.
type Registry struct {
	st       NodeStore
	cfg      Config
	instance string
	logger   *slog.Logger
	beats    *prometheus.CounterVec

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewRegistry returns a registry for the node cfg describes; Start
// registers it.
func NewRegistry(st NodeStore, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Registry, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("cluster: node id must not be empty")
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.GoneAfter <= 0 {
		cfg.GoneAfter = DefaultGoneAfter
	}
	if cfg.PruneAfter <= 0 {
		cfg.PruneAfter = DefaultPruneAfter
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		cfg.Instance = NewInstance()
	}
	r := &Registry{
		st: st, cfg: cfg, instance: cfg.Instance,
		logger: logger.With("component", "cluster", "node_id", cfg.NodeID),
		beats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_heartbeats_total",
			Help: "Heartbeats this node wrote to the node registry, by outcome (ok, error, reregistered).",
		}, []string{"outcome"}),
	}
	if reg != nil {
		if err := reg.Register(r.beats); err != nil {
			return nil, fmt.Errorf("register cluster metrics: %w", err)
		}
	}
	return r, nil
}

// NewInstance returns a random id for one process start.
func NewInstance() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails (crypto/rand, Go ≥ 1.24)
	return hex.EncodeToString(b)
}

// Instance is this process start's id.
func (r *Registry) Instance() string { return r.instance }

// NodeID is this node's id.
func (r *Registry) NodeID() string { return r.cfg.NodeID }

// GoneAfter is the heartbeat age beyond which a node counts as gone.
func (r *Registry) GoneAfter() time.Duration { return r.cfg.GoneAfter }

// Start registers the node and starts heart-beating until Stop. A database
// that cannot be reached fails Start: a node that cannot register cannot
// serve anyway.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("cluster: registry already started")
	}
	if err := r.register(ctx); err != nil {
		return err
	}
	if n, err := r.st.PruneNodes(ctx, r.cfg.PruneAfter); err != nil {
		r.logger.Warn("prune gone nodes", "err", err)
	} else if n > 0 {
		r.logger.Info("pruned gone nodes", "count", n)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.done = cancel, make(chan struct{})
	go r.heartbeat(bctx)
	return nil
}

func (r *Registry) register(ctx context.Context) error {
	err := r.st.RegisterNode(ctx, store.Node{
		ID: r.cfg.NodeID, Address: r.cfg.Address, SSHAddress: r.cfg.SSHAddress, Version: r.cfg.Version,
	}, r.instance)
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	r.logger.Info("node registered", "address", r.cfg.Address, "ssh_address", r.cfg.SSHAddress, "version", r.cfg.Version)
	return nil
}

func (r *Registry) heartbeat(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// One beat may take at most an interval, so beats never pile up
		// behind a database that hangs.
		bctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatInterval)
		ok, err := r.st.HeartbeatNode(bctx, r.cfg.NodeID, r.instance)
		if err == nil && !ok {
			r.logger.Warn("node registration missing; registering again")
			err = r.register(bctx)
			if err == nil {
				r.beats.WithLabelValues("reregistered").Inc()
			}
		} else if err == nil {
			r.beats.WithLabelValues("ok").Inc()
		}
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			r.beats.WithLabelValues("error").Inc()
			// Log the first failure and the recovery, not every beat of
			// an outage.
			if !failing {
				r.logger.Warn("heartbeat failed", "err", err)
			}
			failing = true
		case err == nil && failing:
			r.logger.Info("heartbeat recovered")
			failing = false
		}
	}
}

// Stop ends the heartbeat and, on a clean shutdown, removes the node's
// registration so it does not linger as gone.
func (r *Registry) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel = nil
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	if err := r.st.DeregisterNode(ctx, r.cfg.NodeID, r.instance); err != nil {
		return fmt.Errorf("deregister node: %w", err)
	}
	r.logger.Info("node deregistered")
	return nil
}

// Nodes lists the cluster's nodes with their state.
func (r *Registry) Nodes(ctx context.Context) ([]store.Node, error) {
	return r.st.ListNodes(ctx, r.cfg.GoneAfter)
}

// ProcessLive reports whether the process start instance of node nodeID
// may still be running: its registration is there, still under instance,
// and heart-beating. A process whose node restarted (the row carries
// another instance), deregistered, or stopped beating for GoneAfter is
// gone, and so is every git process it ran: those were its children and
// die with it, or the ref transactions they held were ended by it. An
// empty instance (records of older releases) is judged by the node id.
func (r *Registry) ProcessLive(ctx context.Context, nodeID, instance string) (bool, error) {
	if instance == r.instance {
		return true, nil
	}
	nodes, err := r.st.ListNodes(ctx, r.cfg.GoneAfter)
	if err != nil {
		return false, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes {
		if (instance != "" && n.Instance == instance) || (instance == "" && n.ID == nodeID) {
			return n.Live, nil
		}
	}
	return false, nil
}

// State names a node's state for humans and the REST API.
func State(n store.Node) string {
	if n.Live {
		return "live"
	}
	return "gone"
}
