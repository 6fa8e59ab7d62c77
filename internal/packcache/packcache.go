// Package packcache is the SCM cache: upload-pack responses and ref
// advertisements served from the node's local disk, so that a clone storm
// (a CI fleet cloning the same tips) costs one git process instead of one per
// client. hosting, the runner that calls it, consults it (Serve) for every
// stateless upload-pack request and advertisement on every transport,
// described as a Request it has already parsed, with a Generate that runs
// git. The cache imports nothing of hosting: what it needs of a request is
// in the Request, and what it says back goes through its arguments.
//
// # Never stale
//
// An entry's key is a SHA-256 of the git identity (binary and server-owned
// configuration), the repository id, the repository's refs generation, the
// GIT_PROTOCOL value, the service and the request as pktline normalises it
// (UploadRequest.Key: wants, haves, shallow/deepen, filter and every
// capability that changes the bytes). The generation is read from the
// database on every lookup: every ref change bumps it before the client is
// told the change succeeded (see internal/hooks), so a lookup after an
// acknowledged push, on any node, computes a key no earlier entry has. A
// request that arrives while a ref transaction is pending bypasses the
// cache, and an entry whose repository moved while git produced it is
// served to the clients already waiting for it but not kept. Ref-change
// events (Invalidate) only free the disk early; correctness never depends
// on them.
//
// A protocol v0/v1 ref advertisement comes in two flavours: smart HTTP's
// (git --stateless-rpc --advertise-refs, which offers "no-done") and an SSH
// session's (a stateful git, which does not); Request.Session names the
// second, and the key tells them apart. Requests are
// keyed on their content alone, so an SSH session's single-round request
// and the same bytes over HTTP share an entry: git answers both alike. A
// session's shallow request (two rounds: the shallow list, then the pack)
// is asked as the two stateless requests an HTTP client posts for it (see
// hosting's serveV0Session), so it shares those entries too.
//
// The one response that does not depend on refs is the protocol v2
// capability advertisement, which git derives from its version and
// configuration alone. It is keyed on the git identity and the repository
// (whose object format it names) without the generation, so a v2 clone that
// hits starts no git process at all.
//
// # During a database outage
//
// Without the database there is no generation, so no key. A node cut off
// from it may still answer clones and fetches (hosting lets through the
// principals auth's outage grace knows), but must never answer from an
// entry older than the refs: a push may have landed on another node.
// So every entry produced with Config.RefsDigest set records a digest of
// the repository's ref files, read before and after git ran (kept only if
// both agree, with the generation unchanged), and is indexed by its
// request alone as well. When RepoState answers Unavailable, the newest
// entry for the request is served only if the ref files digest the same
// now; otherwise, and on a miss, the answer is Unavailable ("temporarily
// unavailable") and git does not run: nothing is produced during an
// outage. Entries found on disk at start carry no digest and are not
// served during an outage (outage.go).
//
// # Single flight, streaming
//
// The first miss for a key creates the entry and starts one producer: a
// goroutine that runs git (the caller's Generate, which also takes the
// hosting ticket) with its output going only to the entry's file, at disk speed.
// Every client for that key, the first included, follows the file behind the
// writer: it copies what is there, then waits to be told that more arrived.
// Git therefore exits as soon as the response is produced and frees its
// memory, however slow the slowest client is (Bitbucket's SCM cache does the
// same; Gitaly's instead holds the writer back to its fastest reader). The
// producer's context is detached from the client that started it, so a
// client hanging up never breaks the others; once the last client has gone
// it runs on only if its response is likely to be asked for again, and
// only within a time and a byte budget (see abandon.go). A producer that fails removes
// the entry and every follower returns the error once it has sent what was
// written: a transport then aborts the stream instead of ending it cleanly,
// so no client ever takes a truncated pack for a complete one. While the
// producer waits for its ticket, its queue messages ("waiting for capacity,
// N ahead of you"), which Generate's progress argument receives, go to
// every client following the entry — to the progress each gave Serve — the
// latest at once to one that joins, not only to the client that started
// it.
//
// # On disk
//
// One file per entry, under 256 fan-out directories named by the key's first
// byte (dir/ab/abcdef…), written as dir/ab/tmp-* while produced and renamed
// when complete. A file is a fixed header (magic, format version, kind,
// repository, creation time, key), the response, and a trailer (magic,
// length, SHA-256 of the response). At start the directory is scanned:
// temporary files are removed, and so is any file whose header, size or
// trailer is wrong (a crash mid-write); the rest rebuild the index. The
// checksum of an entry found on disk is verified once, before its first
// hit, and a mismatch discards it and lets git answer.
//
// Space: a byte budget (Config.MaxBytes; by default a quarter of the cache
// file system) enforced by evicting the least recently used entries, a TTL
// counted from creation, and a free-space floor (Config.MinFreeBytes, 1 GiB
// by default like Bitbucket) below which nothing new is stored and requests
// go straight to git. With Config.MinOccurrences 2 a key is cached only on
// its second sight within the TTL (Gitaly found that this halves disk
// writes; one-off fetches are never stored).
package packcache

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/pktline"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Kinds of entries; they label metrics and are switched on and off
// separately (Config.Packs, Config.Refs).
const (
	KindPacks = "packs" // upload-pack fetch responses
	KindRefs  = "refs"  // ref and capability advertisements, v2 ls-refs
)

