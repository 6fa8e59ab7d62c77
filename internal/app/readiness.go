package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Readiness states, as /readyz names them in its body.
const (
	stateOK          = "ok"
	stateReadOnly    = "read-only"
	stateUnavailable = "unavailable"
)

// readinessEvery is how old a database probe may be before the next
// question probes again. HAProxy checks every second (deploy/haproxy.cfg,
// inter 1s); a result at most a second old plus a check a second later is
// how the node is back in rotation within 2 s of the database returning,
// while a dozen load balancers checking at once still cost the database
// at most one ping a second per node.
const readinessEvery = time.Second

// readinessTimeout bounds one probe. Below HAProxy's 2 s check timeout,
// so a database that does not answer at all makes the check answer
// "not ok" rather than time out (which would also take the node out of
// the read backend).
const readinessTimeout = 1500 * time.Millisecond

// readiness knows whether this node's database answers, probing it at
// most every readinessEvery. It answers /readyz and tells the SSH server
// that pushes cannot be taken. While the database is away the node is
// "read-only" when it can still serve cached reads to principals it
// authenticated recently (cachedReads), "unavailable" otherwise.
type readiness struct {
	ping        func(context.Context) error
	cachedReads bool
	logger      *slog.Logger
	now         func() time.Time

	mu      sync.Mutex
	state   string
	at      time.Time // when state was probed; zero before the first probe
	probing bool
}

func newReadiness(ping func(context.Context) error, cachedReads bool, logger *slog.Logger) *readiness {
	return &readiness{ping: ping, cachedReads: cachedReads, logger: logger, now: time.Now}
}

// State returns the node's state, probing the database when the last
// probe is older than readinessEvery. Questions asked while a probe runs
// get the previous answer instead of waiting for it (a database that does
// not answer would otherwise hold every health check for the whole probe
// timeout); only the very first questions wait.
func (r *readiness) State(ctx context.Context) string {
	r.mu.Lock()
	if !r.at.IsZero() && (r.probing || r.now().Sub(r.at) < readinessEvery) {
		s := r.state
		r.mu.Unlock()
		return s
	}
	r.probing = true
	r.mu.Unlock()

	// A client hanging up mid-probe must not be recorded as a database
	// outage: the probe gets the request's values, not its end.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readinessTimeout)
	err := r.ping(pctx)
	cancel()
	s := stateOK
	if err != nil {
		s = stateUnavailable
		if r.cachedReads {
			s = stateReadOnly
		}
	}

	r.mu.Lock()
	prev := r.state
	r.state, r.at, r.probing = s, r.now(), false
	r.mu.Unlock()
	if prev != s && prev != "" {
		if s == stateOK {
			r.logger.Info("database answers again; node is ready", "state", s)
		} else {
			r.logger.Warn("database unavailable; node refuses writes", "state", s, "err", err)
		}
	}
	return s
}

// ReadOnly says whether writes must be refused because the database does
// not answer (read-only and unavailable alike).
func (r *readiness) ReadOnly(ctx context.Context) bool {
	return r.State(ctx) != stateOK
}

// ServeHTTP answers /readyz: 200 "ok" when the database answers; 503
// "read-only" when it does not but the node still serves cached reads;
// 503 "unavailable" when it cannot serve anything. Both refusals are 503
// so that everything judging readiness by status alone (Kubernetes
// probes, a load balancer configuration from before read-only existed,
// scripts waiting for a node) keeps treating a node without its database
// as not ready; the shipped HAProxy configuration matches the body
// instead, sending reads to "ok" and "read-only" nodes and writes to "ok"
// ones only.
func (r *readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s := r.State(req.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s != stateOK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	io.WriteString(w, s+"\n")
}
