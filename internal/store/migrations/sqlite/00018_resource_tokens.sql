-- HTTP access tokens of a project or a repository (issue 15 item 7): the
-- credentials CI uses, which belong to the resource and not to a user.
--
-- Exactly one of project_id and repo_id is set; the token dies with its
-- resource (ON DELETE CASCADE). project_scope and repo_scope are read,
-- write, admin or '' (none); a repository token has no project scope.
-- created_by names who created the token, for the listing only, and is
-- cleared when that user is deleted: the token does not act as them.
-- Only the SHA-256 of the secret is stored.
--
-- Expand-only: a new table, which older releases never read.
--
-- Twin of ../postgres/00018_resource_tokens.sql.

-- +goose Up
CREATE TABLE resource_tokens (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id    BIGINT REFERENCES projects (id) ON DELETE CASCADE,
    repo_id       BIGINT REFERENCES repositories (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    hash          BLOB NOT NULL UNIQUE,
    project_scope TEXT NOT NULL,
    repo_scope    TEXT NOT NULL,
    created_by    BIGINT REFERENCES users (id) ON DELETE SET NULL,
    created_at    TIMESTAMP NOT NULL,
    expires_at    TIMESTAMP,
    last_used_at  TIMESTAMP,
    CHECK ((project_id IS NULL) <> (repo_id IS NULL))
);
CREATE INDEX resource_tokens_project ON resource_tokens (project_id);
CREATE INDEX resource_tokens_repo ON resource_tokens (repo_id);

-- +goose Down
DROP TABLE resource_tokens;