// Config configures a Cache.
type Config struct {
	// Dir holds the entries; it is created if missing and owned by the
	// cache (files it does not recognise in its fan-out directories are
	// removed at start).
	Dir string
	// Packs and Refs enable the two kinds of entries.
	Packs, Refs bool
	// MaxBytes is the disk budget; 0 means a quarter of the file system
	// holding Dir.
	MaxBytes int64
	// MinFreeBytes is the free-space floor below which nothing is stored.
	MinFreeBytes int64
	// TTL bounds an entry's life from its creation; 0 means one hour.
	TTL time.Duration
	// MinOccurrences is 1 (cache on first sight) or 2 (on second sight).
	MinOccurrences int
	// GitIdentity identifies the git binary and its configuration (see
	// GitIdentity); it is part of every key, so upgrading git or changing
	// its configuration never serves an answer the new git would not give.
	GitIdentity string
	// Statfs reports the size and free space of the file system holding
	// dir; nil uses statfs(2). Tests inject a full disk through it.
	Statfs func(dir string) (total, free uint64, err error)
	// AbandonedTimeout bounds how long a producer whose every client has
	// gone may run on (cache.abandoned_timeout); 0 means
	// DefaultAbandonedTimeout. See "Abandoned producers".
	AbandonedTimeout time.Duration
	// AbandonedMaxBytes bounds the response such a producer may write
	// (cache.abandoned_max_bytes); 0 means DefaultAbandonedMaxBytes.
	AbandonedMaxBytes int64
	// RefsDigest digests a repository's refs as its ref files hold them
	// (repo.Manager.RefsDigest). When set, entries record it, and while
	// the database cannot give the refs generation the cache answers from
	// them (see "During a database outage"); nil leaves the cache out then.
	RefsDigest func(repoID int64) (string, error)
}

// Defaults for the bounds on abandoned producers. A response someone asked
// for before takes a CI fleet's clone of a large repository, some minutes
// and gigabytes; finishing one is worth that, running a pack-objects for
// 19 minutes for nobody (an undeltifiable repository, seen in production)
// is not.
const (
	DefaultAbandonedTimeout  = 2 * time.Minute
	DefaultAbandonedMaxBytes = 1 << 30
)

// DefaultTTL is Bitbucket's SCM cache default.
const DefaultTTL = time.Hour

// maxSightings bounds the memory MinOccurrences 2 uses to remember keys seen
// once; past it the record starts over, which only delays caching.
const maxSightings = 100_000

// Cache is the SCM cache. It is safe for concurrent use.
type Cache struct {
	cfg    Config
	store  store.Store
	logger *slog.Logger
	m      *metrics
	budget int64

	// ctx bounds producers: Close cancels it and waits for them.
	ctx       context.Context
	cancel    context.CancelFunc
	producers sync.WaitGroup
	janitor   chan struct{}

	mu        sync.Mutex
	entries   map[string]*entry
	lru       *list.List // ready entries, most recently used at the front
	diskBytes int64      // ready entries' file sizes
	sightings map[string]time.Time
	// byRequest indexes the ready entries that recorded a refs digest by
	// their request key (lookup.reqKey), the newest per request, for
	// lookups during a database outage (outage.go).
	byRequest map[string]*entry

	hits, misses, coalesced, bypassed atomic.Int64
	servedCache, servedGit, generated atomic.Int64
	evictedMu                         sync.Mutex
	evicted                           map[string]int64
	closed                            atomic.Bool
	now                               func() time.Time
	janitorEvery                      time.Duration
	janitorDone                       chan struct{}
	statfsWarned                      atomic.Bool
}

