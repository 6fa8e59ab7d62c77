package throttle

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// SettingRateLimits is the store setting holding the RateLimits document.
const SettingRateLimits = "throttle.rate_limits"

// RateLimits is the run-time rate-limit configuration, stored as JSON in
// the settings table and edited through the admin REST API. Until an
// administrator saves one, the config file's throttle.rate_* values apply.
type RateLimits struct {
	Enabled bool `json:"enabled"`
	// Bucket is how many requests a principal may make in a burst;
	// Refill how many it earns back per second.
	Bucket     int         `json:"bucket"`
	Refill     float64     `json:"refill"`
	Exemptions []Exemption `json:"exemptions"`
}

// Exemption gives one user, every member of one group, or one access
// token its own limit or none. Exactly one of User, Group and Token is set.
// A token's exemption beats its user's, a user's beats a group's, and
// among groups the most generous wins.
type Exemption struct {
	User      string  `json:"user,omitempty"`
	Group     string  `json:"group,omitempty"`
	Token     int64   `json:"token,omitempty"`
	Unlimited bool    `json:"unlimited,omitempty"`
	Bucket    int     `json:"bucket,omitempty"`
	Refill    float64 `json:"refill,omitempty"`
}

// maxExemptions bounds the document; exemptions are for a handful of build
// services, not a per-user table.
const maxExemptions = 1000

// Validate checks a document's shape (not that its users and groups exist).
func (r *RateLimits) Validate() error {
	if r.Bucket < 1 || r.Refill <= 0 || math.IsInf(r.Refill, 0) || math.IsNaN(r.Refill) {
		return problem.New(problem.Invalid, "bucket must be at least 1 and refill positive")
	}
	if len(r.Exemptions) > maxExemptions {
		return problem.New(problem.Invalid, "at most %d exemptions", maxExemptions)
	}
	seen := make(map[string]bool)
	for i, e := range r.Exemptions {
		targets := 0
		var id string
		if e.User != "" {
			targets++
			id = "user " + strings.ToLower(e.User)
		}
		if e.Group != "" {
			targets++
			id = "group " + strings.ToLower(e.Group)
		}
		if e.Token != 0 {
			targets++
			id = "token " + strconv.FormatInt(e.Token, 10)
		}
		if targets != 1 || e.Token < 0 {
			return problem.New(problem.Invalid, "exemption %d: name exactly one of user, group and token", i+1)
		}
		if seen[id] {
			return problem.New(problem.Invalid, "exemption %d: %s is listed twice", i+1, id)
		}
		seen[id] = true
		if e.Unlimited {
			if e.Bucket != 0 || e.Refill != 0 {
				return problem.New(problem.Invalid, "exemption %d: an unlimited exemption has no bucket or refill", i+1)
			}
			continue
		}
		if e.Bucket < 1 || e.Refill <= 0 || math.IsInf(e.Refill, 0) || math.IsNaN(e.Refill) {
			return problem.New(problem.Invalid, "exemption %d: bucket must be at least 1 and refill positive, or unlimited true", i+1)
		}
	}
	return nil
}

// spec is one principal's limit.
type spec struct {
	unlimited bool
	bucket    int
	refill    float64
}

func (s spec) better(o spec) bool {
	if s.unlimited || o.unlimited {
		return s.unlimited && !o.unlimited
	}
	return s.refill > o.refill || (s.refill == o.refill && s.bucket > o.bucket)
}

// Principal classes for sluice_throttle_rate_limited_total.
const (
	classUser      = "user"
	classAnonymous = "anonymous"
	classToken     = "token"
)

// bucket is a token bucket, refilled lazily when used.
type bucket struct {
	key    string
	tokens float64
	last   time.Time
	spec   spec
}

