-- Web UI sessions (internal/web). Expand-only: a new table older releases
-- never read. Stored in the database, not in a node's memory, so that any
-- node behind the load balancer serves a signed-in browser.
--
-- Only the SHA-256 of the session id is kept: a leaked database backup
-- does not let anyone take over a session. csrf is the per-session token
-- every web form carries.

-- +goose Up
CREATE TABLE web_sessions (
    hash         BYTEA PRIMARY KEY,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf         TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    last_seen_at TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX web_sessions_user ON web_sessions (user_id);
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);

-- +goose Down
DROP TABLE web_sessions;
