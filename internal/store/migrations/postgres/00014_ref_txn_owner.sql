-- Who may finish a pending ref transaction (issue 21: crash consistency).
--
-- instance is the random id of the process that recorded the transaction
-- (the one it registered in nodes.instance), so a transaction whose node
-- restarted or is gone is provably abandoned: no git of that process can
-- still be running. claimed_by and claimed_at are a lease taken by the
-- node reconciling an abandoned transaction against the refs on disk, so
-- that of several live nodes one announces it, and another takes over if
-- that one dies before it ends the transaction. claimed_at is written by
-- the database's clock, like the node registry's times.
--
-- Expand-only: rows of older releases have instance '' and are judged by
-- their node id; older releases never read the new columns.

-- +goose Up
ALTER TABLE ref_txns ADD COLUMN instance TEXT NOT NULL DEFAULT '';
ALTER TABLE ref_txns ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
ALTER TABLE ref_txns ADD COLUMN claimed_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE ref_txns DROP COLUMN claimed_at;
ALTER TABLE ref_txns DROP COLUMN claimed_by;
ALTER TABLE ref_txns DROP COLUMN instance;
