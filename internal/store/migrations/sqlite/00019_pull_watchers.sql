-- Watchers of a pull request (issue 15 item 6): users who asked to hear
-- of it without being its author or a reviewer. notify adds them to the
-- recipients of the pull request's notifications. A watcher goes with
-- the pull request or the user (ON DELETE CASCADE).
--
-- Expand-only: a new table, which older releases never read.
--
-- Twin of ../postgres/00019_pull_watchers.sql.

-- +goose Up
CREATE TABLE pull_request_watchers (
    pr_id   BIGINT NOT NULL REFERENCES pull_requests (id) ON DELETE CASCADE,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (pr_id, user_id)
);

-- +goose Down
DROP TABLE pull_request_watchers;
