package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// The refs generation is what the pack cache keys on: every change to a
// repository's refs bumps it, in the same database transaction that
// records or forgets the ref transaction, before git tells the client
// "ok". Each bump is an UPDATE … SET refs_generation = refs_generation + 1,
// so concurrent bumps serialise on the row lock and none is lost.

// RepoState reads the generation and the pending transaction count in one
// statement, so both come from one snapshot.
func (d *DB) RepoState(ctx context.Context, repoID int64) (RepoState, error) {
	var s RepoState
	err := d.queryRow(ctx, `SELECT r.refs_generation, (SELECT count(*) FROM ref_txns t WHERE t.repo_id = r.id)
		FROM repositories r WHERE r.id = ?`, repoID).Scan(&s.Generation, &s.Pending)
	if err != nil {
		return RepoState{}, d.notFound(err, "repo state", "repository not found")
	}
	return s, nil
}

// BeginRefTxn records a prepared ref transaction, by the process instance
// of node nodeID, and bumps the generation in one database transaction.
func (d *DB) BeginRefTxn(ctx context.Context, repoID int64, nodeID, instance, updates string) (int64, error) {
	var id int64
	err := d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, d.q("UPDATE repositories SET refs_generation = refs_generation + 1 WHERE id = ?"), repoID)
		if err := d.mustAffect(res, err, "begin ref txn", "repository not found"); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, d.q("INSERT INTO ref_txns (repo_id, node_id, instance, updates, created_at) VALUES (?, ?, ?, ?, ?) RETURNING id"),
			repoID, nodeID, instance, updates, now()).Scan(&id)
	})
	if err != nil {
		return 0, d.fail(err, "begin ref txn")
	}
	return id, nil
}

// EndRefTxn forgets the transaction and bumps the generation in one
// database transaction; committed also stamps the repository's pushed_at.
func (d *DB) EndRefTxn(ctx context.Context, txnID int64, committed bool) error {
	err := d.tx(ctx, func(tx *sql.Tx) error {
		var repoID int64
		err := tx.QueryRowContext(ctx, d.q("DELETE FROM ref_txns WHERE id = ? RETURNING repo_id"), txnID).Scan(&repoID)
		if errors.Is(err, sql.ErrNoRows) {
			return problem.New(problem.NotFound, "ref transaction not found")
		}
		if err != nil {
			return err
		}
		var res sql.Result
		if committed {
			res, err = tx.ExecContext(ctx, d.q("UPDATE repositories SET refs_generation = refs_generation + 1, pushed_at = ? WHERE id = ?"), now(), repoID)
		} else {
			res, err = tx.ExecContext(ctx, d.q("UPDATE repositories SET refs_generation = refs_generation + 1 WHERE id = ?"), repoID)
		}
		return d.mustAffect(res, err, "end ref txn", "repository not found")
	})
	return d.fail(err, "end ref txn")
}

// BumpGeneration bumps the generation with one UPDATE.
func (d *DB) BumpGeneration(ctx context.Context, repoID int64) error {
	res, err := d.exec(ctx, "UPDATE repositories SET refs_generation = refs_generation + 1 WHERE id = ?", repoID)
	return d.mustAffect(res, err, "bump generation", "repository not found")
}

// PendingRefTxns lists nodeID's unfinished transactions ("" for every
// node's), oldest first.
func (d *DB) PendingRefTxns(ctx context.Context, nodeID string) ([]RefTxn, error) {
	const cols = "SELECT id, repo_id, node_id, instance, claimed_by, updates, created_at FROM ref_txns "
	var (
		rows *sql.Rows
		err  error
	)
	if nodeID == "" {
		rows, err = d.query(ctx, cols+"ORDER BY id")
	} else {
		rows, err = d.query(ctx, cols+"WHERE node_id = ? ORDER BY id", nodeID)
	}
	if err != nil {
		return nil, d.fail(err, "pending ref txns")
	}
	return collect(rows, d, "pending ref txns", func(sc interface{ Scan(...any) error }, t *RefTxn) error {
		if err := sc.Scan(&t.ID, &t.RepoID, &t.NodeID, &t.Instance, &t.ClaimedBy, &t.Updates, &t.CreatedAt); err != nil {
			return err
		}
		t.CreatedAt = t.CreatedAt.UTC()
		return nil
	})
}

// ClaimRefTxn takes, for lease, the right to reconcile a pending
// transaction whose recorder is gone: it succeeds when nobody holds the
// claim, claimer holds it already, or the holder's lease ran out (it died
// mid-way), judged by the database's clock. It reports false when another
// reconciler holds it or the transaction has ended.
func (d *DB) ClaimRefTxn(ctx context.Context, txnID int64, claimer string, lease time.Duration) (bool, error) {
	if claimer == "" {
		return false, problem.New(problem.Invalid, "claimer must not be empty")
	}
	res, err := d.exec(ctx, "UPDATE ref_txns SET claimed_by = ?, claimed_at = "+d.dbNow()+
		" WHERE id = ? AND (claimed_by = '' OR claimed_by = ? OR claimed_at IS NULL OR "+
		d.epoch("'now'")+" - "+d.epoch("claimed_at")+" > ?)",
		claimer, txnID, claimer, lease.Seconds())
	if err != nil {
		return false, d.fail(err, "claim ref txn")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, d.fail(err, "claim ref txn")
	}
	return n == 1, nil
}
