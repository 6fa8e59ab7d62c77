-- Build statuses scoped to repositories (security issue 14, item 3).
--
-- build_statuses (00003) keyed a status by commit alone, so anyone
-- signed in could read the names and URLs CI reported for a private
-- repository's commits, and a status posted by a reader of one
-- repository satisfied the build merge check of a private pull request
-- whose source is the same commit. A status now belongs to one
-- repository: a report is stored once for each repository it was
-- attached to (a readable repository whose refs reach the commit), and
-- only that repository's readers see it and only its pull requests
-- count it. The key is unique per (repository, commit), so a report to
-- one repository can never overwrite another's.
--
-- Existing rows stay in build_statuses, untouched and no longer read:
-- they name no repository, so they attach to nothing, no one sees them
-- and they count for no merge check. CI reports again on its next build;
-- until then a pull request that requires builds is vetoed, which is the
-- safe direction. Expand-only: older releases keep reading their table.
--
-- duration is in milliseconds and the test counts are NULL when CI sent
-- no testResults, as in Bitbucket's repository build status (7.4+).
--
-- Twin of ../postgres/00013_repo_build_statuses.sql.

-- +goose Up
CREATE TABLE repo_build_statuses (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    repo_id          BIGINT NOT NULL REFERENCES repositories (id) ON DELETE CASCADE,
    commit_sha       TEXT NOT NULL,
    key              TEXT NOT NULL,
    state            TEXT NOT NULL,
    name             TEXT NOT NULL DEFAULT '',
    url              TEXT NOT NULL DEFAULT '',
    description      TEXT NOT NULL DEFAULT '',
    ref              TEXT NOT NULL DEFAULT '',
    parent           TEXT NOT NULL DEFAULT '',
    build_number     TEXT NOT NULL DEFAULT '',
    duration_ms      BIGINT NOT NULL DEFAULT 0,
    tests_successful BIGINT,
    tests_failed     BIGINT,
    tests_skipped    BIGINT,
    created_at       TIMESTAMP NOT NULL,
    updated_at       TIMESTAMP NOT NULL,
    UNIQUE (repo_id, commit_sha, key)
);
-- The global listing reads every repository's statuses of one commit.
CREATE INDEX repo_build_statuses_commit ON repo_build_statuses (commit_sha);

-- +goose Down
DROP TABLE repo_build_statuses;
