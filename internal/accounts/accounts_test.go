package accounts_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	auth  *auth.Service
	svc   *accounts.Service
	sys   accounts.Actor
	admin accounts.Actor
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	git, err := gitcmd.New(gitcmd.Config{Binary: "git", HomeDir: filepath.Join(dir, "git-home"), HookBinary: "/bin/true"}, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { git.Close() })
	au := auth.New(st, logger, reg)
	f := &fixture{t: t, ctx: ctx, st: st, auth: au, svc: accounts.New(st, au, repo.NewManager(filepath.Join(dir, "repos"), git, logger), logger),
		sys: accounts.System("test")}
	admin := f.mustUser(accounts.NewUser{Name: "root", SysAdmin: true})
	f.admin = f.as(admin)
	return f
}

func (f *fixture) mustUser(in accounts.NewUser) *store.User {
	f.t.Helper()
	u, err := f.svc.CreateUser(f.ctx, f.sys, in)
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

// as is the actor of a full session (password or SSH key) of u.
func (f *fixture) as(u *store.User) accounts.Actor {
	return accounts.As(&auth.Principal{UserID: u.ID, Name: u.Name})
}

// asToken is the actor of u signed in with a token of scope.
func (f *fixture) asToken(u *store.User, scope store.Scope) accounts.Actor {
	return accounts.As(&auth.Principal{UserID: u.ID, Name: u.Name, TokenID: 1, Scope: scope})
}

func wantKind(t *testing.T, err error, kind problem.Kind, msg string) {
	t.Helper()
	if problem.KindOf(err) != kind || err == nil {
		t.Fatalf("err = %v (%v), want kind %v", err, problem.KindOf(err), kind)
	}
	if msg != "" && !strings.Contains(problem.Message(err), msg) {
		t.Fatalf("message %q does not contain %q", problem.Message(err), msg)
	}
}

func TestUsersRulesHoldForEveryActor(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "alice", Password: "correct horse battery"})
	if alice.DisplayName != "alice" || !alice.Active {
		t.Fatalf("display name defaults to the login and users start active: %+v", alice)
	}
	// Validation is not skipped for the System.
	for _, in := range []accounts.NewUser{
		{Name: "-bad"},
		{Name: "bob", Email: "not-an-address"},
		{Name: "bob", DisplayName: "a\x00b"},
		{Name: "bob", Password: strings.Repeat("p", 1025)},
	} {
		_, err := f.svc.CreateUser(f.ctx, f.sys, in)
		wantKind(t, err, problem.Invalid, "")
	}
	// Permission checks apply to callers.
	_, err := f.svc.CreateUser(f.ctx, f.as(alice), accounts.NewUser{Name: "mallory"})
	wantKind(t, err, problem.Forbidden, "")
	_, err = f.svc.CreateUser(f.ctx, accounts.As(nil), accounts.NewUser{Name: "mallory"})
	wantKind(t, err, problem.Unauthenticated, "")

	// An ADMIN (not SYS_ADMIN) creates users but not system administrators.
	adm := f.mustUser(accounts.NewUser{Name: "adm"})
	if err := f.st.SetGlobalPermission(f.ctx, store.Grant{UserID: adm.ID, Permission: store.PermAdmin}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CreateUser(f.ctx, f.as(adm), accounts.NewUser{Name: "carol"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.CreateUser(f.ctx, f.as(adm), accounts.NewUser{Name: "dave", SysAdmin: true})
	wantKind(t, err, problem.Forbidden, "SYS_ADMIN")

	off := false
	_, err = f.svc.UpdateUser(f.ctx, f.as(adm), adm, accounts.UserChange{Active: &off})
	wantKind(t, err, problem.Invalid, "deactivate yourself")
	got, err := f.svc.UpdateUser(f.ctx, f.as(adm), alice, accounts.UserChange{Active: &off})
	if err != nil || got.Active {
		t.Fatalf("deactivate alice: %+v, %v", got, err)
	}
	wantKind(t, f.svc.DeleteUser(f.ctx, f.as(adm), adm), problem.Invalid, "delete yourself")
	if err := f.svc.DeleteUser(f.ctx, f.as(adm), alice); err != nil {
		t.Fatal(err)
	}
}

func TestPasswords(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "alice", Password: "correct horse battery"})
	wantKind(t, f.svc.ChangePassword(f.ctx, f.as(alice), "wrong password!", "new password 1", "new password 1"), problem.Invalid, "current password")
	wantKind(t, f.svc.ChangePassword(f.ctx, f.as(alice), "correct horse battery", "new password 1", "new password 2"), problem.Invalid, "confirmation")
	wantKind(t, f.svc.ChangePassword(f.ctx, f.asToken(alice, store.ScopeAdmin), "correct horse battery", "new password 1", "new password 1"), problem.Forbidden, "")
	if err := f.svc.ChangePassword(f.ctx, f.as(alice), "correct horse battery", "new password 1", "new password 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.auth.Password(f.ctx, "alice", "new password 1"); err != nil {
		t.Fatalf("new password does not work: %v", err)
	}
	wantKind(t, f.svc.SetPassword(f.ctx, f.as(alice), alice, "other password", "other password"), problem.Forbidden, "")
	if err := f.svc.SetPassword(f.ctx, f.admin, alice, "other password", "other password"); err != nil {
		t.Fatal(err)
	}
}

