-- Durable schedule of periodic jobs (internal/jobs, issue 21 item 4).
--
-- River keeps a periodic job's next run in the elected leader's memory and
-- starts counting from zero whenever leadership moves, so an hourly job in
-- a cluster whose leader changes more often than hourly never runs. The
-- next run is kept here instead: a node enqueues a periodic job only by
-- moving next_run_at forward from a due value, in the transaction that
-- inserts the job, so exactly one node enqueues each run, whichever node
-- that is, and a restart or leader change forgets nothing.
--
-- Times are written by the database's clock (now()), never by a node's, as
-- in nodes (00002). Expand-only: older releases never read it.
--
-- Twin of ../sqlite/00015_job_schedules.sql.

-- +goose Up
CREATE TABLE job_schedules (
    name        TEXT PRIMARY KEY,
    next_run_at TIMESTAMPTZ NOT NULL,
    -- NULL until the first run was enqueued.
    last_run_at TIMESTAMPTZ
);

-- +goose Down
DROP TABLE job_schedules;