// rateLimiter holds the buckets and the compiled settings.
type rateLimiter struct {
	now        func() time.Time
	maxBuckets int

	mu       sync.Mutex
	settings RateLimits
	raw      string // the setting as last read, to skip unchanged polls
	fromDB   bool
	def      spec
	users    map[string]spec // lower-case user name
	members  map[int64]spec  // user id, from group exemptions
	tokens   map[int64]spec
	buckets  map[string]*list.Element
	lru      *list.List // front: most recently used
}

func newRateLimiter(def RateLimits, maxBuckets int, now func() time.Time) *rateLimiter {
	r := &rateLimiter{now: now, maxBuckets: maxBuckets, buckets: make(map[string]*list.Element), lru: list.New()}
	r.apply(def, nil, "", false)
	return r
}

// apply installs settings; members maps group-exempted user ids to their
// spec, resolved by the caller against the store.
func (r *rateLimiter) apply(s RateLimits, members map[int64]spec, raw string, fromDB bool) {
	users := make(map[string]spec)
	tokens := make(map[int64]spec)
	for _, e := range s.Exemptions {
		sp := spec{unlimited: e.Unlimited, bucket: e.Bucket, refill: e.Refill}
		switch {
		case e.User != "":
			users[strings.ToLower(e.User)] = sp
		case e.Token != 0:
			tokens[e.Token] = sp
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settings, r.raw, r.fromDB = s, raw, fromDB
	r.def = spec{bucket: s.Bucket, refill: s.Refill}
	r.users, r.tokens, r.members = users, tokens, members
}

func (r *rateLimiter) current() (RateLimits, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.settings, r.raw, r.fromDB
}

// decision is the outcome of charging one request.
type decision struct {
	allowed    bool
	unlimited  bool
	limit      int
	remaining  int
	retryAfter int // seconds, when refused
	class      string
}

// identify returns p's bucket key, limit and class. remote is host:port or
// a bare host.
func (r *rateLimiter) identify(p *auth.Principal, remote string) (string, spec, string) {
	if p.IsAnonymous() {
		return "ip:" + hostOf(remote), r.def, classAnonymous
	}
	if p.ResourceToken != nil { // a project's or repository's token: its own bucket
		return "rt:" + strconv.FormatInt(p.ResourceToken.ID, 10), r.def, classToken
	}
	class := classUser
	if p.TokenID != 0 {
		class = classToken
		if sp, ok := r.tokens[p.TokenID]; ok {
			return "t:" + strconv.FormatInt(p.TokenID, 10), sp, class
		}
	}
	if p.UserID == 0 { // an SSH access key: a repository's, not a user's
		return "k:" + strconv.FormatInt(p.AccessKeyID, 10), r.def, class
	}
	key := "u:" + strconv.FormatInt(p.UserID, 10)
	if sp, ok := r.users[strings.ToLower(p.Name)]; ok {
		return key, sp, class
	}
	if sp, ok := r.members[p.UserID]; ok {
		return key, sp, class
	}
	return key, r.def, class
}

func hostOf(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// take charges one request to p.
func (r *rateLimiter) take(p *auth.Principal, remote string) decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	key, sp, class := r.identify(p, remote)
	d := decision{class: class}
	if !r.settings.Enabled || sp.unlimited {
		d.allowed, d.unlimited = true, true
		return d
	}
	now := r.now()
	var b *bucket
	if el, ok := r.buckets[key]; ok {
		r.lru.MoveToFront(el)
		b = el.Value.(*bucket)
		b.tokens = min(float64(sp.bucket), b.tokens+now.Sub(b.last).Seconds()*sp.refill)
		if b.spec != sp {
			// Settings changed: keep what was earned, within the new size.
			b.tokens = min(b.tokens, float64(sp.bucket))
			b.spec = sp
		}
		b.last = now
	} else {
		b = &bucket{key: key, tokens: float64(sp.bucket), last: now, spec: sp}
		r.buckets[key] = r.lru.PushFront(b)
		for len(r.buckets) > r.maxBuckets {
			// Losing the least recently used bucket forgets at most
			// that principal's debt, which refills within
			// bucket/refill seconds anyway.
			old := r.lru.Back()
			r.lru.Remove(old)
			delete(r.buckets, old.Value.(*bucket).key)
		}
	}
	d.limit = sp.bucket
	if b.tokens >= 1 {
		b.tokens--
		d.allowed = true
		d.remaining = int(b.tokens)
		return d
	}
	d.retryAfter = max(1, int(math.Ceil((1-b.tokens)/sp.refill)))
	return d
}

// sweep drops buckets that have refilled completely: a full bucket is the
// same as none, so idle principals cost nothing. It walks every bucket,
// which at the map's bound is some milliseconds once per poll.
func (r *rateLimiter) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for el := r.lru.Back(); el != nil; {
		prev := el.Prev()
		b := el.Value.(*bucket)
		if b.tokens+now.Sub(b.last).Seconds()*b.spec.refill >= float64(b.spec.bucket) {
			r.lru.Remove(el)
			delete(r.buckets, b.key)
		}
		el = prev
	}
}

func (r *rateLimiter) size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buckets)
}

