package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/argon2"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestHashPasswordRoundTrip(t *testing.T) {
	h, err := HashPassword("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$", argonMemory, argonTime, argonThreads)
	if !strings.HasPrefix(h, prefix) {
		t.Fatalf("hash %q does not start with %q", h, prefix)
	}
	if !VerifyPassword(h, "s3cret") {
		t.Error("right password rejected")
	}
	for _, pw := range []string{"s3cret ", "S3cret", "", "s3cre"} {
		if VerifyPassword(h, pw) {
			t.Errorf("wrong password %q accepted", pw)
		}
	}
	h2, err := HashPassword("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if h2 == h {
		t.Error("two hashes of one password are equal: salt not random")
	}
}

func TestHashPasswordLength(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, false}, {1, true}, {maxPasswordLen, true}, {maxPasswordLen + 1, false}} {
		pw := strings.Repeat("x", tc.n)
		h, err := HashPassword(pw)
		if (err == nil) != tc.ok {
			t.Errorf("length %d: err = %v", tc.n, err)
		}
		if err != nil && !problem.Is(err, problem.Invalid) {
			t.Errorf("length %d: kind %v, want invalid", tc.n, problem.KindOf(err))
		}
		if tc.ok && !VerifyPassword(h, pw) {
			t.Errorf("length %d: does not verify", tc.n)
		}
	}
}

// TestVerifyPasswordTamper: every part of the PHC string matters, and
// malformed strings never verify.
func TestVerifyPasswordTamper(t *testing.T) {
	h, err := HashPassword("pw")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(h, "$")
	flip := func(b64 string) string {
		raw, err := base64.RawStdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		raw[0] ^= 1
		return base64.RawStdEncoding.EncodeToString(raw)
	}
	join := func(p ...string) string { return strings.Join(p, "$") }
	for name, bad := range map[string]string{
		"hash bit":       join("", "argon2id", parts[2], parts[3], parts[4], flip(parts[5])),
		"salt bit":       join("", "argon2id", parts[2], parts[3], flip(parts[4]), parts[5]),
		"time":           join("", "argon2id", parts[2], "m=19456,t=3,p=1", parts[4], parts[5]),
		"memory":         join("", "argon2id", parts[2], "m=19457,t=2,p=1", parts[4], parts[5]),
		"argon2i":        join("", "argon2i", parts[2], parts[3], parts[4], parts[5]),
		"version":        join("", "argon2id", "v=16", parts[3], parts[4], parts[5]),
		"huge memory":    join("", "argon2id", parts[2], "m=4294967295,t=2,p=1", parts[4], parts[5]),
		"zero time":      join("", "argon2id", parts[2], "m=19456,t=0,p=1", parts[4], parts[5]),
		"missing param":  join("", "argon2id", parts[2], "m=19456,t=2", parts[4], parts[5]),
		"extra param":    join("", "argon2id", parts[2], parts[3]+",x=1", parts[4], parts[5]),
		"padded base64":  join("", "argon2id", parts[2], parts[3], parts[4]+"==", parts[5]),
		"truncated":      join("", "argon2id", parts[2], parts[3], parts[4]),
		"empty":          "",
		"bcrypt":         "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy",
		"short key":      join("", "argon2id", parts[2], parts[3], parts[4], "AAAA"),
		"trailing field": h + "$",
	} {
		if VerifyPassword(bad, "pw") {
			t.Errorf("%s: tampered hash %q verified", name, bad)
		}
	}
	if !VerifyPassword(h, "pw") {
		t.Error("untampered hash does not verify")
	}
}

// TestVerifyPasswordReadsParameters: parameters come from the hash, so
// hashes made with other costs keep working after the defaults change.
func TestVerifyPasswordReadsParameters(t *testing.T) {
	salt := []byte("0123456789abcdef")
	for _, params := range []struct {
		m, t uint32
		p    uint8
	}{{8, 1, 1}, {4096, 3, 2}, {7168, 5, 1}} {
		h := phcString(params.m, params.t, params.p, salt, "pw")
		if !VerifyPassword(h, "pw") {
			t.Errorf("m=%d,t=%d,p=%d: does not verify", params.m, params.t, params.p)
		}
		if VerifyPassword(h, "other") {
			t.Errorf("m=%d,t=%d,p=%d: wrong password verifies", params.m, params.t, params.p)
		}
	}
}

func TestPasswordLogin(t *testing.T) {
	eachStore(t, testPasswordLogin)
}

