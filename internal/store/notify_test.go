package store_test

import (
	"context"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
)

// TestNotificationStore runs the inbox queries on both dialects.
func TestNotificationStore(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) store.Store{"sqlite": openSQLite, "postgres": openPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runNotificationStore(t, open(t))
		})
	}
}

func runNotificationStore(t *testing.T, st store.Store) {
	ctx := context.Background()
	ns := st.(store.NotificationStore)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ann := &store.User{Name: "ann", Active: true}
	must(st.CreateUser(ctx, ann))
	ben := &store.User{Name: "ben", Active: true}
	must(st.CreateUser(ctx, ben))
	p := &store.Project{Key: "PRJ", Name: "p"}
	must(st.CreateProject(ctx, p))
	r := &store.Repository{ProjectID: p.ID, Slug: "app", Name: "app"}
	must(st.CreateRepo(ctx, r))

	add := func(user int64, dedupe, kind string) (*store.Notification, bool) {
		t.Helper()
		n := &store.Notification{UserID: user, Dedupe: dedupe, Kind: kind, RepoID: r.ID, ActorID: ben.ID, Title: "t " + dedupe, Link: "/x"}
		created, err := ns.AddNotification(ctx, n)
		must(err)
		return n, created
	}
	first, created := add(ann.ID, "pr:1:merged", store.NotifyMerged)
	if !created || first.ID == 0 {
		t.Fatalf("first insert: created %v id %d", created, first.ID)
	}
	if _, created := add(ann.ID, "pr:1:merged", store.NotifyMerged); created {
		t.Fatal("the same event was added twice for one user")
	}
	add(ben.ID, "pr:1:merged", store.NotifyMerged) // another user, same event
	second, _ := add(ann.ID, "pr:1:comment:5", store.NotifyComment)

	list, err := ns.ListNotifications(ctx, ann.ID, false, store.Page{Limit: 10})
	must(err)
	if len(list) != 2 || list[0].ID != second.ID || list[1].ActorID != ben.ID || list[1].Kind != store.NotifyMerged || list[1].ReadAt != nil {
		t.Fatalf("ann's inbox: %+v", list)
	}
	if n, err := ns.UnreadNotifications(ctx, ann.ID); err != nil || n != 2 {
		t.Fatalf("unread = %d, %v", n, err)
	}
	// ben's id in ann's request changes nothing of ben's.
	benList, _ := ns.ListNotifications(ctx, ben.ID, false, store.Page{Limit: 10})
	n, err := ns.MarkNotificationsRead(ctx, ann.ID, []int64{first.ID, benList[0].ID})
	must(err)
	if n != 1 {
		t.Fatalf("marked %d read, want 1", n)
	}
	if n, _ := ns.UnreadNotifications(ctx, ben.ID); n != 1 {
		t.Fatalf("ben's notification marked read by ann: unread %d", n)
	}
	unread, _ := ns.ListNotifications(ctx, ann.ID, true, store.Page{Limit: 10})
	if len(unread) != 1 || unread[0].ID != second.ID {
		t.Fatalf("unread only: %+v", unread)
	}
	if n, _ := ns.MarkNotificationsRead(ctx, ann.ID, nil); n != 1 {
		t.Fatalf("mark all read changed %d, want 1", n)
	}

	unsent, err := ns.UnsentNotifications(ctx, "pr:1:merged")
	must(err)
	if len(unsent) != 2 {
		t.Fatalf("unsent: %+v", unsent)
	}
	must(ns.MarkNotificationEmailed(ctx, unsent[0].ID))
	if unsent, _ = ns.UnsentNotifications(ctx, "pr:1:merged"); len(unsent) != 1 {
		t.Fatalf("after one email, unsent: %+v", unsent)
	}
}
