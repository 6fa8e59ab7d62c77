package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/cluster"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// Cluster wiring (see internal/cluster): the SQLite single-server guard,
// the event bus and what travels on it, the node registry, and the
// cluster-wide sweep of stale leftovers. New calls newCluster, Serve calls
// startCluster; stopping is one of the closers Close runs.

// JobClusterSweep is the periodic job that looks through every repository
// for leftovers of crashed processes (stale lock files, quarantine
// directories, temporary packs) and housekeeps those that have any.
const JobClusterSweep = "cluster-sweep"

// Cluster sweep timing. Leftovers count as stale after an hour, the age
// internal/repo's housekeeping also waits for before it deletes anything;
// sweeping hourly means a stale packed-refs.lock (which blocks every push
// to its repository) is gone at most two hours after its process died.
const (
	clusterSweepEvery = time.Hour
	staleLeftoverAge  = time.Hour
)

// publishTimeout bounds one event publication: events are hints, and a
// push must never wait on a database that hangs to send one.
const publishTimeout = 5 * time.Second

type clusterParts struct {
	lock     *cluster.ServerLock
	bus      cluster.Bus
	pgBus    *cluster.PGBus // nil on SQLite
	mu       sync.Mutex
	registry *cluster.Registry // set by startCluster
	pending  sync.WaitGroup    // publications in flight
}

// newCluster takes the SQLite server lock, builds the event bus and
// connects it, and registers the sweep job. It runs for servers only: the
// admin CLI neither locks nor listens.
func (a *App) newCluster() error {
	cl := &clusterParts{}
	a.cluster = cl
	a.closers = append(a.closers, a.stopCluster)
	if a.Store.Dialect() == "sqlite" {
		lock, err := cluster.LockSQLite(strings.TrimPrefix(a.Config.Database.URL, "sqlite://"))
		if err != nil {
			return err
		}
		cl.lock = lock
		if cl.bus, err = cluster.NewLocalBus(a.Logger, a.Registry); err != nil {
			return err
		}
	} else {
		pb, err := cluster.NewPGBus(a.DB.Pgx(), a.Logger, a.Registry)
		if err != nil {
			return err
		}
		cl.bus, cl.pgBus = pb, pb
	}

	// Refs: this node's hooks tell every node. The local cache is already
	// invalidated directly (New); the event reaches the others.
	a.Hooks.OnRefsChanged(func(repoID int64, _ []hooks.RefUpdate) {
		a.publish(cluster.TopicRefs, strconv.FormatInt(repoID, 10))
	})
	cl.bus.Subscribe(cluster.TopicRefs, func(payload []byte) {
		id, err := strconv.ParseInt(string(payload), 10, 64)
		if err != nil || id <= 0 {
			a.Logger.Warn("malformed refs event", "component", "cluster", "payload", string(payload))
			return
		}
		// a.Cache is set later in New, before any event can arrive
		// (the bus starts listening in Serve).
		if a.Cache != nil {
			a.Cache.Invalidate(id)
		}
	})
	// Settings: another node changed them; re-read now rather than at
	// the next poll. a.Throttle is set later in New, before the bus
	// starts listening in Serve.
	cl.bus.Subscribe(cluster.TopicSettings, func(payload []byte) {
		if string(payload) == throttle.SettingRateLimits && a.Throttle != nil {
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			defer cancel()
			a.Throttle.Reload(ctx)
		}
	})
	// PostgreSQL ends every session of a node when it restarts or fails
	// over; the bus hears it first, and the store then checks each pooled
	// session before reusing it instead of failing a request on each.
	cl.bus.OnLost(a.DB.ConnectionsSuspect)
	cl.bus.OnResync(func() {
		if a.Throttle != nil {
			// Settings events may have been missed too.
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			defer cancel()
			a.Throttle.Reload(ctx)
		}
		// The pack cache keys every entry on the refs generation read
		// from the database, so a missed refs event never makes it serve
		// stale data; entries of moved repositories merely stay on disk
		// until their TTL or the byte budget evicts them.
		a.Logger.Info("event bus resynchronised; pack cache entries of missed ref changes age out by TTL", "component", "cluster")
	})

	a.Jobs.Handle(JobClusterSweep, func(ctx context.Context, _ json.RawMessage) error { return a.sweepLeftovers(ctx) },
		jobs.Timeout(housekeepingTimeout(a.Config)))
	a.Jobs.Periodic(JobClusterSweep, clusterSweepEvery, map[string]any{})
	return nil
}

