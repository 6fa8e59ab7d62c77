package auth

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// outageStore answers Unavailable from every read auth makes while down
// is set, as the store does when its connection wait runs out.
type outageStore struct {
	store.Store
	down atomic.Bool
}

func (o *outageStore) err() error {
	if o.down.Load() {
		return problem.New(problem.Unavailable, "database unavailable")
	}
	return nil
}

func (o *outageStore) UserByName(ctx context.Context, name string) (*store.User, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	return o.Store.UserByName(ctx, name)
}

func (o *outageStore) UserByID(ctx context.Context, id int64) (*store.User, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	return o.Store.UserByID(ctx, id)
}

func (o *outageStore) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	return o.Store.TokenByHash(ctx, hash)
}

func (o *outageStore) EffectiveGrants(ctx context.Context, userID, projectID, repoID int64) (global, project, repo []store.Permission, err error) {
	if err := o.err(); err != nil {
		return nil, nil, nil, err
	}
	return o.Store.EffectiveGrants(ctx, userID, projectID, repoID)
}

func TestOutageGrace(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, newFakeStore())
	st := &outageStore{Store: w.st}
	svc := New(st, nil, nil)
	svc.SetOutageGrace(10 * time.Minute)
	now := time.Now()
	svc.now = func() time.Time { return now }

	// Before the outage: alice logs in with her password, grace-read with
	// a token; only grace reads PRV/priv.
	alice, err := svc.Password(ctx, "alice", worldPassword)
	must(t, err)
	gr, err := svc.Token(ctx, w.tokens["grace-read"])
	must(t, err)
	must(t, svc.Authorize(ctx, gr, Resource{Repo: w.priv}, Read))
	if _, ok := svc.OutageRead(gr, "PRV", "priv"); !ok {
		t.Fatal("a read authorization was not remembered")
	}

	st.down.Store(true)
	if p, err := svc.Password(ctx, "alice", worldPassword); err != nil || p.UserID != alice.UserID {
		t.Errorf("password during the outage = %v, %v; want alice from the grace", p, err)
	}
	if _, err := svc.Password(ctx, "alice", "wrong"); !problem.Is(err, problem.Unavailable) {
		t.Errorf("wrong password during the outage: %v, want Unavailable", err)
	}
	if _, err := svc.Token(ctx, w.tokens["root-read"]); !problem.Is(err, problem.Unavailable) {
		t.Errorf("token never seen during the outage: %v, want Unavailable", err)
	}
	p, err := svc.Token(ctx, w.tokens["grace-read"])
	if err != nil || p.UserID != gr.UserID || p.Scope != store.ScopeRead {
		t.Fatalf("token during the outage = %v, %v", p, err)
	}
	if r, ok := svc.OutageRead(p, "prv", "PRIV"); !ok || r.ID != w.priv.ID {
		t.Errorf("OutageRead(grace, PRV/priv) = %v, %v", r, ok)
	}
	if _, ok := svc.OutageRead(p, "PRV", "other"); ok {
		t.Error("OutageRead answered for a repository never authorized")
	}
	if _, ok := svc.OutageRead(alice, "PRV", "priv"); ok {
		t.Error("OutageRead answered for another principal")
	}
	if _, ok := svc.OutageRead(Anonymous(), "PRV", "priv"); ok {
		t.Error("OutageRead answered for an anonymous caller")
	}

	now = now.Add(10*time.Minute + time.Second)
	if _, err := svc.Token(ctx, w.tokens["grace-read"]); !problem.Is(err, problem.Unavailable) {
		t.Errorf("token after the grace: %v, want Unavailable", err)
	}
	if _, ok := svc.OutageRead(p, "PRV", "priv"); ok {
		t.Error("OutageRead answered after the grace")
	}
}

func TestOutageGraceDisabled(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, newFakeStore())
	st := &outageStore{Store: w.st}
	svc := New(st, nil, nil)
	gr, err := svc.Token(ctx, w.tokens["grace-read"])
	must(t, err)
	must(t, svc.Authorize(ctx, gr, Resource{Repo: w.priv}, Read))
	st.down.Store(true)
	if _, err := svc.Token(ctx, w.tokens["grace-read"]); !problem.Is(err, problem.Unavailable) {
		t.Errorf("token with no grace: %v, want Unavailable", err)
	}
	if _, ok := svc.OutageRead(gr, "PRV", "priv"); ok {
		t.Error("OutageRead answered with no grace")
	}
}
