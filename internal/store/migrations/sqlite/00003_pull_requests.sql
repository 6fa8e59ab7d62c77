-- Pull requests, their reviews, comments, activity and diff cache; build
-- statuses; branch restrictions; per-repository pull request settings;
-- webhooks and their delivery log. All new tables (expand only).
--
-- SQLite twin of ../postgres/00003_pull_requests.sql.

-- +goose Up
CREATE TABLE pull_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    -- repo_id is the target repository; number is the id users see, counted
    -- per target repository as Bitbucket does.
    repo_id      BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    number       BIGINT NOT NULL,
    from_repo_id BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    from_ref     TEXT NOT NULL,
    from_sha     TEXT NOT NULL,
    to_ref       TEXT NOT NULL,
    to_sha       TEXT NOT NULL,
    base_sha     TEXT NOT NULL DEFAULT '',
    title        TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    state        TEXT NOT NULL,
    author_id    BIGINT REFERENCES users (id) ON DELETE SET NULL,
    version      BIGINT NOT NULL DEFAULT 0,
    -- merge_status is UNKNOWN until the rescope job has tried the merge,
    -- then CLEAN or CONFLICTED (conflicts lists the files, one a line).
    merge_status TEXT NOT NULL DEFAULT 'UNKNOWN',
    conflicts    TEXT NOT NULL DEFAULT '',
    merge_sha    TEXT NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    updated_at   TIMESTAMP NOT NULL,
    closed_at    TIMESTAMP,
    UNIQUE (repo_id, number)
);
CREATE INDEX pull_requests_to ON pull_requests (repo_id, state, to_ref);
CREATE INDEX pull_requests_from ON pull_requests (from_repo_id, state, from_ref);

CREATE TABLE pull_request_participants (
    pr_id      BIGINT NOT NULL REFERENCES pull_requests (id) ON DELETE CASCADE,
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    status     TEXT NOT NULL DEFAULT 'UNAPPROVED',
    PRIMARY KEY (pr_id, user_id)
);

CREATE TABLE pull_request_comments (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    pr_id            BIGINT NOT NULL REFERENCES pull_requests (id) ON DELETE CASCADE,
    parent_id        BIGINT REFERENCES pull_request_comments (id) ON DELETE CASCADE,
    author_id        BIGINT REFERENCES users (id) ON DELETE SET NULL,
    text             TEXT NOT NULL,
    severity         TEXT NOT NULL DEFAULT 'NORMAL',
    state            TEXT NOT NULL DEFAULT 'OPEN',
    version          BIGINT NOT NULL DEFAULT 0,
    -- Inline anchor; anchor_path '' means a general comment.
    anchor_path      TEXT NOT NULL DEFAULT '',
    anchor_line      BIGINT NOT NULL DEFAULT 0,
    anchor_line_type TEXT NOT NULL DEFAULT '',
    anchor_file_type TEXT NOT NULL DEFAULT '',
    anchor_from_sha  TEXT NOT NULL DEFAULT '',
    anchor_to_sha    TEXT NOT NULL DEFAULT '',
    outdated         BOOLEAN NOT NULL DEFAULT FALSE,
    created_at       TIMESTAMP NOT NULL,
    updated_at       TIMESTAMP NOT NULL
);
CREATE INDEX pull_request_comments_pr ON pull_request_comments (pr_id);

CREATE TABLE pull_request_activities (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pr_id      BIGINT NOT NULL REFERENCES pull_requests (id) ON DELETE CASCADE,
    user_id    BIGINT REFERENCES users (id) ON DELETE SET NULL,
    action     TEXT NOT NULL,
    comment_id BIGINT,
    detail     TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX pull_request_activities_pr ON pull_request_activities (pr_id, id);

-- The precomputed diff of a pull request between base_sha and from_sha;
-- only the newest is kept.
CREATE TABLE pull_request_diffs (
    pr_id      BIGINT PRIMARY KEY REFERENCES pull_requests (id) ON DELETE CASCADE,
    base_sha   TEXT NOT NULL,
    from_sha   TEXT NOT NULL,
    stat       TEXT NOT NULL,
    diff       BLOB NOT NULL,
    truncated  BOOLEAN NOT NULL DEFAULT FALSE,
    created_at TIMESTAMP NOT NULL
);

CREATE TABLE build_statuses (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    commit_sha  TEXT NOT NULL,
    key         TEXT NOT NULL,
    state       TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    url         TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    updated_at  TIMESTAMP NOT NULL,
    UNIQUE (commit_sha, key)
);

-- A branch restriction applies to one repository or to every repository of
-- one project: exactly one of repo_id and project_id is set.
CREATE TABLE branch_restrictions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id      BIGINT REFERENCES repositories (id) ON DELETE CASCADE,
    project_id   BIGINT REFERENCES projects (id) ON DELETE CASCADE,
    type         TEXT NOT NULL,
    matcher_type TEXT NOT NULL,
    matcher_id   TEXT NOT NULL,
    user_ids     TEXT NOT NULL DEFAULT '',
    group_ids    TEXT NOT NULL DEFAULT '',
    created_at   TIMESTAMP NOT NULL,
    CHECK ((repo_id IS NULL) <> (project_id IS NULL))
);
CREATE INDEX branch_restrictions_repo ON branch_restrictions (repo_id);
CREATE INDEX branch_restrictions_project ON branch_restrictions (project_id);

-- Merge strategy, merge checks and default reviewer rules of a repository,
-- one JSON document validated in Go (so a new check needs no migration).
CREATE TABLE pull_request_settings (
    repo_id BIGINT PRIMARY KEY REFERENCES repositories (id) ON DELETE CASCADE,
    config  TEXT NOT NULL
);

CREATE TABLE webhooks (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id    BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    secret     TEXT NOT NULL DEFAULT '',
    events     TEXT NOT NULL,
    active     BOOLEAN NOT NULL DEFAULT TRUE,
    created_at TIMESTAMP NOT NULL
);
CREATE INDEX webhooks_repo ON webhooks (repo_id);

CREATE TABLE webhook_deliveries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id  BIGINT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event       TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    BIGINT NOT NULL DEFAULT 0,
    status_code BIGINT NOT NULL DEFAULT 0,
    error       TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    updated_at  TIMESTAMP NOT NULL,
    delivered   BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, id);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP TABLE pull_request_settings;
DROP TABLE branch_restrictions;
DROP TABLE build_statuses;
DROP TABLE pull_request_diffs;
DROP TABLE pull_request_activities;
DROP TABLE pull_request_comments;
DROP TABLE pull_request_participants;
DROP TABLE pull_requests;
