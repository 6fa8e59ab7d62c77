package auth

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// fakeStore is the part of store.Store that auth and its tests use, in
// memory. Any other method panics through the nil embedded interface, which
// a test would report.
type fakeStore struct {
	store.Store

	mu       sync.Mutex
	nextID   int64
	users    map[int64]*store.User
	members  map[int64]map[int64]bool // group -> user -> member
	projects map[int64]*store.Project
	grants   []fakeGrant
	tokens   map[int64]*store.Token
	keys     map[int64]*store.SSHKey
	calls    map[string]int
}

type fakeGrant struct {
	projectID, repoID int64
	store.Grant
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		users:    map[int64]*store.User{},
		members:  map[int64]map[int64]bool{},
		projects: map[int64]*store.Project{},
		tokens:   map[int64]*store.Token{},
		keys:     map[int64]*store.SSHKey{},
		calls:    map[string]int{},
	}
}

func (f *fakeStore) call(name string) {
	f.mu.Lock()
	f.calls[name]++
	f.mu.Unlock()
}

func (f *fakeStore) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeStore) id() int64 { f.nextID++; return f.nextID }

func notFound() error { return problem.New(problem.NotFound, "not found") }

func (f *fakeStore) CreateUser(_ context.Context, u *store.User) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.users {
		if strings.EqualFold(o.Name, u.Name) {
			return problem.New(problem.Conflict, "user exists")
		}
	}
	u.ID = f.id()
	c := *u
	f.users[u.ID] = &c
	return nil
}

func (f *fakeStore) UserByID(_ context.Context, id int64) (*store.User, error) {
	f.call("UserByID")
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.users[id]
	if !ok {
		return nil, notFound()
	}
	c := *u
	return &c, nil
}

func (f *fakeStore) UserByName(_ context.Context, name string) (*store.User, error) {
	f.call("UserByName")
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range f.users {
		if strings.EqualFold(u.Name, name) {
			c := *u
			return &c, nil
		}
	}
	return nil, notFound()
}

func (f *fakeStore) UpdateUser(_ context.Context, u *store.User) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.users[u.ID]; !ok {
		return notFound()
	}
	c := *u
	f.users[u.ID] = &c
	return nil
}

func (f *fakeStore) DeleteUser(_ context.Context, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, id)
	return nil
}

func (f *fakeStore) CreateGroup(_ context.Context, g *store.Group) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g.ID = f.id()
	f.members[g.ID] = map[int64]bool{}
	return nil
}

func (f *fakeStore) AddGroupMember(_ context.Context, groupID, userID int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members[groupID][userID] = true
	return nil
}

func (f *fakeStore) RemoveGroupMember(_ context.Context, groupID, userID int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.members[groupID], userID)
	return nil
}

func (f *fakeStore) CreateProject(_ context.Context, p *store.Project) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.ID = f.id()
	c := *p
	f.projects[p.ID] = &c
	return nil
}

func (f *fakeStore) ProjectByID(_ context.Context, id int64) (*store.Project, error) {
	f.call("ProjectByID")
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.projects[id]
	if !ok {
		return nil, notFound()
	}
	c := *p
	return &c, nil
}

func (f *fakeStore) CreateRepo(_ context.Context, r *store.Repository) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ID = f.id()
	if p, ok := f.projects[r.ProjectID]; ok {
		r.ProjectKey = p.Key
	}
	return nil
}

func (f *fakeStore) setGrant(projectID, repoID int64, g store.Grant) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, o := range f.grants {
		if o.projectID == projectID && o.repoID == repoID && o.UserID == g.UserID && o.GroupID == g.GroupID {
			f.grants[i].Permission = g.Permission
			return nil
		}
	}
	f.grants = append(f.grants, fakeGrant{projectID, repoID, g})
	return nil
}

func (f *fakeStore) SetGlobalPermission(_ context.Context, g store.Grant) error {
	return f.setGrant(0, 0, g)
}

func (f *fakeStore) SetProjectPermission(_ context.Context, projectID int64, g store.Grant) error {
	return f.setGrant(projectID, 0, g)
}

func (f *fakeStore) SetRepoPermission(_ context.Context, repoID int64, g store.Grant) error {
	return f.setGrant(0, repoID, g)
}

func (f *fakeStore) RevokeRepoPermission(_ context.Context, repoID, userID, groupID int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, o := range f.grants {
		if o.projectID == 0 && o.repoID == repoID && o.UserID == userID && o.GroupID == groupID {
			f.grants = append(f.grants[:i], f.grants[i+1:]...)
			return nil
		}
	}
	return notFound()
}

func (f *fakeStore) EffectiveGrants(_ context.Context, userID, projectID, repoID int64) (global, project, repo []store.Permission, err error) {
	f.call("EffectiveGrants")
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.grants {
		if g.UserID != userID && !(g.GroupID != 0 && f.members[g.GroupID][userID]) {
			continue
		}
		switch {
		case g.projectID == 0 && g.repoID == 0:
			global = append(global, g.Permission)
		case g.projectID != 0 && g.projectID == projectID:
			project = append(project, g.Permission)
		case g.repoID != 0 && g.repoID == repoID:
			repo = append(repo, g.Permission)
		}
	}
	return global, project, repo, nil
}

func (f *fakeStore) CreateToken(_ context.Context, t *store.Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.ID = f.id()
	c := *t
	f.tokens[t.ID] = &c
	return nil
}

func (f *fakeStore) TokenByHash(_ context.Context, hash []byte) (*store.Token, error) {
	f.call("TokenByHash")
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tokens {
		if bytes.Equal(t.Hash, hash) {
			c := *t
			return &c, nil
		}
	}
	return nil, notFound()
}

func (f *fakeStore) RevokeToken(_ context.Context, userID, tokenID int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[tokenID]
	if !ok || t.UserID != userID {
		return notFound()
	}
	now := time.Now()
	t.RevokedAt = &now
	return nil
}

func (f *fakeStore) TouchToken(_ context.Context, tokenID int64, at time.Time) error {
	f.call("TouchToken")
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.tokens[tokenID]; ok {
		t.LastUsedAt = &at
	}
	return nil
}

func (f *fakeStore) AddSSHKey(_ context.Context, k *store.SSHKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.keys {
		if o.Fingerprint == k.Fingerprint {
			return problem.New(problem.Conflict, "key exists")
		}
	}
	k.ID = f.id()
	c := *k
	f.keys[k.ID] = &c
	return nil
}

func (f *fakeStore) SSHKeyByFingerprint(_ context.Context, fp string) (*store.SSHKey, error) {
	f.call("SSHKeyByFingerprint")
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.keys {
		if k.Fingerprint == fp {
			c := *k
			return &c, nil
		}
	}
	return nil, notFound()
}

func (f *fakeStore) TouchSSHKey(_ context.Context, id int64, at time.Time) error {
	f.call("TouchSSHKey")
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, ok := f.keys[id]; ok {
		k.LastUsedAt = &at
	}
	return nil
}
