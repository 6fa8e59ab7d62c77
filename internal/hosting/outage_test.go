package hosting_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/hosting"
	"github.com/sluice-scm/sluice/internal/packcache"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// outageStore answers Unavailable from the reads a clone makes while down
// is set, as the store does once its bounded connection wait runs out.
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

func (o *outageStore) RepoBySlug(ctx context.Context, projectKey, slug string) (*store.Repository, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	return o.Store.RepoBySlug(ctx, projectKey, slug)
}

func (o *outageStore) UserByID(ctx context.Context, id int64) (*store.User, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	return o.Store.UserByID(ctx, id)
}

func (o *outageStore) EffectiveGrants(ctx context.Context, userID, projectID, repoID int64) (g, p, r []store.Permission, err error) {
	if err := o.err(); err != nil {
		return nil, nil, nil, err
	}
	return o.Store.EffectiveGrants(ctx, userID, projectID, repoID)
}

func (o *outageStore) RepoState(ctx context.Context, repoID int64) (store.RepoState, error) {
	if err := o.err(); err != nil {
		return store.RepoState{}, err
	}
	return o.Store.RepoState(ctx, repoID)
}

// TestOutageServesCachedReads is issue 21 item 7: a node cut off from the
// database answers a recent reader's clone from its pack cache, and
// nothing else.
func TestOutageServesCachedReads(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	st := &outageStore{Store: e.st}
	a := auth.New(st, logger, reg)
	a.SetOutageGrace(10 * time.Minute)
	cache, err := packcache.New(packcache.Config{
		Dir: t.TempDir(), Packs: true, Refs: true, MaxBytes: 1 << 30, TTL: time.Hour,
		MinOccurrences: 1, GitIdentity: "test", RefsDigest: e.repos.RefsDigest,
	}, st, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	svc := hosting.New(hosting.Deps{Store: st, Auth: a, Repos: e.repos, Git: e.git, Logger: logger, Registerer: reg, Cache: cache})

	head, err := exec.Command("git", "-C", e.repos.Path(e.repo.ID), "rev-parse", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	oid := strings.TrimSpace(string(head))
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	body := pkt("want "+oid+" side-band-64k ofs-delta\n") + "0000" + pkt("done\n")
	op := func(p *auth.Principal, service string) hosting.Op {
		return hosting.Op{Principal: p, ProjectKey: "PROJ", Slug: "app", Service: service, Transport: "http", Stateless: true}
	}
	clone := func(p *auth.Principal) (string, string, error) {
		var adv, pack bytes.Buffer
		if err := svc.AdvertiseRefs(ctx, op(p, hosting.UploadPack), &adv); err != nil {
			return adv.String(), "", err
		}
		err := svc.Serve(ctx, op(p, hosting.UploadPack), strings.NewReader(body), &pack)
		return adv.String(), pack.String(), err
	}
	settle := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for cache.Stats().InProgress != 0 {
			if time.Now().After(deadline) {
				t.Fatal("cache entries still in production")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Before the outage bob clones, filling the cache, and alice reads.
	adv, pack, err := clone(e.bob)
	if err != nil || !strings.Contains(adv, "refs/heads/main") || !strings.Contains(pack, "PACK") {
		t.Fatalf("clone before the outage: %v\nadvertisement %q", err, adv)
	}
	settle()
	if _, err := svc.Resolve(ctx, e.alice, "PROJ", "app", auth.Read); err != nil {
		t.Fatal(err)
	}
	runs := e.git.Started("upload-pack")

	st.down.Store(true)
	hits := cache.Stats().Hits
	adv2, pack2, err := clone(e.bob)
	if err != nil || adv2 != adv || pack2 != pack {
		t.Fatalf("clone during the outage: %v (same advertisement %v, same pack %v)", err, adv2 == adv, pack2 == pack)
	}
	if got := cache.Stats().Hits - hits; got != 2 {
		t.Errorf("%d cache hits during the outage, want 2", got)
	}

	// A push is refused, even by a writer the grace knows as a reader.
	err = svc.AdvertiseRefs(ctx, op(e.alice, hosting.ReceivePack), &bytes.Buffer{})
	if !problem.Is(err, problem.Unavailable) {
		t.Errorf("push during the outage: %v, want Unavailable", err)
	}
	// A principal the node never saw gets 503, not a clone nor a 404.
	if _, _, err := clone(e.carol); !problem.Is(err, problem.Unavailable) || problem.KindOf(err).HTTPStatus() != 503 {
		t.Errorf("unknown principal during the outage: %v, want Unavailable", err)
	}
	// A request the cache does not hold is not handed to git.
	other := pkt("want "+oid+" side-band-64k ofs-delta no-progress\n") + "0000" + pkt("done\n")
	if err := svc.Serve(ctx, op(e.bob, hosting.UploadPack), strings.NewReader(other), &bytes.Buffer{}); !problem.Is(err, problem.Unavailable) {
		t.Errorf("uncached request during the outage: %v, want Unavailable", err)
	}

	// A push lands on disk through another node: the entries are stale.
	if out, err := exec.Command("git", "-C", e.repos.Path(e.repo.ID), "update-ref", "refs/heads/other", oid).CombinedOutput(); err != nil {
		t.Fatalf("update-ref: %v\n%s", err, out)
	}
	if adv, _, err := clone(e.bob); !problem.Is(err, problem.Unavailable) || adv != "" {
		t.Errorf("stale advertisement during the outage: %v, wrote %q", err, adv)
	}
	if err := svc.Serve(ctx, op(e.bob, hosting.UploadPack), strings.NewReader(body), &bytes.Buffer{}); !problem.Is(err, problem.Unavailable) {
		t.Errorf("stale pack during the outage: %v, want Unavailable", err)
	}
	if n := e.git.Started("upload-pack"); n != runs {
		t.Errorf("git ran %v times during the outage", n-runs)
	}

	st.down.Store(false)
	if adv, _, err := clone(e.bob); err != nil || !strings.Contains(adv, "refs/heads/other") {
		t.Fatalf("clone after the outage: %v\n%q", err, adv)
	}
}
