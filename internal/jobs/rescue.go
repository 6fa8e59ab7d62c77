package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// Rescue of jobs left running by dead or restarted nodes (see the package
// doc).

// rescueScanMax bounds the running rows one rescue pass reads: running jobs
// number at most the workers of all nodes, far below it.
const rescueScanMax = 10_000

// rescueLoop rescues orphaned jobs every RescueInterval until ctx ends.
func (q *Queue) rescueLoop(ctx context.Context) {
	t := time.NewTicker(q.cfg.RescueInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := q.rescue(ctx, false)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				q.logger.Warn("rescue jobs of dead nodes", "err", err)
			}
			failing = true
		case err == nil && failing:
			q.logger.Info("rescue of jobs of dead nodes recovered")
			failing = false
		}
	}
}

// rescue puts back in the queue (or discards, when out of attempts) the
// running jobs whose node is dead or restarted, and returns how many.
// starting is true in Start, before this process works anything: then
// every running job attempted under this node's id is an earlier
// incarnation's.
func (q *Queue) rescue(ctx context.Context, starting bool) (int, error) {
	res, err := q.client.JobList(ctx, river.NewJobListParams().States(rivertype.JobStateRunning).First(rescueScanMax))
	if err != nil {
		return 0, fmt.Errorf("list running jobs: %w", err)
	}
	if len(res.Jobs) == 0 {
		return 0, nil
	}
	var live map[string]bool
	if q.cfg.LiveNodes != nil {
		if live, err = q.cfg.LiveNodes(ctx); err != nil {
			return 0, fmt.Errorf("list live nodes: %w", err)
		}
	}
	self := q.clientID()
	now := time.Now()
	n := 0
	for _, j := range res.Jobs {
		if len(j.AttemptedBy) == 0 || j.AttemptedAt == nil {
			continue
		}
		by := j.AttemptedBy[len(j.AttemptedBy)-1]
		if by == self {
			continue
		}
		node, _ := parseClientID(by)
		var reason string
		switch {
		case node == q.cfg.NodeID:
			reason = fmt.Sprintf("node %s restarted while the job ran (attempted by %s)", node, by)
		case q.cfg.SoleWorker && starting:
			reason = fmt.Sprintf("server restarted while the job ran (attempted by %s)", by)
		case live != nil && !live[node] && now.Sub(*j.AttemptedAt) > q.cfg.RescueGrace:
			reason = fmt.Sprintf("node %s is gone (attempted by %s)", node, by)
		default:
			continue
		}
		msg, err := json.Marshal(rivertype.AttemptError{At: now, Attempt: j.Attempt, Error: "rescued: " + reason})
		if err != nil {
			return n, fmt.Errorf("rescue job %d: %w", j.ID, err)
		}
		state, outcome, finalized := rivertype.JobStateAvailable, "requeued", (*time.Time)(nil)
		if j.Attempt >= j.MaxAttempts {
			state, outcome, finalized = rivertype.JobStateDiscarded, "discarded", &now
		}
		// One job per update: it applies only while the job is still
		// running in the attempt read here (attempted before the
		// horizon), so a job another node rescued and a third started
		// meanwhile is left alone. The millisecond is SQLite's
		// precision; a new attempt cannot follow a dead one that fast.
		if _, err := q.b.exec.JobRescueMany(ctx, &riverdriver.JobRescueManyParams{
			ID:           []int64{j.ID},
			Error:        [][]byte{msg},
			FinalizedAt:  []*time.Time{finalized},
			ScheduledAt:  []time.Time{now},
			State:        []string{string(state)},
			StuckHorizon: j.AttemptedAt.Add(time.Millisecond),
		}); err != nil {
			return n, fmt.Errorf("rescue job %d: %w", j.ID, err)
		}
		q.logger.Warn("job rescued", "kind", j.Kind, "job_id", j.ID, "attempt", j.Attempt,
			"state", state, "reason", reason)
		q.metrics.rescued.WithLabelValues(j.Kind, outcome).Inc()
		n++
	}
	return n, nil
}