func testPasswordLogin(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)
	p, err := w.svc.Password(ctx, "ALICE", worldPassword)
	if err != nil {
		t.Fatal(err)
	}
	if p.UserID != w.users["alice"].ID || p.Name != "alice" || p.Scope != "" || p.Anonymous {
		t.Errorf("principal %+v", p)
	}
	for _, tc := range []struct{ name, user, pw string }{
		{"wrong password", "alice", "nope"},
		{"unknown user", "mallory", worldPassword},
		{"no password set", "rita", worldPassword},
		{"empty password", "alice", ""},
		{"empty user", "", worldPassword},
		{"NUL in user", "alice\x00", worldPassword},
		{"too long", "alice", strings.Repeat("x", maxPasswordLen+1)},
	} {
		_, err := w.svc.Password(ctx, tc.user, tc.pw)
		if !problem.Is(err, problem.Unauthenticated) || problem.Message(err) != msgBadPassword {
			t.Errorf("%s: %v, want %q", tc.name, err, msgBadPassword)
		}
	}
	if got := testutil.ToFloat64(w.svc.attempts.WithLabelValues(methodPassword, outcomeFailure)); got != 7 {
		t.Errorf("failures counted: %v, want 7", got)
	}
	if got := testutil.ToFloat64(w.svc.attempts.WithLabelValues(methodPassword, outcomeSuccess)); got != 1 {
		t.Errorf("successes counted: %v, want 1", got)
	}
}

func TestPasswordLoginDisabledUser(t *testing.T) {
	eachStore(t, testPasswordLoginDisabledUser)
}

func testPasswordLoginDisabledUser(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)
	u := *w.users["alice"]
	u.Active = false
	must(t, st.UpdateUser(ctx, &u))
	_, err := w.svc.Password(ctx, "alice", worldPassword)
	if !problem.Is(err, problem.Unauthenticated) || problem.Message(err) != msgBadPassword {
		t.Errorf("disabled user with right password: %v", err)
	}
}

// TestPasswordLoginUnknownUserVerifies: an unknown name must cost one
// password verification like a known one, or response times list users.
func TestPasswordLoginUnknownUserVerifies(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, newFakeStore())
	var mu sync.Mutex
	var hashes []string
	w.svc.verify = func(hash, pw string) bool {
		mu.Lock()
		hashes = append(hashes, hash)
		mu.Unlock()
		return VerifyPassword(hash, pw)
	}
	for _, user := range []string{"mallory", "rita", "alice", ""} {
		hashes = nil
		if _, err := w.svc.Password(ctx, user, "guess"); !problem.Is(err, problem.Unauthenticated) {
			t.Fatalf("%q: %v", user, err)
		}
		if len(hashes) != 1 {
			t.Fatalf("%q: %d verifications, want 1", user, len(hashes))
		}
		wantDummy := user != "alice"
		if (hashes[0] == dummyHash()) != wantDummy {
			t.Errorf("%q: verified against the dummy hash = %v, want %v", user, !wantDummy, wantDummy)
		}
	}
	if VerifyPassword(dummyHash(), "guess") {
		t.Error("dummy hash verifies a guess")
	}
}

// phcString builds a PHC string with chosen parameters, independently of
// HashPassword's defaults.
func phcString(m, t uint32, p uint8, salt []byte, pw string) string {
	key := argon2.IDKey([]byte(pw), salt, t, m, p, 32)
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", m, t, p,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// TestPasswordVerifiedOnce: a client repeating the same credentials pays
// for one argon2id verification; a changed password hash, a wrong password
// and a disabled user are never served from the cache.
func TestPasswordVerifiedOnce(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	w := newWorld(t, st)
	var calls int
	var mu sync.Mutex
	w.svc.verify = func(hash, pw string) bool {
		mu.Lock()
		calls++
		mu.Unlock()
		return VerifyPassword(hash, pw)
	}
	for i := 0; i < 5; i++ {
		if _, err := w.svc.Password(ctx, "alice", worldPassword); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("5 logins cost %d verifications, want 1", calls)
	}
	if _, err := w.svc.Password(ctx, "alice", "wrong"); !problem.Is(err, problem.Unauthenticated) {
		t.Fatalf("wrong password after a cached success: %v", err)
	}

	// A password change replaces the stored hash: the old password must
	// fail at once, though it was verified a moment ago.
	u, err := st.UserByName(ctx, "alice")
	must(t, err)
	u.PasswordHash, err = HashPassword("new-password")
	must(t, err)
	must(t, st.UpdateUser(ctx, u))
	if _, err := w.svc.Password(ctx, "alice", worldPassword); !problem.Is(err, problem.Unauthenticated) {
		t.Fatalf("old password after a change: %v", err)
	}
	if _, err := w.svc.Password(ctx, "alice", "new-password"); err != nil {
		t.Fatalf("new password: %v", err)
	}
	u.Active = false
	must(t, st.UpdateUser(ctx, u))
	if _, err := w.svc.Password(ctx, "alice", "new-password"); !problem.Is(err, problem.Unauthenticated) {
		t.Fatalf("disabled user served from the cache: %v", err)
	}

	// Entries expire.
	c := newVerifiedCache()
	now := time.Now()
	c.add("bob", "pw", "hash", now)
	if !c.hit("bob", "pw", "hash", now.Add(time.Minute)) || c.hit("bob", "pw", "hash", now.Add(verifiedTTL+time.Second)) {
		t.Error("cache entry lifetime wrong")
	}
}
