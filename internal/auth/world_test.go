package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// world is a small installation built through the store.Store interface,
// so the same scenario runs on the fake and on a real database.
type world struct {
	st    store.Store
	svc   *Service
	reg   *prometheus.Registry
	users map[string]*store.User
	group *store.Group

	pub, prv *store.Project
	// priv is private in a private project; open is public in a private
	// project; inpub is private in a public project; other is private in
	// the private project, untouched by repository grants.
	priv, open, inpub, other *store.Repository

	tokens map[string]string             // label -> secret
	keys   map[string]ed25519.PrivateKey // label -> SSH key
}

// worldPassword is alice's password; only alice has one, and every world
// shares one hash of it, since hashing is deliberately slow.
const worldPassword = "correct horse battery staple"

var worldPasswordHash = sync.OnceValues(func() (string, error) { return HashPassword(worldPassword) })

func newWorld(t *testing.T, st store.Store) *world {
	t.Helper()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	w := &world{
		st:     st,
		svc:    New(st, nil, reg),
		reg:    reg,
		users:  map[string]*store.User{},
		tokens: map[string]string{},
		keys:   map[string]ed25519.PrivateKey{},
	}
	hash, err := worldPasswordHash()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alice", "rita", "grace", "rex", "walt", "pam", "creator", "root", "sys", "dis"} {
		u := &store.User{Name: name, DisplayName: strings.ToUpper(name), Email: name + "@example.com", Active: true}
		if name == "alice" {
			u.PasswordHash = hash
		}
		must(t, st.CreateUser(ctx, u))
		w.users[name] = u
	}
	w.pub = &store.Project{Key: "PUB", Name: "Public", Public: true}
	w.prv = &store.Project{Key: "PRV", Name: "Private"}
	must(t, st.CreateProject(ctx, w.pub))
	must(t, st.CreateProject(ctx, w.prv))
	repo := func(p *store.Project, slug string, public bool) *store.Repository {
		r := &store.Repository{ProjectID: p.ID, ProjectKey: p.Key, Slug: slug, Name: slug, Public: public, DefaultBranch: "main"}
		must(t, st.CreateRepo(ctx, r))
		return r
	}
	w.priv = repo(w.prv, "priv", false)
	w.open = repo(w.prv, "open", true)
	w.other = repo(w.prv, "other", false)
	w.inpub = repo(w.pub, "inpub", false)

	w.group = &store.Group{Name: "devs"}
	must(t, st.CreateGroup(ctx, w.group))
	must(t, st.AddGroupMember(ctx, w.group.ID, w.users["grace"].ID))

	uid := func(n string) int64 { return w.users[n].ID }
	must(t, st.SetRepoPermission(ctx, w.priv.ID, store.Grant{UserID: uid("rita"), Permission: store.PermRepoRead}))
	must(t, st.SetRepoPermission(ctx, w.priv.ID, store.Grant{GroupID: w.group.ID, Permission: store.PermRepoWrite}))
	must(t, st.SetRepoPermission(ctx, w.priv.ID, store.Grant{UserID: uid("rex"), Permission: store.PermRepoAdmin}))
	must(t, st.SetProjectPermission(ctx, w.prv.ID, store.Grant{UserID: uid("walt"), Permission: store.PermProjectWrite}))
	must(t, st.SetProjectPermission(ctx, w.prv.ID, store.Grant{UserID: uid("pam"), Permission: store.PermProjectAdmin}))
	must(t, st.SetGlobalPermission(ctx, store.Grant{UserID: uid("creator"), Permission: store.PermProjectCreate}))
	must(t, st.SetGlobalPermission(ctx, store.Grant{UserID: uid("root"), Permission: store.PermAdmin}))
	must(t, st.SetGlobalPermission(ctx, store.Grant{UserID: uid("sys"), Permission: store.PermSysAdmin}))
	must(t, st.SetGlobalPermission(ctx, store.Grant{UserID: uid("dis"), Permission: store.PermAdmin}))
	dis := w.users["dis"]
	dis.Active = false
	must(t, st.UpdateUser(ctx, dis))

	for _, tc := range []struct {
		label, user string
		scope       store.Scope
	}{
		{"root-read", "root", store.ScopeRead},
		{"root-write", "root", store.ScopeWrite},
		{"root-admin", "root", store.ScopeAdmin},
		{"grace-read", "grace", store.ScopeRead},
		{"grace-write", "grace", store.ScopeWrite},
		{"alice-admin", "alice", store.ScopeAdmin},
	} {
		secret, _, err := w.svc.CreateToken(ctx, uid(tc.user), tc.label, tc.scope, nil)
		must(t, err)
		w.tokens[tc.label] = secret
	}

	for _, tc := range []struct {
		label string
		scope store.Scope
	}{{"key-read", store.ScopeRead}, {"key-write", store.ScopeWrite}} {
		w.keys[tc.label] = w.addKey(t, &store.SSHKey{RepoID: w.priv.ID, Scope: tc.scope, Label: tc.label})
	}
	w.keys["alice-key"] = w.addKey(t, &store.SSHKey{UserID: uid("alice"), Label: "laptop"})
	w.keys["dis-key"] = w.addKey(t, &store.SSHKey{UserID: uid("dis"), Label: "old"})
	return w
}

