package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"
)

// verifiedCache remembers password checks that succeeded, so that git
// clients sending Basic credentials on every request (every fetch is two or
// three HTTP requests) pay for one argon2id verification, not one per
// request: argon2id is deliberately expensive, and the benchmark showed it
// dominating the CPU of an ls-remote.
//
// It is not a permission cache and cannot go stale in a way that matters:
// an entry says "this password matched this stored hash". The user row is
// read on every request anyway, and a hit requires the stored hash to be
// unchanged, so a password change or reset invalidates it at once; a
// disabled or deleted user fails on the row. Keys are HMAC-SHA256 under a
// per-process random key, so the map holds nothing an attacker could
// brute-force offline even from a memory dump of this process alone.
type verifiedCache struct {
	mu      sync.Mutex
	key     [32]byte
	entries map[[32]byte]verifiedEntry
	ttl     time.Duration
	max     int
}

type verifiedEntry struct {
	hash string // the stored PHC string the password matched
	at   time.Time
}

// verifiedTTL bounds how long one argon2id verification is reused; five
// minutes covers a CI job's burst of git requests.
const (
	verifiedTTL = 5 * time.Minute
	verifiedMax = 10000
)

func newVerifiedCache() *verifiedCache {
	c := &verifiedCache{entries: make(map[[32]byte]verifiedEntry), ttl: verifiedTTL, max: verifiedMax}
	if _, err := rand.Read(c.key[:]); err != nil {
		panic("auth: no randomness for the verified-password cache: " + err.Error())
	}
	return c
}

func (c *verifiedCache) id(name, pw string) [32]byte {
	m := hmac.New(sha256.New, c.key[:])
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(pw))
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}

// hit reports whether name/pw was verified against storedHash recently.
func (c *verifiedCache) hit(name, pw, storedHash string, now time.Time) bool {
	id := c.id(name, pw)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok {
		return false
	}
	if e.hash != storedHash || now.Sub(e.at) > c.ttl {
		delete(c.entries, id)
		return false
	}
	return true
}

func (c *verifiedCache) add(name, pw, storedHash string, now time.Time) {
	id := c.id(name, pw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		// Drop expired entries; if none are, drop an arbitrary half. A
		// miss only costs one more verification.
		for k, e := range c.entries {
			if now.Sub(e.at) > c.ttl || len(c.entries) >= c.max/2 {
				delete(c.entries, k)
			}
		}
	}
	c.entries[id] = verifiedEntry{hash: storedHash, at: now}
}
