package auth

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

var resourceTokenShape = regexp.MustCompile(`^sluice_rt_[A-Za-z0-9_-]{43}$`)

// resourceWorld is two projects with a repository each and a public
// repository, on a real SQLite store (the fake keeps no resource tokens).
type resourceWorld struct {
	st                   store.Store
	svc                  *Service
	prj, oth             *store.Project
	app, lib, pub, other *store.Repository
}

func newResourceWorld(t *testing.T) *resourceWorld {
	ctx := context.Background()
	st := openSQLite(t)
	w := &resourceWorld{st: st, svc: New(st, nil, nil)}
	w.prj = &store.Project{Key: "PRJ", Name: "p"}
	must(t, st.CreateProject(ctx, w.prj))
	w.oth = &store.Project{Key: "OTH", Name: "o"}
	must(t, st.CreateProject(ctx, w.oth))
	mk := func(p *store.Project, slug string, public bool) *store.Repository {
		r := &store.Repository{ProjectID: p.ID, Slug: slug, Name: slug, Public: public}
		must(t, st.CreateRepo(ctx, r))
		return r
	}
	w.app, w.lib = mk(w.prj, "app", false), mk(w.prj, "lib", false)
	w.other, w.pub = mk(w.oth, "other", false), mk(w.oth, "pub", true)
	return w
}

func (w *resourceWorld) token(t *testing.T, in NewResourceToken) (string, *Principal) {
	t.Helper()
	secret, _, err := w.svc.CreateResourceToken(context.Background(), in)
	must(t, err)
	p, err := w.svc.Token(context.Background(), secret)
	must(t, err)
	return secret, p
}

func TestCreateResourceToken(t *testing.T) {
	ctx := context.Background()
	w := newResourceWorld(t)
	secret, tok, err := w.svc.CreateResourceToken(ctx, NewResourceToken{ProjectID: w.prj.ID, Name: " ci ", ProjectScope: store.ScopeRead, RepoScope: store.ScopeWrite})
	must(t, err)
	if !resourceTokenShape.MatchString(secret) || looksLikeToken(secret) {
		t.Fatalf("secret %q has the wrong shape", secret)
	}
	sum := sha256.Sum256([]byte(secret))
	stored, err := w.st.(store.ResourceTokenStore).ResourceTokenByHash(ctx, sum[:])
	if err != nil || stored.ID != tok.ID || stored.Name != "ci" {
		t.Fatalf("token not stored under sha256(secret): %+v %v", stored, err)
	}
	past := time.Now().Add(-time.Minute)
	for name, in := range map[string]NewResourceToken{
		"empty name": {ProjectID: w.prj.ID, Name: " ", ProjectScope: store.ScopeRead},
		"expired":    {ProjectID: w.prj.ID, Name: "x", ProjectScope: store.ScopeRead, ExpiresAt: &past},
		"no scope":   {ProjectID: w.prj.ID, Name: "x"},
	} {
		if _, _, err := w.svc.CreateResourceToken(ctx, in); !problem.Is(err, problem.Invalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if _, _, err := New(newFakeStore(), nil, nil).CreateResourceToken(ctx, NewResourceToken{ProjectID: 1, Name: "x", RepoScope: store.ScopeRead}); err == nil {
		t.Error("a store without resource tokens created one")
	}
}

func TestResourceTokenLogin(t *testing.T) {
	ctx := context.Background()
	w := newResourceWorld(t)
	secret, p := w.token(t, NewResourceToken{RepoID: w.app.ID, Name: "deploy", RepoScope: store.ScopeRead})
	if p.IsAnonymous() || p.UserID != 0 || p.TokenID != 0 || p.ResourceToken == nil || p.ResourceToken.RepoID != w.app.ID {
		t.Fatalf("principal %+v", p)
	}
	if s := p.String(); !strings.Contains(s, "deploy") || strings.Contains(s, secret) {
		t.Errorf("String() = %q", s)
	}
	// Every way of presenting it gives the same principal.
	for name, set := range map[string]func(r *http.Request){
		"bearer":       func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) },
		"x-token-auth": func(r *http.Request) { r.SetBasicAuth(TokenUserName, secret) },
		"any user":     func(r *http.Request) { r.SetBasicAuth("jenkins", secret) },
	} {
		r := httptest.NewRequest("GET", "/", nil)
		set(r)
		got, err := w.svc.AuthenticateHTTP(r)
		if err != nil || got.ResourceToken == nil || got.ResourceToken.ID != p.ResourceToken.ID {
			t.Errorf("%s: %+v %v", name, got, err)
		}
	}
	fails := func(what, s string) {
		t.Helper()
		if _, err := w.svc.Token(ctx, s); !problem.Is(err, problem.Unauthenticated) {
			t.Errorf("%s: %v, want unauthenticated", what, err)
		}
	}
	fails("unknown", resourceTokenPrefix+strings.Repeat("A", 43))
	fails("malformed", resourceTokenPrefix+"short")
	exp := time.Now().Add(time.Hour)
	expSecret, _, err := w.svc.CreateResourceToken(ctx, NewResourceToken{RepoID: w.app.ID, Name: "soon", RepoScope: store.ScopeRead, ExpiresAt: &exp})
	must(t, err)
	w.svc.now = func() time.Time { return exp.Add(time.Second) }
	fails("expired", expSecret)
	w.svc.now = time.Now
	must(t, w.st.(store.ResourceTokenStore).DeleteResourceToken(ctx, 0, w.app.ID, p.ResourceToken.ID))
	fails("deleted", secret)
	// A resource token secret is not a password.
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth("jenkins", secret)
	if _, err := w.svc.AuthenticateHTTP(r); !problem.Is(err, problem.Unauthenticated) {
		t.Errorf("deleted token over Basic: %v", err)
	}
}