// New opens the cache in cfg.Dir, rebuilding its index from the files there.
func New(cfg Config, st store.Store, reg prometheus.Registerer, logger *slog.Logger) (*Cache, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("cache directory must be an absolute path, got %q", cfg.Dir)
	}
	if cfg.MinOccurrences < 1 || cfg.MinOccurrences > 2 {
		return nil, fmt.Errorf("min occurrences must be 1 or 2, got %d", cfg.MinOccurrences)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.AbandonedTimeout <= 0 {
		cfg.AbandonedTimeout = DefaultAbandonedTimeout
	}
	if cfg.AbandonedMaxBytes <= 0 {
		cfg.AbandonedMaxBytes = DefaultAbandonedMaxBytes
	}
	if cfg.Statfs == nil {
		cfg.Statfs = statfs
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("create cache directory: %w", err)
	}
	c := &Cache{
		cfg:       cfg,
		store:     st,
		logger:    logger.With("component", "packcache"),
		entries:   map[string]*entry{},
		lru:       list.New(),
		sightings: map[string]time.Time{},
		byRequest: map[string]*entry{},
		evicted:   map[string]int64{},
		now:       time.Now,
		janitor:   make(chan struct{}),
	}
	c.budget = cfg.MaxBytes
	if c.budget <= 0 {
		total, _, err := cfg.Statfs(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("size cache file system: %w", err)
		}
		// A quarter leaves the rest of a shared disk to whatever else
		// lives there (logs, the database on a single node).
		c.budget = int64(total / 4)
	}
	c.m = newMetrics(c)
	if reg != nil {
		if err := c.m.register(reg); err != nil {
			return nil, err
		}
	}
	if err := c.load(); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	// Expired entries are found at lookup too; the janitor frees their
	// space when nobody asks for them again.
	c.janitorEvery = min(max(cfg.TTL/4, time.Second), time.Minute)
	c.janitorDone = make(chan struct{})
	go c.runJanitor()
	return c, nil
}

// Close stops the janitor and waits for running producers, which it
// cancels. Entries on disk stay for the next start.
func (c *Cache) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	close(c.janitor)
	<-c.janitorDone
	c.producers.Wait()
	return nil
}

