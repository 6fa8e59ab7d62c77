package sshd_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-scm/sluice/internal/sshd"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// msgReadOnly is what a push to a node without its database is told.
const msgReadOnly = "read-only: the database is unavailable; pushes are refused until it returns"

// TestReadOnlyRefusesPushes: while the node says its database is away, a
// push over SSH is refused with the read-only message and EX_TEMPFAIL —
// also when the key itself could not be checked, which would otherwise
// answer "cannot check SSH keys" — while clones and fetches are not
// refused by it; once the database is back the same push goes through.
func TestReadOnlyRefusesPushes(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{})
	r := n.CreateRepo(t, "PROJ", "app")
	u := n.CreateUser(t, "alice", "alice-password")
	n.Grant(t, r, u.ID, store.PermRepoWrite)
	k := newKey(t)
	register(t, n, k, u.ID, 0, "")

	var readOnly atomic.Bool
	st := &downStore{Store: n.Store()}
	h := newHygieneOn(t, n, k, sshd.Config{KeepAlive: -1, ReadOnly: func(context.Context) bool { return readOnly.Load() }},
		st, n.App.Auth)
	url := "ssh://git@" + h.addr + "/PROJ/app.git"
	c := newClient(t, k)
	wt := testbed.WorkTree(t, 1)

	readOnly.Store(true)
	_, errOut, code := c.ssh(h.addr, strings.NewReader("0000"), nil, "git-receive-pack '/PROJ/app.git'")
	if code != 75 {
		t.Errorf("receive-pack while read-only: exit %d, want 75; stderr %q", code, errOut)
	}
	mustContain(t, "ssh stderr", errOut, msgReadOnly)
	if _, errOut, err := c.git(wt, nil, "push", url, "HEAD:refs/heads/main"); err == nil {
		t.Fatal("push succeeded while read-only")
	} else {
		mustContain(t, "git push stderr", errOut, msgReadOnly)
	}
	// The database really is up here: a read is not refused by the
	// read-only state itself.
	if _, errOut, code := c.ssh(h.addr, strings.NewReader("0000"), nil, "git-upload-pack '/PROJ/app.git'"); code != 0 {
		t.Errorf("upload-pack while read-only: exit %d: %s", code, errOut)
	}

	// The key cannot be looked up either: the push is still told why.
	st.down.Store(true)
	_, errOut, code = c.ssh(h.addr, strings.NewReader("0000"), nil, "git-receive-pack '/PROJ/app.git'")
	if code != 75 || !strings.Contains(errOut, msgReadOnly) {
		t.Errorf("receive-pack with the key unchecked: exit %d, stderr %q; want 75 and %q", code, errOut, msgReadOnly)
	}
	st.down.Store(false)

	readOnly.Store(false)
	if _, errOut, err := c.git(wt, nil, "push", url, "HEAD:refs/heads/main"); err != nil {
		t.Fatalf("push once the database is back: %v: %s", err, errOut)
	}
}
