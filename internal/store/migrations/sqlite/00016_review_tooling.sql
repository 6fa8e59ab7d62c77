-- Review tooling (issue 15): default reviewer conditions and Code
-- Insights reports, annotations and required reports. All new tables
-- (expand only); older releases never read them.
--
-- A default reviewer condition belongs to one repository or one project
-- (then it applies to every repository of the project), like a branch
-- restriction. A matcher is stored as its Bitbucket type and id (BRANCH
-- refs/heads/main, PATTERN release/*, ANY_REF, MODEL_BRANCH production,
-- MODEL_CATEGORY feature); reviewer ids are a short comma-separated list
-- read with the condition and never queried by member.
--
-- A Code Insights report belongs to one repository and commit, as a
-- build status does since 00013: a private repository's analysis results
-- must neither show to nor vouch for the readers of another repository
-- holding the same commit. Replacing a report replaces its annotations,
-- so they hang off the report's row and go with it.
--
-- Twin of ../postgres/00016_review_tooling.sql.

-- +goose Up
CREATE TABLE default_reviewer_conditions (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id            BIGINT REFERENCES repositories (id) ON DELETE CASCADE,
    project_id         BIGINT REFERENCES projects (id) ON DELETE CASCADE,
    source_type        TEXT NOT NULL,
    source_id          TEXT NOT NULL,
    target_type        TEXT NOT NULL,
    target_id          TEXT NOT NULL,
    reviewer_ids       TEXT NOT NULL DEFAULT '',
    required_approvals INTEGER NOT NULL DEFAULT 0,
    created_at         TIMESTAMP NOT NULL,
    CHECK ((repo_id IS NULL) <> (project_id IS NULL))
);
CREATE INDEX default_reviewer_conditions_repo ON default_reviewer_conditions (repo_id);
CREATE INDEX default_reviewer_conditions_project ON default_reviewer_conditions (project_id);

CREATE TABLE insight_reports (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id     BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    commit_sha  TEXT NOT NULL,
    report_key  TEXT NOT NULL,
    title       TEXT NOT NULL,
    details     TEXT NOT NULL DEFAULT '',
    result      TEXT NOT NULL DEFAULT '',
    data        TEXT NOT NULL DEFAULT '[]',
    reporter    TEXT NOT NULL DEFAULT '',
    link        TEXT NOT NULL DEFAULT '',
    logo_url    TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL,
    UNIQUE (repo_id, commit_sha, report_key)
);

CREATE TABLE insight_annotations (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    report_id   BIGINT NOT NULL REFERENCES insight_reports (id) ON DELETE CASCADE,
    external_id TEXT NOT NULL DEFAULT '',
    path        TEXT NOT NULL DEFAULT '',
    line        INTEGER NOT NULL DEFAULT 0,
    message     TEXT NOT NULL,
    severity    TEXT NOT NULL,
    type        TEXT NOT NULL DEFAULT '',
    link        TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX insight_annotations_report ON insight_annotations (report_id);

-- A required report vetoes the merge of pull requests into matching
-- branches until a report with its key says PASS for the source commit.
CREATE TABLE insight_required_reports (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id     BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    report_key  TEXT NOT NULL,
    target_type TEXT NOT NULL,
    target_id   TEXT NOT NULL,
    created_at  TIMESTAMP NOT NULL
);
CREATE INDEX insight_required_reports_repo ON insight_required_reports (repo_id);

-- +goose Down
DROP TABLE insight_required_reports;
DROP TABLE insight_annotations;
DROP TABLE insight_reports;
DROP TABLE default_reviewer_conditions;
