package store

import "context"

// Git runs (see GitRun): one INSERT before a push's git starts and one
// DELETE after it exits, both on the primary key alone, so a push pays two
// short statements and no lock on any shared row.

// BeginGitRun records a git process of instance on repoID.
func (d *DB) BeginGitRun(ctx context.Context, repoID int64, nodeID, instance string) (int64, error) {
	var id int64
	err := d.queryRow(ctx, "INSERT INTO git_runs (repo_id, node_id, instance, started_at) VALUES (?, ?, ?, ?) RETURNING id",
		repoID, nodeID, instance, now()).Scan(&id)
	if err != nil {
		return 0, d.fail(err, "begin git run")
	}
	return id, nil
}

// EndGitRun forgets a git run; one already gone is no error.
func (d *DB) EndGitRun(ctx context.Context, id int64) error {
	_, err := d.exec(ctx, "DELETE FROM git_runs WHERE id = ?", id)
	return d.fail(err, "end git run")
}

// GitRuns lists every recorded git run, oldest first.
func (d *DB) GitRuns(ctx context.Context) ([]GitRun, error) {
	rows, err := d.query(ctx, "SELECT id, repo_id, node_id, instance, started_at FROM git_runs ORDER BY id")
	if err != nil {
		return nil, d.fail(err, "git runs")
	}
	return collect(rows, d, "git runs", func(sc interface{ Scan(...any) error }, r *GitRun) error {
		if err := sc.Scan(&r.ID, &r.RepoID, &r.NodeID, &r.Instance, &r.StartedAt); err != nil {
			return err
		}
		r.StartedAt = r.StartedAt.UTC()
		return nil
	})
}