// publish sends an event in the background; failures are logged only.
func (a *App) publish(topic, payload string) {
	cl := a.cluster
	cl.pending.Add(1)
	go func() {
		defer cl.pending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		if err := cl.bus.Publish(ctx, topic, []byte(payload)); err != nil {
			a.Logger.Warn("publish cluster event", "component", "cluster", "topic", topic, "err", err)
		}
	}()
}

// PublishSettingChanged tells every node that the named setting changed,
// so they re-read it instead of waiting for their next poll.
func (a *App) PublishSettingChanged(name string) { a.publish(cluster.TopicSettings, name) }

// Bus is the node's event bus (nil for the admin CLI).
func (a *App) Bus() cluster.Bus {
	if a.cluster == nil {
		return nil
	}
	return a.cluster.bus
}

// startCluster registers the node (its addresses are known once bound)
// and starts the bus's listener.
func (a *App) startCluster(ctx context.Context) error {
	cl := a.cluster
	if cl == nil {
		return nil
	}
	// The id New chose, not one derived again from the bound address: the
	// job queue and the hooks already record it, and the job rescue takes
	// a running job whose node id the registry does not list as live for
	// an orphan.
	reg, err := cluster.NewRegistry(a.DB, cluster.Config{
		NodeID:     a.nodeID,
		Address:    a.HTTPAddr(),
		SSHAddress: a.SSHAddr(),
		Version:    Version,
		Instance:   a.instance,
	}, a.Logger, a.Registry)
	if err != nil {
		return err
	}
	if err := reg.Start(ctx); err != nil {
		return err
	}
	cl.mu.Lock()
	cl.registry = reg
	cl.mu.Unlock()
	if cl.pgBus != nil {
		return cl.pgBus.Start(ctx)
	}
	return nil
}

// stopCluster deregisters the node, stops the bus and releases the SQLite
// lock, in that order: the lock goes last so that no second server starts
// while this one still writes.
func (a *App) stopCluster() error {
	cl := a.cluster
	var errs []error
	cl.mu.Lock()
	reg := cl.registry
	cl.registry = nil
	cl.mu.Unlock()
	if reg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, reg.Stop(ctx))
		cancel()
	}
	cl.pending.Wait()
	if cl.pgBus != nil {
		errs = append(errs, cl.pgBus.Close())
	}
	errs = append(errs, cl.lock.Release())
	return errors.Join(errs...)
}

// liveNodes is the ids of the nodes whose heartbeat is current; the job
// queue puts the running jobs of any other node back in the queue.
func (a *App) liveNodes(ctx context.Context) (map[string]bool, error) {
	nodes, err := a.DB.ListNodes(ctx, cluster.DefaultGoneAfter)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		live[n.ID] = n.Live
	}
	return live, nil
}

// ClusterNodes lists the registered nodes (live and gone), for the admin
// API and CLI.
func (a *App) ClusterNodes(ctx context.Context) ([]store.Node, error) {
	return a.DB.ListNodes(ctx, cluster.DefaultGoneAfter)
}

// clusterStatus is what the REST API's cluster endpoint reads.
type clusterStatus struct{ a *App }

func (c clusterStatus) ClusterNodes(ctx context.Context) ([]store.Node, string, error) {
	nodes, err := c.a.ClusterNodes(ctx)
	self := ""
	c.a.cluster.mu.Lock()
	if c.a.cluster.registry != nil {
		self = c.a.cluster.registry.NodeID()
	}
	c.a.cluster.mu.Unlock()
	return nodes, self, err
}

