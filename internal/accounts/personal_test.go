package accounts_test

import (
	"testing"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
)

func TestPersonalProject(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "Alice", DisplayName: "Alice Liddell"})
	bob := f.mustUser(accounts.NewUser{Name: "bob"})

	p, err := f.svc.PersonalProject(f.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != "~ALICE" || p.Name != "Alice Liddell" || p.Public {
		t.Fatalf("personal project %+v", p)
	}
	again, err := f.svc.PersonalProject(f.ctx, "ALICE")
	if err != nil || again.ID != p.ID {
		t.Fatalf("second use: %+v, %v", again, err)
	}
	// Alice administers it and creates repositories there; bob does not.
	if _, err := f.svc.CreateRepository(f.ctx, f.as(alice), p, accounts.NewRepository{Name: "notes"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.CreateRepository(f.ctx, f.as(bob), p, accounts.NewRepository{Name: "mine"})
	if err == nil {
		t.Fatal("bob created a repository in alice's personal project")
	}
	if err := f.auth.Authorize(f.ctx, &auth.Principal{UserID: alice.ID, Name: alice.Name}, auth.Resource{Project: p}, auth.Admin); err != nil {
		t.Fatalf("alice does not administer her project: %v", err)
	}

	for _, name := range []string{"nobody", "", "a~b", "~alice", "ali/ce"} {
		_, err := f.svc.PersonalProject(f.ctx, name)
		wantKind(t, err, problem.NotFound, "")
	}
	// '~' keys are never made or taken by hand, not even by the System.
	for _, key := range []string{"~bob", "~nobody", "~", "a~b"} {
		_, err := f.svc.CreateProject(f.ctx, f.sys, accounts.NewProject{Key: key})
		wantKind(t, err, problem.Invalid, "")
	}
	plain, err := f.svc.CreateProject(f.ctx, f.sys, accounts.NewProject{Key: "PLAIN"})
	if err != nil {
		t.Fatal(err)
	}
	key := "~bob"
	_, err = f.svc.UpdateProject(f.ctx, f.sys, plain, accounts.ProjectChange{Key: &key})
	wantKind(t, err, problem.Invalid, "")
	key = "MINE"
	_, err = f.svc.UpdateProject(f.ctx, f.sys, p, accounts.ProjectChange{Key: &key})
	wantKind(t, err, problem.Invalid, "")
}
