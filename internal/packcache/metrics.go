package packcache

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	lookups   *prometheus.CounterVec
	served    *prometheus.CounterVec
	generated prometheus.Counter
	evictions *prometheus.CounterVec
	abandoned *prometheus.CounterVec
	entries   prometheus.GaugeFunc
	disk      prometheus.GaugeFunc
}

func newMetrics(c *Cache) *metrics {
	m := &metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_packcache_lookups_total",
			Help: "Pack cache lookups by kind (packs, refs) and result (hit, miss, coalesced, bypass).",
		}, []string{"kind", "result"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_packcache_bytes_served_total",
			Help: "Response bytes sent to clients through the cache: source git for the client whose miss ran git, cache for hits and coalesced followers.",
		}, []string{"source"}),
		generated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_packcache_bytes_generated_total",
			Help: "Response bytes git produced into the cache.",
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_packcache_evictions_total",
			Help: "Cache entries removed, by reason (budget, ttl, refs_changed, cleared, corrupt).",
		}, []string{"reason"}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_packcache_abandoned_total",
			Help: "Producers stopped because no client followed them any more, by reason (unrequested, time, bytes).",
		}, []string{"reason"}),
	}
	m.entries = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_packcache_entries",
		Help: "Complete entries in the cache.",
	}, func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(c.lru.Len())
	})
	m.disk = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_packcache_disk_bytes",
		Help: "Bytes the cache's files take on disk, entries being written included.",
	}, func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := c.diskBytes
		for _, e := range c.entries {
			if !e.isReady() {
				n += headerSize + e.size()
			}
		}
		return float64(n)
	})
	// The label values are few and known: start them at zero so that
	// dashboards and rate() see the series before the first event.
	for _, k := range []string{KindPacks, KindRefs} {
		for _, r := range []string{"hit", "miss", "coalesced", "bypass"} {
			m.lookups.WithLabelValues(k, r)
		}
	}
	for _, r := range []string{"unrequested", "time", "bytes"} {
		m.abandoned.WithLabelValues(r)
	}
	m.served.WithLabelValues("cache")
	m.served.WithLabelValues("git")
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.lookups, m.served, m.generated, m.evictions, m.abandoned, m.entries, m.disk} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register pack cache metrics: %w", err)
		}
	}
	return nil
}