func TestBootstrapAdminOnce(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := accounts.New(st, auth.New(st, nil, prometheus.NewRegistry()), nil, nil)
	made, err := svc.BootstrapAdmin(ctx, "first password")
	if err != nil || !made {
		t.Fatalf("first bootstrap: %v %v", made, err)
	}
	made, err = svc.BootstrapAdmin(ctx, "first password")
	if err != nil || made {
		t.Fatalf("second bootstrap: %v %v", made, err)
	}
	u, err := st.UserByName(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	global, _, _, err := st.EffectiveGrants(ctx, u.ID, 0, 0)
	if err != nil || len(global) != 1 || global[0] != store.PermSysAdmin {
		t.Fatalf("admin grants %v %v", global, err)
	}
}

func TestGroups(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "alice"})
	_, err := f.svc.CreateGroup(f.ctx, f.as(alice), "devs")
	wantKind(t, err, problem.Forbidden, "")
	g, err := f.svc.CreateGroup(f.ctx, f.admin, "devs")
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.svc.AddMembers(f.ctx, f.admin, g, []string{"alice", "nobody"}), problem.NotFound, `"nobody"`)
	if m, _ := f.st.GroupMembers(f.ctx, g.ID); len(m) != 0 {
		t.Fatalf("a typo in the list changed the group: %v", m)
	}
	for range 2 { // adding twice is fine
		if err := f.svc.AddMembers(f.ctx, f.admin, g, []string{"alice"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.svc.RemoveMembers(f.ctx, f.admin, g, []string{"alice"}); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.DeleteGroup(f.ctx, f.admin, g); err != nil {
		t.Fatal(err)
	}
}

func TestProjectsAndRepositories(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "alice"})
	bob := f.mustUser(accounts.NewUser{Name: "bob"})
	_, err := f.svc.CreateProject(f.ctx, f.as(alice), accounts.NewProject{Key: "ALI"})
	wantKind(t, err, problem.Forbidden, "")
	if err := f.svc.Grant(f.ctx, f.admin, accounts.Target{}, []store.Grant{{UserID: alice.ID}}, store.PermProjectCreate); err != nil {
		t.Fatal(err)
	}
	p, err := f.svc.CreateProject(f.ctx, f.as(alice), accounts.NewProject{Key: "ali"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != "ALI" || p.Name != "ALI" {
		t.Fatalf("key upper-cased and name defaulting to it: %+v", p)
	}
	// The creator administers the project.
	grants, _ := f.st.ProjectGrants(f.ctx, p.ID)
	if len(grants) != 1 || grants[0].UserID != alice.ID || grants[0].Permission != store.PermProjectAdmin {
		t.Fatalf("creator grants: %+v", grants)
	}
	_, err = f.svc.CreateProject(f.ctx, f.sys, accounts.NewProject{Key: "X", Description: strings.Repeat("d", 4001)})
	wantKind(t, err, problem.Invalid, "project description")

	_, err = f.svc.CreateRepository(f.ctx, f.as(bob), p, accounts.NewRepository{Name: "app"})
	wantKind(t, err, problem.NotFound, "")
	_, err = f.svc.CreateRepository(f.ctx, f.as(alice), p, accounts.NewRepository{Name: "app", DefaultBranch: "-x"})
	wantKind(t, err, problem.Invalid, "default branch")
	r, err := f.svc.CreateRepository(f.ctx, f.as(alice), p, accounts.NewRepository{Name: "My App", DefaultBranch: "refs/heads/trunk"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Slug != "my-app" || r.DefaultBranch != "trunk" {
		t.Fatalf("repository: %+v", r)
	}
	name := "Renamed"
	r2, err := f.svc.UpdateRepository(f.ctx, f.as(alice), r, accounts.RepositoryChange{Name: &name})
	if err != nil || r2.Slug != "renamed" {
		t.Fatalf("rename: %+v %v", r2, err)
	}
	other := "other"
	_, err = f.svc.UpdateRepository(f.ctx, f.as(alice), r2, accounts.RepositoryChange{DefaultBranch: &other})
	wantKind(t, err, problem.Invalid, "default branch")
	if err := f.svc.SetDefaultBranch(f.ctx, f.as(alice), r2, "refs/heads/dev"); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.st.RepoByID(f.ctx, r2.ID); got.DefaultBranch != "dev" {
		t.Fatalf("default branch %q", got.DefaultBranch)
	}

	// Bob reads the repository but may not write to the project: the
	// project's existence is no secret to him, so he hears why.
	if err := f.svc.Grant(f.ctx, f.as(alice), accounts.Target{Repo: r2}, []store.Grant{{UserID: bob.ID}}, store.PermRepoRead); err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.ForkRepository(f.ctx, f.as(bob), r2, nil, accounts.NewRepository{Name: "bobs"})
	wantKind(t, err, problem.Forbidden, "create repositories")
	fork, err := f.svc.ForkRepository(f.ctx, f.as(alice), r2, nil, accounts.NewRepository{Name: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ForkOf != r2.ID || fork.DefaultBranch != "dev" {
		t.Fatalf("fork: %+v", fork)
	}
	wantKind(t, f.svc.DeleteRepository(f.ctx, f.as(alice), r2), problem.Conflict, "fork")
	wantKind(t, f.svc.DeleteProject(f.ctx, f.as(alice), p), problem.Conflict, "still has repositories")
	for _, x := range []*store.Repository{fork, r2} {
		if err := f.svc.DeleteRepository(f.ctx, f.as(alice), x); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.svc.DeleteProject(f.ctx, f.as(alice), p); err != nil {
		t.Fatal(err)
	}
}

func TestGlobalGrantRules(t *testing.T) {
	f := newFixture(t)
	adm := f.mustUser(accounts.NewUser{Name: "adm"})
	alice := f.mustUser(accounts.NewUser{Name: "alice"})
	if err := f.svc.Grant(f.ctx, f.admin, accounts.Target{}, []store.Grant{{UserID: adm.ID}}, store.PermAdmin); err != nil {
		t.Fatal(err)
	}
	root, _ := f.st.UserByName(f.ctx, "root")
	cases := []struct {
		name   string
		actor  accounts.Actor
		who    *store.User
		perm   store.Permission
		kind   problem.Kind
		substr string
	}{
		{"wrong kind", f.admin, alice, store.PermRepoRead, problem.Invalid, "not a global permission"},
		{"self", f.as(adm), adm, store.PermProjectCreate, problem.Invalid, "your own"},
		{"sys by admin", f.as(adm), alice, store.PermSysAdmin, problem.Forbidden, "grant SYS_ADMIN"},
		{"demote a sys admin", f.as(adm), root, store.PermProjectCreate, problem.Forbidden, "system administrator"},
		{"non admin", f.as(alice), alice, store.PermAdmin, problem.Forbidden, "admin permission"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := f.svc.Grant(f.ctx, c.actor, accounts.Target{}, []store.Grant{{UserID: c.who.ID}}, c.perm)
			wantKind(t, err, c.kind, c.substr)
		})
	}
	wantKind(t, f.svc.Revoke(f.ctx, f.as(adm), accounts.Target{}, []store.Grant{{UserID: root.ID}}), problem.Forbidden, "system administrator")
	if err := f.svc.Grant(f.ctx, f.as(adm), accounts.Target{}, []store.Grant{{UserID: alice.ID}}, store.PermProjectCreate); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Revoke(f.ctx, f.as(adm), accounts.Target{}, []store.Grant{{UserID: alice.ID}}); err != nil {
		t.Fatal(err)
	}
	g, err := f.svc.Grantees(f.ctx, []string{"ALICE"}, nil)
	if err != nil || len(g) != 1 || g[0].UserID != alice.ID {
		t.Fatalf("grantees: %+v %v", g, err)
	}
	_, err = f.svc.Grantees(f.ctx, nil, []string{"ghosts"})
	wantKind(t, err, problem.NotFound, `group "ghosts" not found`)
}

func publicKey(t *testing.T) string {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " me@laptop"
}

func TestKeysAndTokens(t *testing.T) {
	f := newFixture(t)
	alice := f.mustUser(accounts.NewUser{Name: "alice"})
	bob := f.mustUser(accounts.NewUser{Name: "bob"})

	_, err := f.svc.AddSSHKey(f.ctx, f.asToken(alice, store.ScopeAdmin), alice, publicKey(t), "")
	wantKind(t, err, problem.Forbidden, "access tokens cannot add SSH keys")
	_, err = f.svc.AddSSHKey(f.ctx, f.as(bob), alice, publicKey(t), "")
	wantKind(t, err, problem.Forbidden, "your own SSH keys")
	_, err = f.svc.AddSSHKey(f.ctx, f.as(alice), alice, "ssh-rsa garbage", "")
	wantKind(t, err, problem.Invalid, "")
	k, err := f.svc.AddSSHKey(f.ctx, f.as(alice), alice, publicKey(t), "  ")
	if err != nil {
		t.Fatal(err)
	}
	if k.Label != "me@laptop" || k.UserID != alice.ID {
		t.Fatalf("key: %+v", k)
	}
	wantKind(t, f.svc.DeleteSSHKey(f.ctx, f.as(bob), bob, k.ID), problem.NotFound, "SSH key not found")
	if err := f.svc.DeleteSSHKey(f.ctx, f.admin, alice, k.ID); err != nil {
		t.Fatal(err)
	}

	p, err := f.svc.CreateProject(f.ctx, f.sys, accounts.NewProject{Key: "P"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.svc.CreateRepository(f.ctx, f.sys, p, accounts.NewRepository{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.svc.AddAccessKey(f.ctx, f.sys, r, publicKey(t), "ci", store.ScopeAdmin)
	wantKind(t, err, problem.Invalid, "")
	_, err = f.svc.AddAccessKey(f.ctx, f.as(alice), r, publicKey(t), "ci", store.ScopeRead)
	wantKind(t, err, problem.NotFound, "")
	ak, err := f.svc.AddAccessKey(f.ctx, f.sys, r, publicKey(t), "ci", store.ScopeWrite)
	if err != nil || ak.RepoID != r.ID || ak.Scope != store.ScopeWrite {
		t.Fatalf("access key %+v %v", ak, err)
	}
	if err := f.svc.DeleteAccessKey(f.ctx, f.sys, r, ak.ID); err != nil {
		t.Fatal(err)
	}

	_, _, err = f.svc.CreateToken(f.ctx, f.asToken(alice, store.ScopeAdmin), alice, accounts.NewToken{Name: "x", Scope: store.ScopeRead})
	wantKind(t, err, problem.Forbidden, "access tokens cannot create access tokens")
	_, _, err = f.svc.CreateToken(f.ctx, f.admin, alice, accounts.NewToken{Name: "x", Scope: store.ScopeRead})
	wantKind(t, err, problem.Forbidden, "your own access tokens")
	_, _, err = f.svc.CreateToken(f.ctx, f.sys, alice, accounts.NewToken{Name: "x", Scope: store.ScopeRead, Lifetime: 3651 * 24 * time.Hour})
	wantKind(t, err, problem.Invalid, "3650 days")
	secret, tok, err := f.svc.CreateToken(f.ctx, f.as(alice), alice, accounts.NewToken{Name: "ci", Scope: store.ScopeWrite, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if tok.ExpiresAt == nil || time.Until(*tok.ExpiresAt) > time.Hour {
		t.Fatalf("expiry %v", tok.ExpiresAt)
	}
	if _, err := f.auth.Token(f.ctx, secret); err != nil {
		t.Fatal(err)
	}
	wantKind(t, f.svc.RevokeToken(f.ctx, f.as(bob), alice, tok.ID), problem.Forbidden, "")
	if err := f.svc.RevokeToken(f.ctx, f.admin, alice, tok.ID); err != nil {
		t.Fatal(err)
	}
	_, err = f.auth.Token(f.ctx, secret)
	wantKind(t, err, problem.Unauthenticated, "")
}