func TestAuthorizeResourceToken(t *testing.T) {
	ctx := context.Background()
	w := newResourceWorld(t)
	_, projTok := w.token(t, NewResourceToken{ProjectID: w.prj.ID, Name: "ci", ProjectScope: store.ScopeRead, RepoScope: store.ScopeWrite})
	_, projAdmin := w.token(t, NewResourceToken{ProjectID: w.prj.ID, Name: "ops", ProjectScope: store.ScopeAdmin})
	_, repoTok := w.token(t, NewResourceToken{RepoID: w.app.ID, Name: "deploy", RepoScope: store.ScopeRead})

	repo := func(r *store.Repository) Resource { return Resource{Repo: r} }
	proj := func(p *store.Project) Resource { return Resource{Project: p} }
	for _, tc := range []struct {
		name string
		p    *Principal
		res  Resource
		a    Action
		want string
	}{
		{"project token reads its project", projTok, proj(w.prj), Read, "ok"},
		{"project token cannot write its project", projTok, proj(w.prj), Write, "forbidden"},
		{"project token writes the project's repositories", projTok, repo(w.app), Write, "ok"},
		{"project token writes every repository", projTok, repo(w.lib), Write, "ok"},
		{"project token cannot administer them", projTok, repo(w.app), Admin, "forbidden"},
		{"project token misses other projects", projTok, proj(w.oth), Read, "not_found"},
		{"project token misses their repositories", projTok, repo(w.other), Read, "not_found"},
		{"project token misses public repositories", projTok, repo(w.pub), Read, "not_found"},
		{"project token is no user", projTok, Resource{}, Read, "forbidden"},
		{"project admin implies repository admin", projAdmin, repo(w.lib), Admin, "ok"},
		{"project admin administers the project", projAdmin, proj(w.prj), Admin, "ok"},
		{"project admin is no server admin", projAdmin, Resource{}, Admin, "forbidden"},
		{"repository token reads its repository", repoTok, repo(w.app), Read, "ok"},
		{"repository token cannot write it", repoTok, repo(w.app), Write, "forbidden"},
		{"repository token misses its siblings", repoTok, repo(w.lib), Read, "not_found"},
		{"repository token misses its project", repoTok, proj(w.prj), Read, "not_found"},
		{"repository token misses public repositories", repoTok, repo(w.pub), Read, "not_found"},
	} {
		if got := kindName(w.svc.Authorize(ctx, tc.p, tc.res, tc.a)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if w.svc.IsAdmin(ctx, projAdmin) || w.svc.CanCreateProject(ctx, projAdmin) {
		t.Error("a project token passes a server-wide check")
	}
	// A repository moved out of the project leaves the project token behind.
	w.lib.ProjectID = w.oth.ID
	must(t, w.st.UpdateRepo(ctx, w.lib))
	moved, err := w.st.RepoByID(ctx, w.lib.ID)
	must(t, err)
	if got := kindName(w.svc.Authorize(ctx, projTok, repo(moved), Read)); got != "not_found" {
		t.Errorf("moved repository: %s, want NotFound", got)
	}
}
