package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Bus carries events between the nodes of a cluster. Delivery is at most
// once and may be late; subscribers must treat events as hints (see the
// package doc). A subscriber runs on the bus's delivery goroutine and must
// return quickly.
type Bus interface {
	Publish(ctx context.Context, topic string, payload []byte) error
	Subscribe(topic string, fn func(payload []byte))
	// OnResync registers fn to run whenever events may have been lost
	// (after the bus reconnected); fn drops what it cannot trust.
	OnResync(fn func())
	// OnLost registers fn to run when the bus's own connection to the
	// database drops: the database probably dropped the node's other
	// sessions at the same moment (a restart, a failover).
	OnLost(fn func())
}

// MaxPayload bounds an event's payload. PostgreSQL's NOTIFY takes under
// 8000 bytes and the payload travels base64-encoded (4/3 larger).
const MaxPayload = 5000

// topicPattern keeps topics usable as (part of) PostgreSQL channel names.
var topicPattern = regexp.MustCompile(`\A[a-z][a-z0-9_]{0,39}\z`)

func checkEvent(topic string, payload []byte) error {
	if !topicPattern.MatchString(topic) {
		return fmt.Errorf("cluster: invalid topic %q", topic)
	}
	if len(payload) > MaxPayload {
		return fmt.Errorf("cluster: %s event payload of %d bytes exceeds %d", topic, len(payload), MaxPayload)
	}
	return nil
}

// subscribers is the fan-out both buses share.
type subscribers struct {
	mu       sync.Mutex
	byTopic  map[string][]func([]byte)
	resync   []func()
	lost     []func()
	logger   *slog.Logger
	received *prometheus.CounterVec
}

func newSubscribers(logger *slog.Logger) *subscribers {
	return &subscribers{
		byTopic: map[string][]func([]byte){},
		logger:  logger,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_events_received_total",
			Help: "Bus events delivered to this node's subscribers, by topic.",
		}, []string{"topic"}),
	}
}

func (s *subscribers) add(topic string, fn func([]byte)) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first = len(s.byTopic[topic]) == 0
	s.byTopic[topic] = append(s.byTopic[topic], fn)
	return first
}

func (s *subscribers) topics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.byTopic {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func (s *subscribers) deliver(topic string, payload []byte) {
	s.mu.Lock()
	fns := slices.Clone(s.byTopic[topic])
	s.mu.Unlock()
	if len(fns) == 0 {
		return
	}
	s.received.WithLabelValues(topic).Inc()
	for _, fn := range fns {
		s.safely(topic, func() { fn(slices.Clone(payload)) })
	}
}

func (s *subscribers) addResync(fn func()) {
	s.mu.Lock()
	s.resync = append(s.resync, fn)
	s.mu.Unlock()
}

func (s *subscribers) resynced() { s.run("resync", &s.resync) }

func (s *subscribers) addLost(fn func()) {
	s.mu.Lock()
	s.lost = append(s.lost, fn)
	s.mu.Unlock()
}

func (s *subscribers) connectionLost() { s.run("lost", &s.lost) }

// run calls the callbacks in *fns, each safely.
func (s *subscribers) run(what string, fns *[]func()) {
	s.mu.Lock()
	list := slices.Clone(*fns)
	s.mu.Unlock()
	for _, fn := range list {
		s.safely(what, fn)
	}
}

// safely keeps one subscriber's panic from killing the delivery goroutine
// and with it every other subscriber's events.
func (s *subscribers) safely(what string, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			s.logger.Error("bus subscriber panicked", "topic", what, "panic", p)
		}
	}()
	fn()
}

// LocalBus is the in-process bus for a single node (SQLite). Publish
// delivers synchronously to this process's subscribers.
type LocalBus struct {
	subs *subscribers
}

// NewLocalBus returns an in-process bus. reg may be nil.
func NewLocalBus(logger *slog.Logger, reg prometheus.Registerer) (*LocalBus, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &LocalBus{subs: newSubscribers(logger.With("component", "cluster"))}
	if reg != nil {
		if err := reg.Register(b.subs.received); err != nil {
			return nil, fmt.Errorf("register bus metrics: %w", err)
		}
	}
	return b, nil
}

// Publish delivers payload to the topic's subscribers before returning.
func (b *LocalBus) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkEvent(topic, payload); err != nil {
		return err
	}
	b.subs.deliver(topic, payload)
	return nil
}

// Subscribe registers fn for topic.
func (b *LocalBus) Subscribe(topic string, fn func(payload []byte)) { b.subs.add(topic, fn) }

// OnResync registers fn; an in-process bus never loses events, so fn is
// never called.
func (b *LocalBus) OnResync(fn func()) { b.subs.addResync(fn) }

// OnLost registers fn; an in-process bus has no connection to lose, so fn
// is never called.
func (b *LocalBus) OnLost(fn func()) { b.subs.addLost(fn) }
