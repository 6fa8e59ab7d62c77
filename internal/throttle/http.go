package throttle

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Middleware rate-limits every request to next (the REST API) by the
// caller's principal, and reports the bucket in X-RateLimit-Limit and
// X-RateLimit-Remaining on every answer. A refusal is 429 with
// Retry-After, in the API's error shape.
//
// It has to know who is calling before the API authenticates, and a
// password check costs tens of milliseconds of argon2: verified
// identities are remembered for a minute by the SHA-256 of the
// Authorization header, so a client pays the check here once a minute,
// not on every request. Credentials that fail are charged to the caller's
// address, like an anonymous request; the API then refuses them itself.
// The identity is used for the bucket only, never to authorize.
func (t *Throttle) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := t.identify(r)
		d := t.rl.take(p, r.RemoteAddr)
		if !d.unlimited {
			w.Header().Set("X-RateLimit-Limit", strconv.Itoa(d.limit))
			w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(d.remaining))
		}
		if d.allowed {
			next.ServeHTTP(w, r)
			return
		}
		t.m.limited.WithLabelValues(d.class).Inc()
		t.logger.Info("request rate limited", "principal", principalName(p), "class", d.class, "request", "rest",
			"method", r.Method, "path", r.URL.Path, "remote_addr", r.RemoteAddr, "bucket", d.limit, "retry_after", d.retryAfter)
		err := rateLimitError(d)
		h := w.Header()
		SetHeaders(h, err)
		h.Set("Content-Type", "application/json;charset=UTF-8")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache, no-store")
		w.WriteHeader(http.StatusTooManyRequests)
		// Bitbucket's error document, as the API writes it.
		body, _ := jsonMarshal(map[string]any{"errors": []map[string]any{{
			"context": nil, "message": problem.Message(err), "exceptionName": nil,
		}}})
		_, _ = w.Write(append(body, '\n'))
	})
}

// identify returns the principal a request's bucket belongs to.
func (t *Throttle) identify(r *http.Request) *auth.Principal {
	values := r.Header.Values("Authorization")
	if len(values) == 0 || t.opts.Auth == nil {
		return auth.Anonymous()
	}
	h := sha256.Sum256([]byte(values[0]))
	if p, ok := t.idents.get(h); ok {
		return p
	}
	p, err := t.opts.Auth.AuthenticateHTTP(r)
	if err != nil || p == nil {
		p = auth.Anonymous()
	}
	t.idents.put(h, p)
	return p
}

// identityCache remembers principals by credential digest, bounded.
type identityCache struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[[32]byte]identity
}

type identity struct {
	p       *auth.Principal
	expires time.Time
}

const (
	identityTTL = time.Minute
	// maxIdentities bounds the cache; when full it starts over, which
	// costs each active client one more check.
	maxIdentities = 10_000
)

func newIdentityCache(now func() time.Time) *identityCache {
	return &identityCache{now: now, m: make(map[[32]byte]identity)}
}

func (c *identityCache) get(h [32]byte) (*auth.Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.m[h]
	if !ok || !c.now().Before(id.expires) {
		return nil, false
	}
	return id.p, true
}

func (c *identityCache) put(h [32]byte, p *auth.Principal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxIdentities {
		clear(c.m)
	}
	c.m[h] = identity{p: p, expires: c.now().Add(identityTTL)}
}

// jsonMarshal encodes v without HTML escaping surprises in stored text.
func jsonMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
