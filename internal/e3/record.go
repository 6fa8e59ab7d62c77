package e3

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// recorder collects the operations of one stage of one thread.
type recorder struct {
	mu     sync.Mutex
	ops    map[string]*opStats
	second map[int64]int64 // successful ops per wall-clock second
}

type opStats struct {
	ok, errors int64
	bytes      int64
	lat        *loadgen.Histogram
	errs       map[string]int64
}

func newRecorder() *recorder {
	return &recorder{ops: map[string]*opStats{}, second: map[int64]int64{}}
}

// maxErrorKinds bounds the distinct error messages kept per operation:
// a server failing every request in a new way must not fill memory.
const maxErrorKinds = 20

func (r *recorder) record(op string, d time.Duration, n int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.ops[op]
	if s == nil {
		s = &opStats{lat: loadgen.NewHistogram(), errs: map[string]int64{}}
		r.ops[op] = s
	}
	s.bytes += n
	if err != nil {
		s.errors++
		msg := err.Error()
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		if _, ok := s.errs[msg]; ok || len(s.errs) < maxErrorKinds {
			s.errs[msg]++
		} else {
			s.errs["(other errors)"]++
		}
		return
	}
	s.ok++
	s.lat.Record(d)
	r.second[time.Now().Unix()]++
}

// result summarises the stage.
func (r *recorder) result(elapsed time.Duration) []OpResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []OpResult
	for name, s := range r.ops {
		o := OpResult{Op: name, Git: isGitOp(name), Count: s.ok, Errors: s.errors, Bytes: s.bytes,
			Mean: ms(s.lat.Mean()), P50: ms(s.lat.Quantile(0.5)), P95: ms(s.lat.Quantile(0.95)), P99: ms(s.lat.Quantile(0.99)), Max: ms(s.lat.Max())}
		if elapsed > 0 {
			o.PerHour = float64(s.ok) / elapsed.Hours()
		}
		for msg, n := range s.errs {
			o.ErrorMessages = append(o.ErrorMessages, ErrorCount{Message: msg, Count: n})
		}
		sort.Slice(o.ErrorMessages, func(i, j int) bool { return o.ErrorMessages[i].Count > o.ErrorMessages[j].Count })
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// isGitOp says whether an operation name is a git hosting operation
// (what Bitbucket's "git operations per hour" counts).
func isGitOp(op string) bool {
	switch op {
	case "clone", "fetch", "push", "ls-remote", "ssh clone", "ssh fetch", "ssh push", "ssh ls-remote", "git clone", "git fetch", "git ls-remote":
		return true
	}
	return false
}

func fmtRate(perHour float64) string {
	switch {
	case perHour >= 1e6:
		return fmt.Sprintf("%.2fM/h", perHour/1e6)
	case perHour >= 1e3:
		return fmt.Sprintf("%.1fk/h", perHour/1e3)
	}
	return fmt.Sprintf("%.0f/h", perHour)
}
