package throttle

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	wait       prometheus.Histogram
	rejections *prometheus.CounterVec
	limited    *prometheus.CounterVec
	cpu        prometheus.Gauge
	// gitShare reads the git group's share when scraped; nil without one.
	gitShare prometheus.GaugeFunc
}

// newMetrics registers the throttle's metrics on reg (nil: unregistered).
// The ticket gauges read the pool when scraped, so they cannot drift from
// it.
func newMetrics(reg prometheus.Registerer, t *Throttle) (*metrics, error) {
	m := &metrics{
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_throttle_queue_wait_seconds",
			Help: "Time git operations waited for a hosting ticket (0 when one was free).",
			// From an immediate grant to the default 5-minute bound.
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_rejections_total",
			Help: "Git operations refused a hosting ticket, by reason (queue_full, queue_timeout).",
		}, []string{"reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_throttle_rate_limited_total",
			Help: "Requests refused by the rate limit, by principal class (user, anonymous, token).",
		}, []string{"class"}),
		cpu: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_throttle_cpu_utilization_ratio",
			Help: "CPU utilisation the adaptive controller measured over its last interval (0..1 of its cores).",
		}),
	}
	if t.ctrl != nil && t.ctrl.cap != nil {
		m.gitShare = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_throttle_git_cpu_share",
			Help: "CPU cap of the git cgroup as a share of the node's cores (1: uncapped; absent without a git cgroup).",
		}, t.ctrl.cap.Share)
	}
	for _, r := range []string{"queue_full", "queue_timeout"} {
		m.rejections.WithLabelValues(r)
	}
	for _, c := range []string{classUser, classAnonymous, classToken} {
		m.limited.WithLabelValues(c)
	}
	if reg == nil {
		return m, nil
	}
	if m.gitShare != nil {
		if err := reg.Register(m.gitShare); err != nil {
			return nil, fmt.Errorf("register throttle metrics: %w", err)
		}
	}
	gauge := func(name, help string, f func(poolState) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(t.pool.state())) })
	}
	for _, c := range []prometheus.Collector{
		m.wait, m.rejections, m.limited, m.cpu,
		gauge("sluice_throttle_tickets_limit", "Current hosting ticket limit.", func(s poolState) int { return s.Limit }),
		gauge("sluice_throttle_tickets_in_use", "Hosting tickets held by running git operations.", func(s poolState) int { return s.InUse }),
		gauge("sluice_throttle_tickets_queued", "Git operations waiting for a hosting ticket.", func(s poolState) int { return s.Queued }),
	} {
		// One throttle per registry: a second one's gauges would report
		// the first one's pool, so a clash is an error, not shared.
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register throttle metrics: %w", err)
		}
	}
	return m, nil
}
