-- Initial schema. See the package doc of internal/store for the rules every
-- later migration follows (expand/contract, no destructive change while the
-- previous release may still be running).
--
-- SQLite twin of ../postgres/00001_init.sql. AUTOINCREMENT because ids must
-- never be reused: a repository's directory derives from its id alone, and a
-- revoked token or deleted key must not hand its id to a new one.

-- +goose Up
CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT NOT NULL,
    -- name_key is strings.ToLower(name), computed by the store so both
    -- dialects fold case the same way (SQLite's lower() is ASCII only).
    name_key      TEXT NOT NULL UNIQUE,
    display_name  TEXT NOT NULL DEFAULT '',
    email         TEXT NOT NULL DEFAULT '',
    password_hash TEXT NOT NULL DEFAULT '',
    active        BOOLEAN NOT NULL DEFAULT TRUE,
    created_at    TIMESTAMP NOT NULL
);

CREATE TABLE groups (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    name     TEXT NOT NULL,
    name_key TEXT NOT NULL UNIQUE
);

CREATE TABLE group_members (
    group_id BIGINT NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    user_id  BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members (user_id);

CREATE TABLE projects (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    key         TEXT NOT NULL UNIQUE, -- always upper case
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    public      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  TIMESTAMP NOT NULL
);

CREATE TABLE repositories (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    -- RESTRICT: a project is deleted only once it is empty.
    project_id      BIGINT NOT NULL REFERENCES projects (id) ON DELETE RESTRICT,
    slug            TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    public          BOOLEAN NOT NULL DEFAULT FALSE,
    default_branch  TEXT NOT NULL DEFAULT 'main',
    fork_of         BIGINT REFERENCES repositories (id) ON DELETE SET NULL,
    refs_generation BIGINT NOT NULL DEFAULT 0,
    created_at      TIMESTAMP NOT NULL,
    pushed_at       TIMESTAMP,
    UNIQUE (project_id, slug)
);
CREATE INDEX repositories_fork_of ON repositories (fork_of);

-- Grants: exactly one of user_id and group_id is set; one grant per grantee
-- and resource, enforced by the partial unique indexes the store's upserts
-- name in ON CONFLICT.
CREATE TABLE global_permissions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    BIGINT REFERENCES users (id) ON DELETE CASCADE,
    group_id   BIGINT REFERENCES groups (id) ON DELETE CASCADE,
    permission TEXT NOT NULL,
    CHECK ((user_id IS NULL) <> (group_id IS NULL))
);
CREATE UNIQUE INDEX global_permissions_user ON global_permissions (user_id) WHERE user_id IS NOT NULL;
CREATE UNIQUE INDEX global_permissions_group ON global_permissions (group_id) WHERE group_id IS NOT NULL;

CREATE TABLE project_permissions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id BIGINT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id    BIGINT REFERENCES users (id) ON DELETE CASCADE,
    group_id   BIGINT REFERENCES groups (id) ON DELETE CASCADE,
    permission TEXT NOT NULL,
    CHECK ((user_id IS NULL) <> (group_id IS NULL))
);
CREATE UNIQUE INDEX project_permissions_user ON project_permissions (project_id, user_id) WHERE user_id IS NOT NULL;
CREATE UNIQUE INDEX project_permissions_group ON project_permissions (project_id, group_id) WHERE group_id IS NOT NULL;

CREATE TABLE repo_permissions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id    BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    user_id    BIGINT REFERENCES users (id) ON DELETE CASCADE,
    group_id   BIGINT REFERENCES groups (id) ON DELETE CASCADE,
    permission TEXT NOT NULL,
    CHECK ((user_id IS NULL) <> (group_id IS NULL))
);
CREATE UNIQUE INDEX repo_permissions_user ON repo_permissions (repo_id, user_id) WHERE user_id IS NOT NULL;
CREATE UNIQUE INDEX repo_permissions_group ON repo_permissions (repo_id, group_id) WHERE group_id IS NOT NULL;

CREATE TABLE tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    hash         BLOB NOT NULL UNIQUE,
    scope        TEXT NOT NULL,
    created_at   TIMESTAMP NOT NULL,
    expires_at   TIMESTAMP,
    last_used_at TIMESTAMP,
    revoked_at   TIMESTAMP
);
CREATE INDEX tokens_user ON tokens (user_id);

-- A user key (user_id set) or an access key bound to one repository
-- (repo_id set).
CREATE TABLE ssh_keys (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      BIGINT REFERENCES users (id) ON DELETE CASCADE,
    repo_id      BIGINT REFERENCES repositories (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL DEFAULT '',
    label        TEXT NOT NULL DEFAULT '',
    public_key   TEXT NOT NULL,
    fingerprint  TEXT NOT NULL UNIQUE,
    created_at   TIMESTAMP NOT NULL,
    last_used_at TIMESTAMP,
    CHECK ((user_id IS NULL) <> (repo_id IS NULL))
);
CREATE INDEX ssh_keys_user ON ssh_keys (user_id);
CREATE INDEX ssh_keys_repo ON ssh_keys (repo_id);

CREATE TABLE ref_txns (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id    BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    node_id    TEXT NOT NULL,
    updates    TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX ref_txns_repo ON ref_txns (repo_id);
CREATE INDEX ref_txns_node ON ref_txns (node_id);

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- +goose Down
DROP TABLE settings;
DROP TABLE ref_txns;
DROP TABLE ssh_keys;
DROP TABLE tokens;
DROP TABLE repo_permissions;
DROP TABLE project_permissions;
DROP TABLE global_permissions;
DROP TABLE repositories;
DROP TABLE projects;
DROP TABLE group_members;
DROP TABLE groups;
DROP TABLE users;
