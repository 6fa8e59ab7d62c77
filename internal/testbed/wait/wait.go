// Package wait is the tests' one way to wait for a condition: poll it,
// briefly at first and then less often, and fail the test with what was
// awaited when it does not hold in time. It imports nothing of Sluice, so
// any package's internal tests can use it (testbed itself imports the whole
// server).
//
// It is for positive checks only ("the job ran"). A negative check ("the
// job never ran") waits for the event that would have made it run, not for
// a while.
package wait

import (
	"testing"
	"time"
)

// For polls cond until it holds or limit passes, then fails t naming what.
func For(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	pause := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}
