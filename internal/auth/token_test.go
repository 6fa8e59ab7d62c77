package auth

import (
	"context"
	"crypto/sha256"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

var tokenShape = regexp.MustCompile(`^sluice_[A-Za-z0-9_-]{43}$`)

func TestCreateToken(t *testing.T) {
	eachStore(t, testCreateToken)
}

func testCreateToken(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)
	alice := w.users["alice"].ID
	exp := time.Now().Add(24 * time.Hour)
	secret, tok, err := w.svc.CreateToken(ctx, alice, " ci ", store.ScopeWrite, &exp)
	if err != nil {
		t.Fatal(err)
	}
	if !tokenShape.MatchString(secret) {
		t.Errorf("secret %q has the wrong shape", secret)
	}
	sum := sha256.Sum256([]byte(secret))
	stored, err := st.TokenByHash(ctx, sum[:])
	if err != nil {
		t.Fatalf("token not stored under sha256(secret): %v", err)
	}
	if stored.ID != tok.ID || stored.UserID != alice || stored.Name != "ci" || stored.Scope != store.ScopeWrite ||
		stored.ExpiresAt == nil || stored.ExpiresAt.Sub(exp).Abs() > time.Millisecond { // databases keep microseconds
		t.Errorf("stored %+v", stored)
	}
	again, _, err := w.svc.CreateToken(ctx, alice, "ci2", store.ScopeRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again == secret {
		t.Error("two tokens share a secret")
	}

	past := time.Now().Add(-time.Minute)
	for name, tc := range map[string]struct {
		name  string
		scope store.Scope
		exp   *time.Time
	}{
		"empty name":    {"  ", store.ScopeRead, nil},
		"control name":  {"a\nb", store.ScopeRead, nil},
		"long name":     {string(make([]byte, maxTokenNameLen+1)), store.ScopeRead, nil},
		"no scope":      {"x", "", nil},
		"unknown scope": {"x", "root", nil},
		"expired":       {"x", store.ScopeRead, &past},
	} {
		if _, _, err := w.svc.CreateToken(ctx, alice, tc.name, tc.scope, tc.exp); !problem.Is(err, problem.Invalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

func TestTokenLogin(t *testing.T) {
	eachStore(t, testTokenLogin)
}

func testTokenLogin(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)
	p, err := w.svc.Token(ctx, w.tokens["grace-read"])
	if err != nil {
		t.Fatal(err)
	}
	if p.UserID != w.users["grace"].ID || p.Name != "grace" || p.TokenID == 0 || p.Scope != store.ScopeRead {
		t.Errorf("principal %+v", p)
	}

	expired, revoked := w.expiredAndRevoked(t)
	disSecret, _, err := w.svc.CreateToken(ctx, w.users["dis"].ID, "old", store.ScopeAdmin, nil)
	must(t, err)
	goneSecret, _, err := w.svc.CreateToken(ctx, w.users["rex"].ID, "x", store.ScopeAdmin, nil)
	must(t, err)
	must(t, st.DeleteUser(ctx, w.users["rex"].ID))
	// Move the clock past the expiry instead of storing a token the
	// service would refuse to create.
	w.svc.now = func() time.Time { return time.Now().Add(2 * time.Hour) }

	valid := w.tokens["grace-read"]
	for name, secret := range map[string]string{
		"expired":        expired,
		"revoked":        revoked,
		"disabled user":  disSecret,
		"deleted user":   goneSecret,
		"unknown":        valid[:len(valid)-1] + otherChar(valid[len(valid)-1]),
		"empty":          "",
		"no prefix":      valid[len("sluice_"):],
		"bad characters": valid[:len(valid)-1] + "+",
		"too long":       valid + "A",
	} {
		if secret == valid {
			t.Fatalf("%s: test secret equals the valid one", name)
		}
		_, err := w.svc.Token(ctx, secret)
		if !problem.Is(err, problem.Unauthenticated) || problem.Message(err) != msgBadToken {
			t.Errorf("%s: %v, want %q", name, err, msgBadToken)
		}
	}
	if _, err := w.svc.Token(ctx, valid); err != nil {
		t.Errorf("valid token after the clock moved: %v", err)
	}
	if got := testutil.ToFloat64(w.svc.attempts.WithLabelValues(methodToken, outcomeFailure)); got != 9 {
		t.Errorf("failures counted: %v, want 9", got)
	}
}

// TestTokenTouchThrottled: last-used is written at most once a minute per
// token.
func TestTokenTouchThrottled(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	w := newWorld(t, st)
	now := time.Now()
	w.svc.now = func() time.Time { return now }
	base := st.count("TouchToken")
	use := func(label string) {
		t.Helper()
		if _, err := w.svc.Token(ctx, w.tokens[label]); err != nil {
			t.Fatal(err)
		}
	}
	use("grace-read")
	use("grace-read")
	use("grace-write")
	if got := st.count("TouchToken") - base; got != 2 {
		t.Errorf("touches within a minute: %d, want 2 (one per token)", got)
	}
	now = now.Add(touchInterval)
	use("grace-read")
	if got := st.count("TouchToken") - base; got != 3 {
		t.Errorf("touches after a minute: %d, want 3", got)
	}
	sum := sha256.Sum256([]byte(w.tokens["grace-read"]))
	tok, err := st.TokenByHash(ctx, sum[:])
	must(t, err)
	if tok.LastUsedAt == nil || !tok.LastUsedAt.Equal(now) {
		t.Errorf("last used %v, want %v", tok.LastUsedAt, now)
	}
}

// otherChar returns a token character different from c.
func otherChar(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
