-- Git processes that may move refs or receive objects, recorded while they
-- run (issue 21: crash consistency).
--
-- git takes a push's ref locks and fills its quarantine before the
-- reference-transaction hook records anything (ref_txns), so a node that
-- dies in that window leaves files no record names. A row here is written
-- when a git process is registered with the node's hook server, before git
-- starts, and deleted when it exits; a row whose instance is dead tells a
-- live node which repository may hold such leftovers, and the start times
-- of the live rows bound which leftovers a live git could still own.
--
-- No foreign key: the row lives for one git process, and a repository
-- deleted meanwhile only leaves a row the reconciler drops. The primary key
-- is the only index: the table holds the git processes running now, and is
-- read whole.
--
-- Expand-only: a new table, which older releases never read.
--
-- Twin of ../postgres/00017_git_runs.sql.

-- +goose Up
CREATE TABLE git_runs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id    BIGINT NOT NULL,
    node_id    TEXT NOT NULL,
    instance   TEXT NOT NULL,
    started_at TIMESTAMP NOT NULL
);

-- +goose Down
DROP TABLE git_runs;