// addKey generates an ed25519 key and stores its public half as k.
func (w *world) addKey(t *testing.T, k *store.SSHKey) ed25519.PrivateKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	sp, err := ssh.NewPublicKey(pub)
	must(t, err)
	k.PublicKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	k.Fingerprint = ssh.FingerprintSHA256(sp)
	must(t, w.st.AddSSHKey(context.Background(), k))
	return priv
}

func (w *world) sshPublic(t *testing.T, label string) ssh.PublicKey {
	t.Helper()
	sp, err := ssh.NewPublicKey(w.keys[label].Public())
	must(t, err)
	return sp
}

// principal returns the principal called name: a user's full session, a
// token (through Token) or an access key (through PublicKey).
func (w *world) principal(t *testing.T, name string) *Principal {
	t.Helper()
	ctx := context.Background()
	switch {
	case name == "anonymous":
		return &Principal{Anonymous: true}
	case name == "deleted":
		return &Principal{UserID: 1 << 40, Name: "ghost"}
	case w.tokens[name] != "":
		p, err := w.svc.Token(ctx, w.tokens[name])
		must(t, err)
		return p
	case strings.HasPrefix(name, "key-"):
		p, err := w.svc.PublicKey(ctx, w.sshPublic(t, name))
		must(t, err)
		return p
	default:
		u, ok := w.users[name]
		if !ok {
			t.Fatalf("no principal %q", name)
		}
		// Built directly rather than through a login, so that "dis" (who
		// cannot log in) shows what Authorize does with a principal whose
		// user was disabled after authenticating.
		return &Principal{UserID: u.ID, Name: u.Name}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kindName renders an outcome for table comparisons.
func kindName(err error) string {
	if err == nil {
		return "ok"
	}
	return problem.KindOf(err).String()
}

// expiredAndRevoked stores tokens the API would refuse to create: one past
// its expiry and one revoked. It returns their secrets.
func (w *world) expiredAndRevoked(t *testing.T) (expired, revoked string) {
	t.Helper()
	ctx := context.Background()
	alice := w.users["alice"].ID
	future := time.Now().Add(time.Hour)
	expired, _, err := w.svc.CreateToken(ctx, alice, "soon", store.ScopeRead, &future)
	must(t, err)
	revoked, tok, err := w.svc.CreateToken(ctx, alice, "gone", store.ScopeRead, nil)
	must(t, err)
	must(t, w.st.RevokeToken(ctx, alice, tok.ID))
	return expired, revoked
}
