package store

import (
	"context"
	"math"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// The node registry of internal/cluster. Every time here comes from the
// database's clock and liveness is decided in SQL against that same clock:
// a node whose own clock runs fast or slow still looks exactly as alive as
// its last heartbeat says. Times travel as Unix epoch seconds (float) so
// both dialects return them without depending on how a driver parses its
// timestamp text.

// Node is one registered cluster node.
type Node struct {
	ID string
	// Instance is the random id of the process that registered the row;
	// a node that restarts registers under a new one.
	Instance   string
	Address    string // HTTP address other parts of the cluster reach it by
	SSHAddress string // "" when SSH is off
	Version    string
	StartedAt  time.Time
	// HeartbeatAt is the last heartbeat, by the database's clock.
	HeartbeatAt time.Time
	// HeartbeatAge is how long ago HeartbeatAt was when listed, again by
	// the database's clock.
	HeartbeatAge time.Duration
	// Live is false when the node has not heart-beaten within the goneAfter
	// the listing was asked with.
	Live bool
}

// dbNow is the dialect's current time as a value to store.
func (d *DB) dbNow() string {
	if d.dialect == "postgres" {
		return "now()"
	}
	// Millisecond precision; CURRENT_TIMESTAMP would round to seconds.
	return "strftime('%Y-%m-%d %H:%M:%f', 'now')"
}

// epoch is col (or 'now') as Unix seconds in the dialect.
func (d *DB) epoch(col string) string {
	if d.dialect == "postgres" {
		if col == "'now'" {
			col = "now()"
		}
		return "EXTRACT(EPOCH FROM " + col + ")::float8"
	}
	// 2440587.5 is the Julian day of the Unix epoch.
	return "((julianday(" + col + ") - 2440587.5) * 86400.0)"
}

func epochTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(math.Round(frac*1e6))*1e3).UTC()
}

// RegisterNode records n as started now under instance, replacing an
// earlier registration of the same id (a node restarting).
func (d *DB) RegisterNode(ctx context.Context, n Node, instance string) error {
	if n.ID == "" || instance == "" {
		return problem.New(problem.Invalid, "node id and instance must not be empty")
	}
	now := d.dbNow()
	_, err := d.exec(ctx, `INSERT INTO nodes (id, instance, address, ssh_address, version, started_at, heartbeat_at)
		VALUES (?, ?, ?, ?, ?, `+now+`, `+now+`)
		ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, address = excluded.address,
			ssh_address = excluded.ssh_address, version = excluded.version,
			started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
		n.ID, instance, n.Address, n.SSHAddress, n.Version)
	return d.fail(err, "register node")
}

// HeartbeatNode refreshes the heartbeat of node id registered by instance.
// It reports false when there is no such row: the registration was pruned,
// or another process took the id over.
func (d *DB) HeartbeatNode(ctx context.Context, id, instance string) (bool, error) {
	res, err := d.exec(ctx, "UPDATE nodes SET heartbeat_at = "+d.dbNow()+" WHERE id = ? AND instance = ?", id, instance)
	if err != nil {
		return false, d.fail(err, "heartbeat node")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, d.fail(err, "heartbeat node")
	}
	return n == 1, nil
}

// DeregisterNode removes node id if instance still owns it.
func (d *DB) DeregisterNode(ctx context.Context, id, instance string) error {
	_, err := d.exec(ctx, "DELETE FROM nodes WHERE id = ? AND instance = ?", id, instance)
	return d.fail(err, "deregister node")
}

// NodeByID returns a node's registration, judged with goneAfter.
func (d *DB) NodeByID(ctx context.Context, id string, goneAfter time.Duration) (*Node, error) {
	nodes, err := d.listNodes(ctx, goneAfter, "WHERE id = ?", id)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, problem.New(problem.NotFound, "node %q not found", id)
	}
	return &nodes[0], nil
}

// ListNodes lists every registered node by id. A node is live when its
// last heartbeat is less than goneAfter old by the database's clock.
func (d *DB) ListNodes(ctx context.Context, goneAfter time.Duration) ([]Node, error) {
	return d.listNodes(ctx, goneAfter, "")
}

func (d *DB) listNodes(ctx context.Context, goneAfter time.Duration, where string, args ...any) ([]Node, error) {
	age := "(" + d.epoch("'now'") + " - " + d.epoch("heartbeat_at") + ")"
	rows, err := d.query(ctx, `SELECT id, instance, address, ssh_address, version, `+d.epoch("started_at")+`, `+d.epoch("heartbeat_at")+`,
		`+age+`, CASE WHEN `+age+` < ? THEN 1 ELSE 0 END
		FROM nodes `+where+` ORDER BY id`, append([]any{goneAfter.Seconds()}, args...)...)
	if err != nil {
		return nil, d.fail(err, "list nodes")
	}
	return collect(rows, d, "list nodes", func(sc interface{ Scan(...any) error }, n *Node) error {
		var started, beat, ageSec float64
		var live int
		if err := sc.Scan(&n.ID, &n.Instance, &n.Address, &n.SSHAddress, &n.Version, &started, &beat, &ageSec, &live); err != nil {
			return err
		}
		n.StartedAt, n.HeartbeatAt = epochTime(started), epochTime(beat)
		n.HeartbeatAge = time.Duration(max(ageSec, 0) * float64(time.Second))
		n.Live = live == 1
		return nil
	})
}

// PruneNodes forgets nodes that have not heart-beaten for olderThan, so the
// registry does not list every node that ever existed.
func (d *DB) PruneNodes(ctx context.Context, olderThan time.Duration) (int, error) {
	res, err := d.exec(ctx, "DELETE FROM nodes WHERE "+d.epoch("'now'")+" - "+d.epoch("heartbeat_at")+" > ?", olderThan.Seconds())
	if err != nil {
		return 0, d.fail(err, "prune nodes")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, d.fail(err, "prune nodes")
	}
	return int(n), nil
}