// Limited is the cause carried by a rate-limit refusal: the numbers the
// X-RateLimit-* headers report.
type Limited struct {
	Limit, Remaining int
}

func (l *Limited) Error() string {
	return fmt.Sprintf("rate limited: bucket %d, %d left", l.Limit, l.Remaining)
}

// SetHeaders sets the X-RateLimit-Limit and X-RateLimit-Remaining headers
// (and Retry-After) when err is a rate-limit refusal. Transports call it
// when they render such an error as an HTTP response.
func SetHeaders(h http.Header, err error) {
	var l *Limited
	if !errors.As(err, &l) {
		return
	}
	h.Set("X-RateLimit-Limit", strconv.Itoa(l.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(l.Remaining))
	if ra := problem.RetryAfter(err); ra > 0 {
		h.Set("Retry-After", strconv.Itoa(ra))
	}
}

func rateLimitError(d decision) error {
	return &problem.Error{
		Kind:       problem.Throttled,
		Message:    "rate limit exceeded: too many requests; slow down and try again later",
		Cause:      &Limited{Limit: d.limit, Remaining: d.remaining},
		RetryAfter: d.retryAfter,
	}
}

// loadRateLimits reads the stored document; ok is false when none is
// stored, in which case the config's defaults apply.
func loadRateLimits(ctx context.Context, st store.Store) (raw string, rl RateLimits, ok bool, err error) {
	raw, err = st.GetSetting(ctx, SettingRateLimits)
	if problem.Is(err, problem.NotFound) {
		return "", RateLimits{}, false, nil
	}
	if err != nil {
		return "", RateLimits{}, false, fmt.Errorf("read rate limits: %w", err)
	}
	if err := json.Unmarshal([]byte(raw), &rl); err != nil {
		return raw, RateLimits{}, false, fmt.Errorf("decode rate limits: %w", err)
	}
	if err := rl.Validate(); err != nil {
		return raw, RateLimits{}, false, fmt.Errorf("stored rate limits: %w", err)
	}
	return raw, rl, true, nil
}

// resolveGroups maps every member of an exempted group to the most generous
// spec among its groups. A group that no longer exists is skipped.
func resolveGroups(ctx context.Context, st store.Store, rl RateLimits) (map[int64]spec, error) {
	members := make(map[int64]spec)
	for _, e := range rl.Exemptions {
		if e.Group == "" {
			continue
		}
		g, err := st.GroupByName(ctx, e.Group)
		if problem.Is(err, problem.NotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read group %q: %w", e.Group, err)
		}
		users, err := st.GroupMembers(ctx, g.ID)
		if err != nil {
			return nil, fmt.Errorf("read members of %q: %w", e.Group, err)
		}
		sp := spec{unlimited: e.Unlimited, bucket: e.Bucket, refill: e.Refill}
		for _, u := range users {
			if old, ok := members[u.ID]; !ok || sp.better(old) {
				members[u.ID] = sp
			}
		}
	}
	return members, nil
}
