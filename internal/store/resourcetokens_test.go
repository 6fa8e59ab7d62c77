package store_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// TestResourceTokens runs the project and repository access token queries
// on both dialects.
func TestResourceTokens(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runResourceTokens(t, open(t))
		})
	}
}

func runResourceTokens(t *testing.T, st store.Store) {
	ctx := context.Background()
	ts := st.(store.ResourceTokenStore)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := func(err error, k problem.Kind, what string) {
		t.Helper()
		if !problem.Is(err, k) {
			t.Fatalf("%s: got %v, want %v", what, err, k)
		}
	}
	u := &store.User{Name: "ann", Active: true}
	must(st.CreateUser(ctx, u))
	p := &store.Project{Key: "PRJ", Name: "p"}
	must(st.CreateProject(ctx, p))
	q := &store.Project{Key: "OTH", Name: "o"}
	must(st.CreateProject(ctx, q))
	r := &store.Repository{ProjectID: p.ID, Slug: "app", Name: "app"}
	must(st.CreateRepo(ctx, r))

	exp := time.Now().Add(48 * time.Hour)
	pt := &store.ResourceToken{ProjectID: p.ID, Name: "ci", Hash: bytes.Repeat([]byte{1}, 32),
		ProjectScope: store.ScopeRead, RepoScope: store.ScopeWrite, CreatedBy: u.ID, ExpiresAt: &exp}
	must(ts.CreateResourceToken(ctx, pt))
	rt := &store.ResourceToken{RepoID: r.ID, Name: "deploy", Hash: bytes.Repeat([]byte{2}, 32), RepoScope: store.ScopeRead}
	must(ts.CreateResourceToken(ctx, rt))
	if pt.ID == 0 || rt.ID == 0 || pt.CreatedAt.IsZero() {
		t.Fatalf("ids and times not set: %+v %+v", pt, rt)
	}

	// Refusals: shape, scopes, duplicates, missing resources.
	for what, bad := range map[string]*store.ResourceToken{
		"both":          {ProjectID: p.ID, RepoID: r.ID, Name: "x", Hash: []byte{9}, RepoScope: store.ScopeRead},
		"neither":       {Name: "x", Hash: []byte{9}, RepoScope: store.ScopeRead},
		"no scope":      {ProjectID: p.ID, Name: "x", Hash: []byte{9}},
		"bad scope":     {ProjectID: p.ID, Name: "x", Hash: []byte{9}, RepoScope: "all"},
		"repo project":  {RepoID: r.ID, Name: "x", Hash: []byte{9}, ProjectScope: store.ScopeRead},
		"empty name":    {ProjectID: p.ID, Name: "", Hash: []byte{9}, RepoScope: store.ScopeRead},
		"empty hash":    {ProjectID: p.ID, Name: "x", RepoScope: store.ScopeRead},
		"control chars": {ProjectID: p.ID, Name: "a\nb", Hash: []byte{9}, RepoScope: store.ScopeRead},
	} {
		want(ts.CreateResourceToken(ctx, bad), problem.Invalid, what)
	}
	want(ts.CreateResourceToken(ctx, &store.ResourceToken{ProjectID: q.ID, Name: "dup", Hash: pt.Hash, RepoScope: store.ScopeRead}),
		problem.Conflict, "same hash")
	want(ts.CreateResourceToken(ctx, &store.ResourceToken{ProjectID: 99999, Name: "x", Hash: []byte{7}, RepoScope: store.ScopeRead}),
		problem.NotFound, "missing project")
	want(ts.CreateResourceToken(ctx, &store.ResourceToken{RepoID: 99999, Name: "x", Hash: []byte{7}, RepoScope: store.ScopeRead}),
		problem.NotFound, "missing repository")

	got, err := ts.ResourceTokenByHash(ctx, pt.Hash)
	must(err)
	if got.ID != pt.ID || got.ProjectID != p.ID || got.RepoID != 0 || got.ProjectScope != store.ScopeRead ||
		got.RepoScope != store.ScopeWrite || got.CreatedBy != u.ID || got.ExpiresAt == nil || !got.ExpiresAt.Equal(*pt.ExpiresAt) {
		t.Fatalf("by hash: %+v, want %+v", got, pt)
	}
	_, err = ts.ResourceTokenByHash(ctx, []byte("nope"))
	want(err, problem.NotFound, "unknown hash")

	// By id, only within its own resource.
	_, err = ts.ResourceTokenByID(ctx, p.ID, 0, pt.ID)
	must(err)
	_, err = ts.ResourceTokenByID(ctx, q.ID, 0, pt.ID)
	want(err, problem.NotFound, "other project's token")
	_, err = ts.ResourceTokenByID(ctx, 0, r.ID, pt.ID)
	want(err, problem.NotFound, "project token by repository")
	_, err = ts.ResourceTokenByID(ctx, p.ID, r.ID, pt.ID)
	want(err, problem.Invalid, "two resources")

	// Listing pages, per resource.
	pt2 := &store.ResourceToken{ProjectID: p.ID, Name: "ci2", Hash: bytes.Repeat([]byte{3}, 32), ProjectScope: store.ScopeAdmin}
	must(ts.CreateResourceToken(ctx, pt2))
	list, err := ts.ListResourceTokens(ctx, p.ID, 0, store.Page{Limit: 1})
	must(err)
	if len(list) != 1 || list[0].ID != pt.ID {
		t.Fatalf("first page: %+v", list)
	}
	list, err = ts.ListResourceTokens(ctx, p.ID, 0, store.Page{Start: 1, Limit: 5})
	must(err)
	if len(list) != 1 || list[0].ID != pt2.ID {
		t.Fatalf("second page: %+v", list)
	}
	list, err = ts.ListResourceTokens(ctx, 0, r.ID, store.Page{})
	must(err)
	if len(list) != 1 || list[0].ID != rt.ID || list[0].Name != "deploy" {
		t.Fatalf("repository tokens: %+v", list)
	}

	// Update and touch.
	pt.Name, pt.RepoScope, pt.ExpiresAt = "ci-renamed", "", nil
	must(ts.UpdateResourceToken(ctx, pt))
	at := time.Now()
	must(ts.TouchResourceToken(ctx, pt.ID, at))
	got, err = ts.ResourceTokenByID(ctx, p.ID, 0, pt.ID)
	must(err)
	if got.Name != "ci-renamed" || got.RepoScope != "" || got.ExpiresAt != nil || got.LastUsedAt == nil {
		t.Fatalf("after update: %+v", got)
	}
	moved := *pt
	moved.ProjectID = q.ID
	want(ts.UpdateResourceToken(ctx, &moved), problem.NotFound, "update through another project")
	want(ts.TouchResourceToken(ctx, 99999, at), problem.NotFound, "touch missing")

	// The creator's deletion keeps the token; the resource's takes it.
	must(st.DeleteUser(ctx, u.ID))
	got, err = ts.ResourceTokenByHash(ctx, pt.Hash)
	must(err)
	if got.CreatedBy != 0 {
		t.Fatalf("creator kept after deletion: %d", got.CreatedBy)
	}
	want(ts.DeleteResourceToken(ctx, q.ID, 0, pt2.ID), problem.NotFound, "delete through another project")
	must(ts.DeleteResourceToken(ctx, p.ID, 0, pt2.ID))
	want(ts.DeleteResourceToken(ctx, p.ID, 0, pt2.ID), problem.NotFound, "delete twice")
	must(st.DeleteRepo(ctx, r.ID))
	_, err = ts.ResourceTokenByHash(ctx, rt.Hash)
	want(err, problem.NotFound, "token of a deleted repository")
	must(st.DeleteProject(ctx, p.ID))
	_, err = ts.ResourceTokenByHash(ctx, pt.Hash)
	want(err, problem.NotFound, "token of a deleted project")
}