// GitIdentity fingerprints the git binary (path, size, modification time)
// and the server-owned global configuration in homeDir without running
// git, for Config.GitIdentity.
func GitIdentity(binary, homeDir string) (string, error) {
	h := sha256.New()
	if binary != "" {
		fi, err := os.Stat(binary)
		if err != nil {
			return "", fmt.Errorf("stat git binary: %w", err)
		}
		fmt.Fprintf(h, "binary %s %d %d\n", binary, fi.Size(), fi.ModTime().UnixNano())
	}
	conf, err := os.ReadFile(filepath.Join(homeDir, ".gitconfig"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read git config: %w", err)
	}
	h.Write(conf)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lookup is one request as the cache sees it.
type lookup struct {
	kind   string
	key    string
	repoID int64
	// gen is the generation the key was built on; -1 for the capability
	// advertisement, which does not depend on refs.
	gen int64
	// reqKey is the key without the generation: the request alone, as
	// an outage lookup finds it (outage.go). Empty when gen is -1.
	reqKey string
	// outage is set when the generation could not be read because the
	// database is unavailable; key is then empty.
	outage bool
}

// Request is one upload-pack request or ref advertisement as the runner
// (hosting) hands it to the cache, parsed: the cache parses nothing itself.
type Request struct {
	RepoID int64
	// Protocol is the client's GIT_PROTOCOL value, one pktline.ValidProtocol
	// accepts, or "" (protocol v0).
	Protocol string
	// Session marks a protocol v0/v1 advertisement for an SSH session: a
	// stateful git's, which lacks the "no-done" git adds for smart HTTP's
	// --stateless-rpc --advertise-refs.
	Session bool
	// Body is the whole stateless request; nil for an advertisement.
	Body []byte
	// Parsed is Body as pktline.ParseUploadRequest reads it in the version
	// Protocol names; nil when it does not parse, and then the cache stays
	// out and git answers.
	Parsed *pktline.UploadRequest
}

// Generate produces, into w, exactly what git answers to the request now,
// taking a hosting ticket first; while it waits for one, progress receives
// the queueing messages. The cache calls it on a miss, in the producer.
type Generate func(ctx context.Context, w io.Writer, progress func(msg string)) error

// Serve either answers req (handled true), writing to w what git would
// write — from the entry on a hit, or following the entry's producer, which
// calls generate, on a miss — or declines without writing anything (handled
// false), and the caller runs git itself. An error with handled true may
// come after part of the answer was written. progress, when not nil,
// receives the queueing messages of the producer this request follows.
func (c *Cache) Serve(ctx context.Context, req *Request, w io.Writer, progress func(msg string), generate Generate) (bool, error) {
	if c.closed.Load() || req == nil {
		return false, nil
	}
	lk, reason := c.classify(ctx, req)
	if lk != nil && lk.outage {
		return c.serveOutage(ctx, lk, w)
	}
	if lk == nil {
		if reason != "" {
			c.bypassed.Add(1)
			c.m.lookups.WithLabelValues(kindOf(req), "bypass").Inc()
			c.logger.Debug("cache bypassed", "repo_id", req.RepoID, "reason", reason)
		}
		return false, nil
	}

	c.mu.Lock()
	e := c.entries[lk.key]
	var stale []*entry
	if e != nil && e.isReady() && c.now().Sub(e.created) > c.cfg.TTL {
		stale = append(stale, c.removeLocked(e, "ttl"))
		e = nil
	}
	if e != nil {
		// Opened under the lock: files leave the index before they leave
		// the disk, so an indexed entry's file is there to open.
		f, err := os.Open(e.path)
		if err != nil {
			if e.isReady() {
				stale = append(stale, c.removeLocked(e, "corrupt"))
			}
			c.mu.Unlock()
			c.dispose(stale)
			c.logger.Warn("open cache entry", "err", err)
			c.bypassed.Add(1)
			c.m.lookups.WithLabelValues(lk.kind, "bypass").Inc()
			return false, nil
		}
		if e.isReady() {
			c.lru.MoveToFront(e.elem)
			e.lastAccess = c.now()
			c.mu.Unlock()
			c.dispose(stale)
			return c.serveReady(ctx, lk, e, f, w)
		}
		c.joinLocked(e)
		c.mu.Unlock()
		defer c.leave(e)
		c.dispose(stale)
		c.coalesced.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "coalesced").Inc()
		defer e.fan.add(progress)()
		n, err := e.follow(ctx, f, w)
		c.served("cache", n)
		return true, err
	}
	sighted, before := c.sightedLocked(lk.key)
	if !sighted {
		c.mu.Unlock()
		c.dispose(stale)
		c.misses.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "miss").Inc()
		return false, nil
	}
	if !c.roomForMore() {
		c.mu.Unlock()
		c.dispose(stale)
		c.bypassed.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "bypass").Inc()
		return false, nil
	}
	e, f, err := c.createLocked(lk)
	if err != nil {
		c.mu.Unlock()
		c.dispose(stale)
		c.logger.Warn("create cache entry", "err", err)
		c.bypassed.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "bypass").Inc()
		return false, nil
	}
	// The producer runs for the entry, not for this client: it keeps
	// going if the client hangs up, for whoever else follows it, within
	// the bounds on abandoned producers. It inherits the request's values
	// (logging, tracing) but not its end. Its queueing messages go to
	// whoever waits on the entry (see produce).
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.requestedBefore = before
	c.joinLocked(e)
	c.producers.Add(1)
	c.mu.Unlock()
	defer c.leave(e)
	c.dispose(stale)
	c.misses.Add(1)
	c.m.lookups.WithLabelValues(lk.kind, "miss").Inc()

	defer e.fan.add(progress)()
	stop := context.AfterFunc(c.ctx, cancel)
	go func() {
		defer c.producers.Done()
		defer stop()
		defer cancel()
		c.produce(pctx, e, generate)
	}()
	n, ferr := e.follow(ctx, f, w)
	c.served("git", n)
	return true, ferr
}

