package auth

import (
	"context"
	"encoding/base64"
	"net/http/httptest"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestAuthenticateHTTP(t *testing.T) {
	eachStore(t, testAuthenticateHTTP)
}

func testAuthenticateHTTP(t *testing.T, st store.Store) {
	w := newWorld(t, st)
	grace := w.tokens["grace-read"]
	for _, tc := range []struct {
		name   string
		header []string
		want   string // principal name, "anonymous", or "" for Unauthenticated
		scope  store.Scope
	}{
		{"no header", nil, "anonymous", ""},
		{"basic password", []string{basic("alice", worldPassword)}, "alice", ""},
		{"basic password, other case", []string{basic("Alice", worldPassword)}, "alice", ""},
		{"basic scheme lower case", []string{"basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+worldPassword))}, "alice", ""},
		{"basic wrong password", []string{basic("alice", "nope")}, "", ""},
		{"basic unknown user", []string{basic("mallory", "nope")}, "", ""},
		{"basic token", []string{basic("grace", grace)}, "grace", store.ScopeRead},
		{"basic token of another user", []string{basic("alice", grace)}, "", ""},
		{"basic x-token-auth", []string{basic("x-token-auth", grace)}, "grace", store.ScopeRead},
		{"basic x-token-auth with a password", []string{basic("x-token-auth", worldPassword)}, "", ""},
		{"bearer", []string{"Bearer " + grace}, "grace", store.ScopeRead},
		{"bearer lower case", []string{"bearer " + grace}, "grace", store.ScopeRead},
		{"bearer empty", []string{"Bearer "}, "", ""},
		{"bearer a password", []string{"Bearer " + worldPassword}, "", ""},
		{"basic not base64", []string{"Basic !!!"}, "", ""},
		{"basic no colon", []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice"))}, "", ""},
		{"basic empty user", []string{basic("", worldPassword)}, "", ""},
		{"empty header", []string{""}, "", ""},
		{"other scheme", []string{"Digest username=alice"}, "", ""},
		{"two headers", []string{"Bearer " + grace, basic("alice", worldPassword)}, "", ""},
	} {
		r := httptest.NewRequest("GET", "/scm/prv/priv.git/info/refs", nil)
		for _, h := range tc.header {
			r.Header.Add("Authorization", h)
		}
		p, err := w.svc.AuthenticateHTTP(r)
		if tc.want == "" {
			if !problem.Is(err, problem.Unauthenticated) {
				t.Errorf("%s: %v (%v), want unauthenticated", tc.name, p, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		ok := p.Anonymous && tc.want == "anonymous" ||
			!p.Anonymous && p.Name == tc.want && p.Scope == tc.scope && (p.TokenID != 0) == (tc.scope != "")
		if !ok {
			t.Errorf("%s: principal %+v, want %s with scope %q", tc.name, p, tc.want, tc.scope)
		}
	}
}

// TestBasicBearerEquivalent: a token is the same principal, with the same
// scope and the same decisions, whichever way it arrives.
func TestBasicBearerEquivalent(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, newFakeStore())
	for _, label := range []string{"grace-read", "grace-write", "root-read"} {
		secret := w.tokens[label]
		user := w.principal(t, label).Name
		var got []*Principal
		for _, h := range []string{"Bearer " + secret, basic(user, secret), basic(TokenUserName, secret)} {
			r := httptest.NewRequest("POST", "/scm/prv/priv.git/git-receive-pack", nil)
			r.Header.Set("Authorization", h)
			p, err := w.svc.AuthenticateHTTP(r)
			if err != nil {
				t.Fatalf("%s via %q: %v", label, h[:6], err)
			}
			got = append(got, p)
		}
		for i, p := range got[1:] {
			if *p != *got[0] {
				t.Errorf("%s: principal %d %+v differs from bearer %+v", label, i+1, p, got[0])
			}
		}
		for _, a := range []Action{Read, Write, Admin} {
			want := kindName(w.svc.Authorize(ctx, got[0], Resource{Repo: w.priv}, a))
			for i, p := range got[1:] {
				if k := kindName(w.svc.Authorize(ctx, p, Resource{Repo: w.priv}, a)); k != want {
					t.Errorf("%s %s: principal %d gets %s, bearer gets %s", label, a, i+1, k, want)
				}
			}
		}
	}
}
