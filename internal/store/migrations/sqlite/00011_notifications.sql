-- Notifications (internal/pull): the in-app inbox of each user, and the
-- record of which were emailed. Expand-only: a new table older releases
-- never read.
--
-- dedupe names the event a row comes from ("pr:7:merged",
-- "pr:7:comment:12"); the notify job may run twice for one event (River
-- retries a job that failed half-way), and the unique index makes the
-- second insert a no-op instead of a second inbox entry or email.
--
-- Twin of ../postgres/00011_notifications.sql.

-- +goose Up
CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    dedupe     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    repo_id    BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    pr_id      BIGINT REFERENCES pull_requests (id) ON DELETE CASCADE,
    actor_id   BIGINT REFERENCES users (id) ON DELETE SET NULL,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL DEFAULT '',
    link       TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMP NOT NULL,
    read_at    TIMESTAMP,
    emailed_at TIMESTAMP
);
CREATE UNIQUE INDEX notifications_dedupe ON notifications (user_id, dedupe);
CREATE INDEX notifications_inbox ON notifications (user_id, id);

-- +goose Down
DROP TABLE notifications;