func kindOf(req *Request) string {
	if req.Body == nil || req.Parsed != nil && req.Parsed.Command == "ls-refs" {
		return KindRefs
	}
	// Cheap: v2 ls-refs bodies start with the command line.
	if len(req.Body) > 4 && string(req.Body[4:min(len(req.Body), 4+len("command=ls-refs"))]) == "command=ls-refs" {
		return KindRefs
	}
	return KindPacks
}

// classify computes the key of req, or says why the cache stays out of it
// ("" when the kind is simply switched off).
func (c *Cache) classify(ctx context.Context, req *Request) (*lookup, string) {
	version := pktline.ProtocolVersion(req.Protocol)
	lk := &lookup{repoID: req.RepoID}
	var what string
	if req.Body == nil {
		lk.kind = KindRefs
		what = "advertisement"
		if req.Session && version < 2 {
			what = "session advertisement"
		}
	} else {
		ur := req.Parsed
		if ur == nil {
			return nil, "unparsed request"
		}
		if len(ur.Raw) != len(req.Body) {
			// Bytes after the request git would also read: the key
			// would not cover them.
			return nil, "trailing bytes"
		}
		lk.kind = KindPacks
		if ur.Command == "ls-refs" {
			lk.kind = KindRefs
		}
		what = "request " + ur.Key()
	}
	if lk.kind == KindPacks && !c.cfg.Packs || lk.kind == KindRefs && !c.cfg.Refs {
		return nil, ""
	}
	h := sha256.New()
	// The service is in the format from when requests named theirs; the
	// cache only ever answered upload-pack.
	prefix := fmt.Sprintf("sluice packcache 1\ngit %s\nrepo %d\nprotocol %q\nservice git-upload-pack\n", c.cfg.GitIdentity, req.RepoID, req.Protocol)
	h.Write([]byte(prefix))
	if req.Body == nil && version == 2 {
		lk.gen = -1
		fmt.Fprintf(h, "capabilities\n")
	} else {
		rk := sha256.Sum256([]byte(prefix + "request without generation\n" + what + "\n"))
		lk.reqKey = hex.EncodeToString(rk[:])
		state, err := c.store.RepoState(ctx, req.RepoID)
		if err != nil && problem.Is(err, problem.Unavailable) && c.cfg.RefsDigest != nil {
			lk.outage = true
			return lk, ""
		}
		if err != nil {
			c.logger.Warn("read refs generation", "repo_id", req.RepoID, "err", err)
			return nil, "no generation"
		}
		if state.Pending > 0 {
			return nil, "ref transaction pending"
		}
		lk.gen = state.Generation
		fmt.Fprintf(h, "generation %d\n%s\n", state.Generation, what)
	}
	lk.key = hex.EncodeToString(h.Sum(nil))
	return lk, ""
}

// sightedLocked says whether key has been seen often enough to be cached,
// and whether it was asked for before (within the TTL), recording this
// sight. The second answer decides whether an abandoned producer for it
// may finish, so keys are recorded with MinOccurrences 1 too.
func (c *Cache) sightedLocked(key string) (sighted, before bool) {
	seen, ok := c.sightings[key]
	before = ok && c.now().Sub(seen) <= c.cfg.TTL
	if before && c.cfg.MinOccurrences > 1 {
		delete(c.sightings, key)
		return true, true
	}
	if len(c.sightings) >= maxSightings {
		clear(c.sightings)
	}
	c.sightings[key] = c.now()
	return c.cfg.MinOccurrences <= 1, before
}

// roomForMore checks the free-space floor.
func (c *Cache) roomForMore() bool {
	_, free, err := c.cfg.Statfs(c.cfg.Dir)
	if err != nil {
		if !c.statfsWarned.Swap(true) {
			c.logger.Warn("cannot read free disk space; not caching", "err", err)
		}
		return false
	}
	if int64(free) < c.cfg.MinFreeBytes {
		if !c.statfsWarned.Swap(true) {
			c.logger.Warn("free disk space below the floor; caching paused", "free_bytes", free, "min_free_bytes", c.cfg.MinFreeBytes)
		}
		return false
	}
	c.statfsWarned.Store(false)
	return true
}

