package accounts_test

import (
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestResourceTokens(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "alice"})
	bob := f.mustUser(accounts.NewUser{Name: "bob"})
	p, err := f.svc.CreateProject(f.ctx, f.sys, accounts.NewProject{Key: "PRJ"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.svc.CreateRepository(f.ctx, f.sys, p, accounts.NewRepository{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.svc.Grant(f.ctx, f.sys, accounts.Target{Project: p}, []store.Grant{{UserID: alice.ID}}, store.PermProjectAdmin))
	must(f.svc.Grant(f.ctx, f.sys, accounts.Target{Repo: r}, []store.Grant{{UserID: bob.ID}}, store.PermRepoWrite))
	proj, repo := accounts.ResourceTarget{Project: p}, accounts.ResourceTarget{Project: p, Repo: r}

	// Who may create: the resource's administrators, in a full session.
	_, _, err = f.svc.CreateResourceToken(f.ctx, f.as(bob), repo, accounts.ResourceTokenSpec{Name: "x", RepoScope: store.ScopeRead})
	wantKind(t, err, problem.Forbidden, "")
	_, _, err = f.svc.CreateResourceToken(f.ctx, f.as(bob), proj, accounts.ResourceTokenSpec{Name: "x", RepoScope: store.ScopeRead})
	wantKind(t, err, problem.NotFound, "")
	_, _, err = f.svc.CreateResourceToken(f.ctx, f.asToken(alice, store.ScopeAdmin), proj, accounts.ResourceTokenSpec{Name: "x", RepoScope: store.ScopeRead})
	wantKind(t, err, problem.Forbidden, "access tokens cannot")
	_, _, err = f.svc.CreateResourceToken(f.ctx, accounts.As(nil), repo, accounts.ResourceTokenSpec{Name: "x", RepoScope: store.ScopeRead})
	wantKind(t, err, problem.Unauthenticated, "")

	// Grants: defaults and refusals.
	for what, tc := range map[string]struct {
		t    accounts.ResourceTarget
		spec accounts.ResourceTokenSpec
		msg  string
	}{
		"repository token with a project permission": {repo, accounts.ResourceTokenSpec{Name: "x", ProjectScope: store.ScopeRead, RepoScope: store.ScopeRead}, "repository permissions"},
		"repository token without permission":        {repo, accounts.ResourceTokenSpec{Name: "x"}, "needs a repository permission"},
		"project token without permission":           {proj, accounts.ResourceTokenSpec{Name: "x"}, "needs a permission"},
		"unknown scope":                              {proj, accounts.ResourceTokenSpec{Name: "x", RepoScope: "root"}, "read, write or admin"},
		"empty name":                                 {proj, accounts.ResourceTokenSpec{Name: " ", RepoScope: store.ScopeRead}, "token name"},
		"eleven years":                               {proj, accounts.ResourceTokenSpec{Name: "x", RepoScope: store.ScopeRead, Lifetime: 4000 * 24 * time.Hour}, "lifetime"},
	} {
		_, _, err := f.svc.CreateResourceToken(f.ctx, f.as(alice), tc.t, tc.spec)
		if !problem.Is(err, problem.Invalid) {
			t.Errorf("%s: %v, want invalid", what, err)
		}
	}
	secret, pt, err := f.svc.CreateResourceToken(f.ctx, f.as(alice), proj, accounts.ResourceTokenSpec{Name: "ci", RepoScope: store.ScopeWrite, Lifetime: 24 * time.Hour})
	must(err)
	if pt.ProjectScope != store.ScopeRead || pt.RepoScope != store.ScopeWrite || pt.CreatedBy != alice.ID || pt.ExpiresAt == nil {
		t.Fatalf("project token: %+v", pt)
	}
	_, rt, err := f.svc.CreateResourceToken(f.ctx, f.sys, repo, accounts.ResourceTokenSpec{Name: "deploy", RepoScope: store.ScopeRead})
	must(err)
	if rt.RepoID != r.ID || rt.ProjectID != 0 || rt.CreatedBy != 0 || rt.ExpiresAt != nil {
		t.Fatalf("repository token: %+v", rt)
	}

	// The token itself cannot mint or change tokens, even with admin.
	adminSecret, _, err := f.svc.CreateResourceToken(f.ctx, f.as(alice), proj, accounts.ResourceTokenSpec{Name: "ops2", ProjectScope: store.ScopeAdmin})
	must(err)
	tokActor, err := f.auth.Token(f.ctx, adminSecret)
	must(err)
	_, _, err = f.svc.CreateResourceToken(f.ctx, accounts.As(tokActor), repo, accounts.ResourceTokenSpec{Name: "x", RepoScope: store.ScopeRead})
	wantKind(t, err, problem.Forbidden, "access tokens cannot")
	_, err = f.svc.UpdateResourceToken(f.ctx, accounts.As(tokActor), proj, pt.ID, accounts.ResourceTokenSpec{ProjectScope: store.ScopeAdmin})
	wantKind(t, err, problem.Forbidden, "access tokens cannot")
	_, err = f.svc.CreateProject(f.ctx, accounts.As(tokActor), accounts.NewProject{Key: "NEW"})
	wantKind(t, err, problem.Forbidden, "")

	// Update replaces the grant, takes effect at the next request, and
	// reaches only the resource's own tokens.
	ci, err := f.auth.Token(f.ctx, secret)
	must(err)
	if err := f.auth.Authorize(f.ctx, ci, auth.Resource{Repo: r}, auth.Write); err != nil {
		t.Fatalf("project token writes: %v", err)
	}
	up, err := f.svc.UpdateResourceToken(f.ctx, f.as(alice), proj, pt.ID, accounts.ResourceTokenSpec{Name: "ci-ro", RepoScope: store.ScopeRead})
	must(err)
	if up.Name != "ci-ro" || up.RepoScope != store.ScopeRead || up.ExpiresAt == nil {
		t.Fatalf("updated: %+v", up)
	}
	ci, err = f.auth.Token(f.ctx, secret)
	must(err)
	wantKind(t, f.auth.Authorize(f.ctx, ci, auth.Resource{Repo: r}, auth.Write), problem.Forbidden, "")
	_, err = f.svc.UpdateResourceToken(f.ctx, f.as(alice), repo, pt.ID, accounts.ResourceTokenSpec{Name: "y"})
	wantKind(t, err, problem.NotFound, "")
	_, err = f.svc.UpdateResourceToken(f.ctx, f.as(bob), repo, rt.ID, accounts.ResourceTokenSpec{Name: "y"})
	wantKind(t, err, problem.Forbidden, "")

	// Delete: the next request fails.
	wantKind(t, f.svc.DeleteResourceToken(f.ctx, f.as(alice), repo, pt.ID), problem.NotFound, "")
	must(f.svc.DeleteResourceToken(f.ctx, f.as(alice), proj, pt.ID))
	_, err = f.auth.Token(f.ctx, secret)
	wantKind(t, err, problem.Unauthenticated, "")
	wantKind(t, f.svc.DeleteResourceToken(f.ctx, f.as(bob), repo, rt.ID), problem.Forbidden, "")
}