// sweepLeftovers housekeeps every repository holding leftovers older than
// staleLeftoverAge. Housekeeping removes them (and only those old enough);
// looking first keeps the sweep to a few directory reads per repository.
func (a *App) sweepLeftovers(ctx context.Context) error {
	const page = 500
	swept := 0
	for start := 0; ; start += page {
		repos, err := a.Store.ListAllRepos(ctx, "", store.Page{Start: start, Limit: page})
		if err != nil {
			return fmt.Errorf("list repositories: %w", err)
		}
		now := time.Now()
		for _, r := range repos {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !staleLeftovers(a.Repos.Path(r.ID), now) {
				continue
			}
			if err := a.Repos.Housekeep(ctx, r.ID); err != nil {
				a.Logger.Warn("sweep: housekeeping failed", "component", "cluster", "repo_id", r.ID, "err", err)
				continue
			}
			swept++
		}
		if len(repos) < page {
			break
		}
	}
	if swept > 0 {
		a.Logger.Info("sweep: removed leftovers of crashed processes", "component", "cluster", "repositories", swept)
	}
	return nil
}

// staleLeftovers reports whether the repository at dir has lock files,
// push quarantine directories or temporary packs older than
// staleLeftoverAge: the places internal/repo's housekeeping cleans.
func staleLeftovers(dir string, now time.Time) bool {
	old := func(fi fs.FileInfo) bool { return now.Sub(fi.ModTime()) >= staleLeftoverAge }
	scan := func(sub string, match func(fs.DirEntry) bool) bool {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return false
		}
		for _, e := range entries {
			if !match(e) {
				continue
			}
			if fi, err := e.Info(); err == nil && old(fi) {
				return true
			}
		}
		return false
	}
	isLock := func(e fs.DirEntry) bool { return e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".lock") }
	for _, sub := range []string{".", "objects/info", "objects/info/commit-graphs", "objects/pack"} {
		if scan(sub, isLock) {
			return true
		}
	}
	if scan("objects/pack", func(e fs.DirEntry) bool { return e.Type().IsRegular() && strings.HasPrefix(e.Name(), "tmp_") }) {
		return true
	}
	// A quarantine's top directory is old once nothing was created in it
	// for the hour; housekeeping then checks the newest file inside.
	if scan("objects", func(e fs.DirEntry) bool {
		return e.IsDir() && (strings.HasPrefix(e.Name(), "tmp_objdir-") || strings.HasPrefix(e.Name(), "incoming-"))
	}) {
		return true
	}
	found := false
	// WalkDir does not follow symlinks: the walk stays in the repository.
	filepath.WalkDir(filepath.Join(dir, "refs"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return nil
		}
		if isLock(d) {
			if fi, err := d.Info(); err == nil && old(fi) {
				found = true
				return fs.SkipAll
			}
		}
		return nil
	})
	return found
}

// testHoldEnv is fault injection for tests only (e2e/cluster, through
// internal/testbed): it names a directory, and testPhaseHold holds git
// inside a reference-transaction phase when the test asks. It has no
// SLUICE_ prefix because it is not a configuration key (config refuses
// unknown SLUICE_ variables); production never sets it, and then the hook
// is nil and costs nothing.
const testHoldEnv = "SLUICETEST_PHASE_HOLD_DIR"

// testHoldMax bounds one hold, so a test that never kills the node still
// ends.
const testHoldMax = time.Minute

// testPhaseHold is hooks.Config.TestPhaseHook when testHoldEnv is set,
// nil otherwise. A reference-transaction call in phase P (prepared,
// committed, aborted) of repository R for which the file "P-R" exists in
// the directory removes it, so exactly one call is held, creates
// "held-P-R" and blocks for up to testHoldMax with git's ref locks taken;
// the test kills the node meanwhile. A call still held then fails, as a
// dead node's would.
func testPhaseHold() func(phase string, repoID int64) error {
	dir := os.Getenv(testHoldEnv)
	if dir == "" {
		return nil
	}
	return func(phase string, repoID int64) error {
		name := fmt.Sprintf("%s-%d", phase, repoID)
		if os.Remove(filepath.Join(dir, name)) != nil {
			return nil
		}
		if err := os.WriteFile(filepath.Join(dir, "held-"+name), nil, 0o600); err != nil {
			return fmt.Errorf("test hold: %w", err)
		}
		time.Sleep(testHoldMax)
		return errors.New("sluice: test hold expired")
	}
}
