package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// PGBus is the bus on PostgreSQL LISTEN/NOTIFY.
//
// Publishing is a pg_notify through the store's pool. Listening needs a
// session of its own that stays subscribed, so PGBus opens one dedicated
// connection with the pool's configuration (outside the pool: a listener
// must not be handed to a query, nor count against the pool's size) and
// waits on it for notifications. The channel of topic T is "sluice_T".
//
// The listener reconnects by itself with exponential backoff (100 ms
// doubling to 5 s, with jitter so that nodes do not stampede a recovering
// server), and after every reconnect calls the OnResync callbacks: events
// sent while no session listened are gone for good. An idle connection is
// pinged every pingInterval, so a server that vanished without closing the
// socket is noticed.
type PGBus struct {
	pool   *pgxpool.Pool
	subs   *subscribers
	logger *slog.Logger

	published  *prometheus.CounterVec
	reconnects prometheus.Counter

	connected atomic.Bool

	mu     sync.Mutex
	wake   context.CancelFunc // interrupts the wait to LISTEN to a new topic
	cancel context.CancelFunc
	done   chan struct{}
	// connectedCh is closed and replaced each time a connection is up and
	// listening; tests wait on it.
	connectedCh chan struct{}
}

// Backoff bounds of the listener's reconnects, and how often an idle
// listening connection is checked.
const (
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	pingInterval = 15 * time.Second
	pingTimeout  = 5 * time.Second
)

// NewPGBus returns a bus on pool; Start begins listening.
func NewPGBus(pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer) (*PGBus, error) {
	if pool == nil {
		return nil, errors.New("cluster: PostgreSQL bus needs a pgx pool")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "cluster")
	b := &PGBus{
		pool:        pool,
		subs:        newSubscribers(logger),
		logger:      logger,
		connectedCh: make(chan struct{}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cluster_events_published_total",
			Help: "Bus events this node published, by topic.",
		}, []string{"topic"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cluster_bus_reconnects_total",
			Help: "Times the bus's listening connection was re-established after a failure.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{b.published, b.reconnects, b.subs.received} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register bus metrics: %w", err)
			}
		}
	}
	return b, nil
}

func channel(topic string) string { return "sluice_" + topic }

// Publish sends payload to every node listening on topic, this one
// included.
func (b *PGBus) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := checkEvent(topic, payload); err != nil {
		return err
	}
	// NOTIFY payloads are text in the database encoding, which cannot
	// hold a NUL: base64 carries any bytes.
	if _, err := b.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel(topic), base64.StdEncoding.EncodeToString(payload)); err != nil {
		return fmt.Errorf("publish %s event: %w", topic, err)
	}
	b.published.WithLabelValues(topic).Inc()
	return nil
}

// Subscribe registers fn for topic. It may be called before or after
// Start.
func (b *PGBus) Subscribe(topic string, fn func(payload []byte)) {
	if !topicPattern.MatchString(topic) {
		b.logger.Error("subscribe to invalid topic", "topic", topic)
		return
	}
	if b.subs.add(topic, fn) {
		b.mu.Lock()
		if b.wake != nil {
			b.wake()
		}
		b.mu.Unlock()
	}
}

// OnResync registers fn to run after the listener reconnected.
func (b *PGBus) OnResync(fn func()) { b.subs.addResync(fn) }

// OnLost registers fn to run each time the listener's connection drops,
// before it reconnects.
func (b *PGBus) OnLost(fn func()) { b.subs.addLost(fn) }

// Connected reports whether the listening connection is up.
func (b *PGBus) Connected() bool { return b.connected.Load() }

// WaitConnected returns once the listener is connected and listening, or
// with ctx's error.
func (b *PGBus) WaitConnected(ctx context.Context) error {
	for {
		b.mu.Lock()
		ch := b.connectedCh
		b.mu.Unlock()
		if b.connected.Load() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Start begins listening in the background; it does not wait for the
// connection.
func (b *PGBus) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		return errors.New("cluster: bus already started")
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel, b.done = cancel, make(chan struct{})
	go b.run(lctx)
	return nil
}

// Close stops listening and closes the connection.
func (b *PGBus) Close() error {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	return nil
}

func (b *PGBus) run(ctx context.Context) {
	defer close(b.done)
	backoff := minBackoff
	attempt := 0
	failing := false
	for ctx.Err() == nil {
		attempt++
		conn, err := b.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				b.logger.Warn("event bus: cannot connect; retrying", "err", err)
				failing = true
			}
			// Full jitter over [backoff/2, backoff].
			d := backoff/2 + rand.N(backoff/2+1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		failing = false
		err = b.listen(ctx, conn, func() {
			b.setConnected(true)
			if attempt > 1 {
				// Whatever was published while nobody listened is lost.
				b.reconnects.Inc()
				b.logger.Info("event bus reconnected; dropping state that may have missed events")
				b.subs.resynced()
			}
		})
		b.setConnected(false)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		b.logger.Warn("event bus connection lost; reconnecting", "err", err)
		b.subs.connectionLost()
		failing = true
	}
}

func (b *PGBus) setConnected(up bool) {
	b.connected.Store(up)
	if up {
		b.mu.Lock()
		close(b.connectedCh)
		b.connectedCh = make(chan struct{})
		b.mu.Unlock()
	}
}

// connect opens the dedicated listening connection with the pool's
// settings (connect_timeout included).
func (b *PGBus) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg := b.pool.Config().ConnConfig.Copy()
	cctx := ctx
	if cfg.ConnectTimeout == 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return pgx.ConnectConfig(cctx, cfg)
}

// listen LISTENs to every subscribed topic, calls up once it does, and
// delivers notifications until the connection fails or ctx ends.
func (b *PGBus) listen(ctx context.Context, conn *pgx.Conn, up func()) error {
	listening := map[string]bool{}
	for {
		for _, t := range b.subs.topics() {
			if listening[t] {
				continue
			}
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel(t)}.Sanitize()); err != nil {
				return fmt.Errorf("listen %s: %w", t, err)
			}
			listening[t] = true
		}
		if up != nil {
			up()
			up = nil
		}
		wctx, wake := context.WithTimeout(ctx, pingInterval)
		b.mu.Lock()
		b.wake = wake
		b.mu.Unlock()
		n, err := conn.WaitForNotification(wctx)
		b.mu.Lock()
		b.wake = nil
		b.mu.Unlock()
		timedOut := errors.Is(wctx.Err(), context.DeadlineExceeded)
		woken := wctx.Err() != nil && !timedOut
		wake()
		switch {
		case err == nil:
			b.deliver(n.Channel, n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case timedOut:
			// Idle: make sure the server is still there.
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		case woken:
			// Woken by Subscribe: LISTEN to the new topic.
		default:
			return err
		}
	}
}

func (b *PGBus) deliver(ch, payload string) {
	const prefix = "sluice_"
	if len(ch) <= len(prefix) || ch[:len(prefix)] != prefix {
		return
	}
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		b.logger.Warn("event bus: undecodable payload", "channel", ch)
		return
	}
	b.subs.deliver(ch[len(prefix):], raw)
}