// createLocked makes an in-progress entry and its temporary file, and
// returns a second descriptor of it for the first client to follow.
func (c *Cache) createLocked(lk *lookup) (*entry, *os.File, error) {
	dir := filepath.Join(c.cfg.Dir, lk.key[:2])
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, err
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return nil, nil, err
	}
	e := &entry{
		key:     lk.key,
		kind:    lk.kind,
		repoID:  lk.repoID,
		gen:     lk.gen,
		reqKey:  lk.reqKey,
		created: c.now(),
		path:    f.Name(),
		file:    f,
		notify:  make(chan struct{}),
		hash:    sha256.New(),
	}
	e.lastAccess = e.created
	r, err := os.Open(f.Name())
	if err == nil {
		err = e.writeHeader()
	}
	if err != nil {
		if r != nil {
			r.Close()
		}
		f.Close()
		os.Remove(f.Name())
		return nil, nil, err
	}
	c.entries[lk.key] = e
	return e, r, nil
}

// produce runs git into e and then keeps, or drops, the entry. The queueing
// messages of its wait for a ticket go to every client following e.
func (c *Cache) produce(ctx context.Context, e *entry, generate Generate) {
	refsBefore := c.refsDigest(e)
	err := generate(ctx, e, e.fan.send)
	// From here the response is as good as complete: it is never
	// abandoned, whoever leaves.
	c.mu.Lock()
	e.produced = true
	if e.orphanTimer != nil {
		e.orphanTimer.Stop()
	}
	c.mu.Unlock()
	if aerr := e.abandonedErr(); aerr != nil {
		err = aerr
	}
	if err == nil {
		err = e.finish()
	}
	c.generated.Add(e.size())
	c.m.generated.Add(float64(e.size()))
	if err != nil {
		c.mu.Lock()
		if c.entries[e.key] == e {
			delete(c.entries, e.key)
		}
		c.mu.Unlock()
		e.fail(err)
		return
	}
	keep := e.gen < 0
	if !keep {
		// Refs that moved while git ran may or may not be in the
		// response; either way it must not outlive this request.
		state, serr := c.store.RepoState(ctx, e.repoID)
		keep = serr == nil && state.Generation == e.gen && state.Pending == 0
		// The ref files read the same before and after git ran, so
		// they are what git answered from.
		if refsBefore != "" && c.refsDigest(e) == refsBefore {
			e.refs = refsBefore
		}
	}
	final := filepath.Join(c.cfg.Dir, e.key[:2], e.key)
	var victims []*entry
	c.mu.Lock()
	if c.entries[e.key] != e || e.dropped {
		keep = false
	}
	if keep {
		if rerr := os.Rename(e.path, final); rerr != nil {
			c.logger.Warn("store cache entry", "err", rerr)
			keep = false
		}
	}
	if keep {
		e.path = final
		e.elem = c.lru.PushFront(e)
		c.diskBytes += e.fileSize()
		if e.refs != "" {
			c.byRequest[e.reqKey] = e
		}
		victims = c.evictLocked()
	} else if c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	c.mu.Unlock()
	if !keep {
		e.discard()
	}
	c.dispose(victims)
}

// evictLocked removes least recently used entries until the budget holds.
func (c *Cache) evictLocked() []*entry {
	var out []*entry
	for c.diskBytes > c.budget && c.lru.Len() > 0 {
		out = append(out, c.removeLocked(c.lru.Back().Value.(*entry), "budget"))
	}
	return out
}

// removeLocked takes a ready entry out of the index and counts the
// eviction; dispose deletes its file outside the lock.
func (c *Cache) removeLocked(e *entry, reason string) *entry {
	delete(c.entries, e.key)
	if c.byRequest[e.reqKey] == e {
		delete(c.byRequest, e.reqKey)
	}
	c.lru.Remove(e.elem)
	c.diskBytes -= e.fileSize()
	c.countEviction(reason)
	return e
}

// dispose deletes evicted entries' files. Clients already streaming one
// keep their open descriptor and finish.
func (c *Cache) dispose(victims []*entry) {
	for _, e := range victims {
		if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.logger.Warn("remove cache entry", "err", err)
		}
	}
}

