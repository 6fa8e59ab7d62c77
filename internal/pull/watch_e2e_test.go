package pull_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// TestWatch: a reader who watches a pull request hears of its comments;
// watching is idempotent both ways, and hidden from non-readers.
func TestWatch(t *testing.T) {
	w := newWorld(t)
	carol := w.n.CreateUser(t, "carol", "carol-password-123")
	w.n.Grant(t, w.repo, carol.ID, store.PermRepoRead)
	carolCred := "carol:" + w.n.Token(t, carol.ID, store.ScopeWrite)

	w.branch("watched", "main", map[string]string{"w.txt": "w\n"})
	pr := w.openPR("watched", "main", "Watched")
	base := fmt.Sprintf("%s/%d", prs, pr.ID)

	w.must(404, w.eve, "POST", base+"/watch", nil, nil) // eve cannot read the repository
	w.must(404, carolCred, "POST", prs+"/999/watch", nil, nil)
	w.must(204, carolCred, "POST", base+"/watch", nil, nil)
	w.must(204, carolCred, "POST", base+"/watch", nil, nil)
	got, err := w.n.Store().(store.PullStore).Watchers(context.Background(), pr.ID)
	if err != nil || len(got) != 1 || got[0] != carol.ID {
		t.Fatalf("watchers: %v %v", got, err)
	}

	// bob comments: carol, neither author nor reviewer, hears of it.
	w.must(201, w.bob, "POST", base+"/comments", map[string]any{"text": "watch this"}, nil)
	var inbox inboxJSON
	wait.For(t, "comment in the watcher's inbox", 45*time.Second, func() bool {
		w.must(200, carolCred, "GET", "/rest/sluice/1.0/inbox", nil, &inbox)
		return len(inbox.Values) == 1 && inbox.Values[0].Kind == store.NotifyComment
	})

	w.must(204, carolCred, "DELETE", base+"/watch", nil, nil)
	w.must(204, carolCred, "DELETE", base+"/watch", nil, nil)
	if got, err := w.n.Store().(store.PullStore).Watchers(context.Background(), pr.ID); err != nil || len(got) != 0 {
		t.Fatalf("watchers after unwatch: %v %v", got, err)
	}
}
