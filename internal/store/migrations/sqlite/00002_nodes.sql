-- Cluster node registry (internal/cluster). Expand-only: a new table that
-- release 00001 never reads, so nodes of both releases run side by side.
--
-- Times are written by the database's clock (strftime('now') here, now() on
-- PostgreSQL), never by a node's, so clock skew between nodes cannot make a
-- live node look gone or a dead one look live. SQLite keeps them as text
-- with millisecond precision, which julianday() reads back.

-- +goose Up
CREATE TABLE nodes (
    id           TEXT PRIMARY KEY,
    -- instance is random per process start: a heartbeat only refreshes the
    -- row its own process registered.
    instance     TEXT NOT NULL,
    address      TEXT NOT NULL DEFAULT '',
    ssh_address  TEXT NOT NULL DEFAULT '',
    version      TEXT NOT NULL DEFAULT '',
    started_at   TIMESTAMP NOT NULL,
    heartbeat_at TIMESTAMP NOT NULL
);

-- +goose Down
DROP TABLE nodes;