func (c *Cache) countEviction(reason string) {
	c.m.evictions.WithLabelValues(reason).Inc()
	c.evictedMu.Lock()
	c.evicted[reason]++
	c.evictedMu.Unlock()
}

// serveReady streams a complete entry from f, checking an entry found on
// disk at start once before its first use.
func (c *Cache) serveReady(ctx context.Context, lk *lookup, e *entry, f *os.File, w io.Writer) (bool, error) {
	defer f.Close()
	if err := e.verify(f); err != nil {
		c.logger.Warn("discarding cache entry", "repo_id", e.repoID, "err", err)
		c.drop(e, "corrupt")
		c.bypassed.Add(1)
		c.m.lookups.WithLabelValues(lk.kind, "bypass").Inc()
		return false, nil
	}
	c.hits.Add(1)
	c.m.lookups.WithLabelValues(lk.kind, "hit").Inc()
	// Knowing the length lets HTTP send a Content-Length instead of
	// chunking, and only an unchunked response can use sendfile.
	if ls, ok := w.(interface{ SetContentLength(int64) }); ok {
		ls.SetContentLength(e.payloadLen())
	}
	n, err := copyPayload(w, f, 0, e.payloadLen())
	c.served("cache", n)
	if err == nil && n < e.payloadLen() {
		// Shrunk under us: the client has a partial answer and must
		// see a failure; the entry goes.
		c.drop(e, "corrupt")
		err = fmt.Errorf("cache entry truncated at %d of %d bytes", n, e.payloadLen())
	}
	return true, err
}

// drop removes a ready entry if it is still indexed.
func (c *Cache) drop(e *entry, reason string) {
	c.mu.Lock()
	var victims []*entry
	if c.entries[e.key] == e && e.elem != nil {
		victims = append(victims, c.removeLocked(e, reason))
	}
	c.mu.Unlock()
	c.dispose(victims)
}

func (c *Cache) served(source string, n int64) {
	if source == "cache" {
		c.servedCache.Add(n)
	} else {
		c.servedGit.Add(n)
	}
	c.m.served.WithLabelValues(source).Add(float64(n))
}

// Invalidate frees the entries of a repository whose refs changed. Those
// entries can no longer be hit (their generation is gone), so this is only
// about disk space; the capability advertisement stays.
func (c *Cache) Invalidate(repoID int64) {
	c.removeRepo(repoID, "refs_changed", false)
}

// ClearRepo removes every entry of a repository, the capability
// advertisement included, and keeps responses being produced now from
// being stored. It returns how many entries and bytes it removed.
func (c *Cache) ClearRepo(repoID int64) (entries int, bytes int64) {
	return c.removeRepo(repoID, "cleared", true)
}

func (c *Cache) removeRepo(repoID int64, reason string, all bool) (int, int64) {
	var victims []*entry
	var n int64
	c.mu.Lock()
	for _, e := range c.entries {
		if e.repoID != repoID || (!all && e.gen < 0) {
			continue
		}
		if e.elem == nil {
			e.dropped = true // in progress: followers finish, nothing is kept
			continue
		}
		n += e.fileSize()
		victims = append(victims, c.removeLocked(e, reason))
	}
	c.mu.Unlock()
	c.dispose(victims)
	return len(victims), n
}

// Stats is a snapshot for the admin API.
type Stats struct {
	Packs          bool             `json:"packs"`
	Refs           bool             `json:"refs"`
	Entries        int              `json:"entries"`
	InProgress     int              `json:"inProgress"`
	DiskBytes      int64            `json:"diskBytes"`
	MaxBytes       int64            `json:"maxBytes"`
	MinFreeBytes   int64            `json:"minFreeBytes"`
	FreeBytes      int64            `json:"freeBytes"`
	TTLSeconds     int64            `json:"ttlSeconds"`
	MinOccurrences int              `json:"minOccurrences"`
	Hits           int64            `json:"hits"`
	Misses         int64            `json:"misses"`
	Coalesced      int64            `json:"coalesced"`
	Bypassed       int64            `json:"bypassed"`
	BytesFromCache int64            `json:"bytesServedFromCache"`
	BytesFromGit   int64            `json:"bytesServedFromGit"`
	BytesGenerated int64            `json:"bytesGenerated"`
	Evictions      map[string]int64 `json:"evictions"`
}

// Stats returns the cache's current state and counters.
func (c *Cache) Stats() Stats {
	s := Stats{
		Packs: c.cfg.Packs, Refs: c.cfg.Refs,
		MaxBytes: c.budget, MinFreeBytes: c.cfg.MinFreeBytes,
		TTLSeconds: int64(c.cfg.TTL / time.Second), MinOccurrences: c.cfg.MinOccurrences,
		Hits: c.hits.Load(), Misses: c.misses.Load(), Coalesced: c.coalesced.Load(), Bypassed: c.bypassed.Load(),
		BytesFromCache: c.servedCache.Load(), BytesFromGit: c.servedGit.Load(), BytesGenerated: c.generated.Load(),
		Evictions: map[string]int64{},
	}
	if _, free, err := c.cfg.Statfs(c.cfg.Dir); err == nil {
		s.FreeBytes = int64(free)
	}
	c.mu.Lock()
	s.Entries = c.lru.Len()
	s.InProgress = len(c.entries) - c.lru.Len()
	s.DiskBytes = c.diskBytes
	c.mu.Unlock()
	c.evictedMu.Lock()
	for k, v := range c.evicted {
		s.Evictions[k] = v
	}
	c.evictedMu.Unlock()
	return s
}

// runJanitor evicts expired entries and forgets old sightings.
func (c *Cache) runJanitor() {
	defer close(c.janitorDone)
	t := time.NewTicker(c.janitorEvery)
	defer t.Stop()
	for {
		select {
		case <-c.janitor:
			return
		case <-t.C:
			c.expire()
		}
	}
}

func (c *Cache) expire() {
	now := c.now()
	var victims []*entry
	c.mu.Lock()
	for el := c.lru.Back(); el != nil; {
		prev := el.Prev()
		if e := el.Value.(*entry); now.Sub(e.created) > c.cfg.TTL {
			victims = append(victims, c.removeLocked(e, "ttl"))
		}
		el = prev
	}
	for k, seen := range c.sightings {
		if now.Sub(seen) > c.cfg.TTL {
			delete(c.sightings, k)
		}
	}
	c.mu.Unlock()
	c.dispose(victims)
}

// load rebuilds the index from Dir, removing temporary and damaged files.
func (c *Cache) load() error {
	dirs, err := os.ReadDir(c.cfg.Dir)
	if err != nil {
		return fmt.Errorf("read cache directory: %w", err)
	}
	var kept, removed int
	for _, d := range dirs {
		if !d.IsDir() || !isFanout(d.Name()) {
			continue
		}
		sub := filepath.Join(c.cfg.Dir, d.Name())
		files, err := os.ReadDir(sub)
		if err != nil {
			return fmt.Errorf("read cache directory: %w", err)
		}
		for _, fe := range files {
			p := filepath.Join(sub, fe.Name())
			e, err := loadEntry(p, fe.Name(), d.Name())
			if err != nil {
				c.logger.Info("removing cache file", "file", p, "reason", err.Error())
				if rerr := os.RemoveAll(p); rerr != nil {
					c.logger.Warn("remove cache file", "file", p, "err", rerr)
				}
				removed++
				continue
			}
			if c.now().Sub(e.created) > c.cfg.TTL {
				os.Remove(p)
				removed++
				continue
			}
			c.entries[e.key] = e
			kept++
		}
	}
	// Oldest first, so the LRU starts in creation order.
	ready := make([]*entry, 0, len(c.entries))
	for _, e := range c.entries {
		ready = append(ready, e)
	}
	sortByCreated(ready)
	for _, e := range ready {
		e.elem = c.lru.PushFront(e)
		c.diskBytes += e.fileSize()
	}
	c.dispose(c.evictLocked())
	if kept > 0 || removed > 0 {
		c.logger.Info("cache index rebuilt", "entries", kept, "removed_files", removed, "disk_bytes", c.diskBytes)
	}
	return nil
}

func isFanout(name string) bool {
	if len(name) != 2 {
		return false
	}
	_, err := strconv.ParseUint(name, 16, 8)
	return err == nil && name == strings.ToLower(name)
}

func statfs(dir string) (total, free uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}
