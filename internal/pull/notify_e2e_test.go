package pull_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// smtpSink is a minimal SMTP server on 127.0.0.1 that keeps every
// message it is given: enough of RFC 5321 for net/smtp's client (no
// STARTTLS, no AUTH offered).
type smtpSink struct {
	ln   net.Listener
	mu   sync.Mutex
	msgs []mailMsg
	wg   sync.WaitGroup
}

type mailMsg struct {
	from, to string
	data     string
}

func newSMTPSink(t *testing.T) *smtpSink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpSink{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *smtpSink) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *smtpSink) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	say := func(line string) { fmt.Fprintf(c, "%s\r\n", line) }
	say("220 sink ESMTP")
	var m mailMsg
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(cmd, "EHLO"), strings.HasPrefix(cmd, "HELO"):
			say("250-sink")
			say("250 8BITMIME")
		case strings.HasPrefix(cmd, "MAIL FROM:"):
			m = mailMsg{from: strings.Fields(line[10:])[0]} // parameters (BODY=8BITMIME) dropped
			say("250 ok")
		case strings.HasPrefix(cmd, "RCPT TO:"):
			m.to = strings.TrimSpace(line[8:])
			say("250 ok")
		case cmd == "DATA":
			say("354 go on")
			var b strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				b.WriteString(l)
			}
			m.data = b.String()
			s.mu.Lock()
			s.msgs = append(s.msgs, m)
			s.mu.Unlock()
			say("250 queued")
		case cmd == "QUIT":
			say("221 bye")
			return
		default:
			say("250 ok")
		}
	}
}

func (s *smtpSink) messages() []mailMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mailMsg(nil), s.msgs...)
}

type inboxJSON struct {
	Unread int `json:"unread"`
	Values []struct {
		ID    int64  `json:"id"`
		Kind  string `json:"kind"`
		Title string `json:"title"`
		Link  string `json:"link"`
		Read  bool   `json:"read"`
		Actor *struct {
			Name string `json:"name"`
		} `json:"actor"`
	} `json:"values"`
}

// TestNotifications follows one pull request through review request,
// comment and merge, and checks the inbox (REST and service) and the
// email the notify job sends.
func TestNotifications(t *testing.T) {
	sink := newSMTPSink(t)
	hooked := make(chan string, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooked <- r.Header.Get("X-Event-Key")
	}))
	defer receiver.Close()
	w := newWorldOpts(t, testbed.NodeOptions{Configure: func(c *config.Config) {
		c.SMTP = config.SMTP{Host: "127.0.0.1", Port: sink.port(), From: "Sluice <sluice@example.com>"}
		// The receiver is on loopback, refused unless allowed.
		c.Webhooks.AllowNetworks = []string{"127.0.0.1/32"}
	}})
	ctx := context.Background()
	bob, err := w.n.Store().UserByID(ctx, w.bobID)
	if err != nil {
		t.Fatal(err)
	}
	bob.Email = "bob@example.com"
	if err := w.n.Store().UpdateUser(ctx, bob); err != nil {
		t.Fatal(err)
	}
	w.must(201, w.admin, "POST", "/rest/api/1.0/projects/PRJ/repos/app/webhooks", map[string]any{
		"name": "ci", "url": receiver.URL, "events": []string{"pr:merged"}}, nil)

	w.branch("notify", "main", map[string]string{"n.txt": "n\n"})
	pr := w.openPR("notify", "main", "Notify <me>") // bob is the reviewer
	base := fmt.Sprintf("%s/%d", prs, pr.ID)
	var inbox inboxJSON
	wait.For(t, "review request in bob's inbox", 45*time.Second, func() bool {
		w.must(200, w.bob, "GET", "/rest/sluice/1.0/inbox", nil, &inbox)
		return len(inbox.Values) == 1
	})
	if v := inbox.Values[0]; v.Kind != store.NotifyReviewRequested || !strings.Contains(v.Title, "asked you to review PRJ/app#1") ||
		v.Actor == nil || v.Actor.Name != "admin" || !strings.HasSuffix(v.Link, "/projects/PRJ/repos/app/pull-requests/1") || inbox.Unread != 1 {
		t.Fatalf("bob's inbox: %+v", inbox)
	}

	// bob comments: the author hears of it, bob does not hear of his own.
	w.must(201, w.bob, "POST", base+"/comments", map[string]any{"text": "nice"}, nil)
	wait.For(t, "comment in the author's inbox", 45*time.Second, func() bool {
		w.must(200, w.admin, "GET", "/rest/sluice/1.0/inbox", nil, &inbox)
		return len(inbox.Values) == 1 && inbox.Values[0].Kind == store.NotifyComment
	})
	w.must(200, w.admin, "POST", fmt.Sprintf("%s/merge?version=%d", base, pr.Version), nil, nil)
	wait.For(t, "merge in bob's inbox", 45*time.Second, func() bool {
		w.must(200, w.bob, "GET", "/rest/sluice/1.0/inbox", nil, &inbox)
		return len(inbox.Values) == 2
	})
	if inbox.Values[0].Kind != store.NotifyMerged || inbox.Unread != 2 {
		t.Fatalf("bob's inbox after the merge: %+v", inbox)
	}
	if got := <-hooked; got != "pr:merged" {
		t.Fatalf("webhook to an allowed loopback address: event %q", got)
	}

	// The service method the dashboard uses sees the same.
	rows, err := w.n.App.Notify.Inbox(ctx, w.bobID, true, store.Page{Limit: 10})
	if err != nil || len(rows) != 2 {
		t.Fatalf("Inbox: %d rows, %v", len(rows), err)
	}

	// Mark one read, then all; eve sees nothing of bob's.
	var marked struct {
		Marked int64 `json:"marked"`
	}
	w.must(200, w.eve, "POST", "/rest/sluice/1.0/inbox/read", map[string]any{"ids": []int64{inbox.Values[0].ID}}, &marked)
	if marked.Marked != 0 {
		t.Fatalf("eve marked %d of bob's notifications", marked.Marked)
	}
	var eveInbox inboxJSON
	w.must(200, w.eve, "GET", "/rest/sluice/1.0/inbox", nil, &eveInbox)
	if len(eveInbox.Values) != 0 {
		t.Fatalf("eve's inbox: %+v", eveInbox)
	}
	w.must(200, w.bob, "POST", "/rest/sluice/1.0/inbox/read", map[string]any{"ids": []int64{inbox.Values[0].ID}}, &marked)
	w.must(200, w.bob, "GET", "/rest/sluice/1.0/inbox?unread=true", nil, &inbox)
	if marked.Marked != 1 || inbox.Unread != 1 || len(inbox.Values) != 1 || inbox.Values[0].Kind != store.NotifyReviewRequested {
		t.Fatalf("after marking one read: marked %d, %+v", marked.Marked, inbox)
	}
	w.must(200, w.bob, "POST", "/rest/sluice/1.0/inbox/read", nil, nil)
	w.must(200, w.bob, "GET", "/rest/sluice/1.0/inbox", nil, &inbox)
	if inbox.Unread != 0 || len(inbox.Values) != 2 || !inbox.Values[1].Read {
		t.Fatalf("after marking all read: %+v", inbox)
	}
	if code := w.call("", "GET", "/rest/sluice/1.0/inbox", nil, nil); code != 401 {
		t.Fatalf("anonymous inbox: %d", code)
	}

	// bob has an address, so the job mailed him both; the admin has none.
	wait.For(t, "two emails to bob", 45*time.Second, func() bool { return len(sink.messages()) >= 2 })
	msgs := sink.messages()
	if len(msgs) != 2 {
		t.Fatalf("%d emails sent: %+v", len(msgs), msgs)
	}
	subjects := ""
	for _, m := range msgs {
		if m.to != "<bob@example.com>" || m.from != "<sluice@example.com>" {
			t.Errorf("envelope %s -> %s", m.from, m.to)
		}
		if !strings.Contains(m.data, "\r\nTo: bob@example.com\r\n") || !strings.Contains(m.data, "/projects/PRJ/repos/app/pull-requests/1\r\n") {
			t.Errorf("message:\n%s", m.data)
		}
		subjects += m.data[strings.Index(m.data, "Subject: "):]
	}
	if !strings.Contains(subjects, "asked you to review PRJ/app#1: Notify <me>") || !strings.Contains(subjects, "Administrator merged PRJ/app#1") {
		t.Errorf("subjects: %s", subjects)
	}
}

// TestBranchPermissionsOverSSH pushes over the built-in SSH server with
// OpenSSH: the same pre-receive policy refuses, naming the rule and the
// branch, and reads the quarantined objects to tell a fast-forward.
func TestBranchPermissionsOverSSH(t *testing.T) {
	w := newWorldOpts(t, testbed.NodeOptions{SSH: true})
	admin, err := w.n.Store().UserByName(context.Background(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	env := sshKey(t, w.n, admin.ID)
	w.git("remote", "add", "ssh", w.n.SSHURL("PRJ", "app"))
	push := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"push", "-q", "ssh"}, args...)...)
		cmd.Dir = w.work
		cmd.Env = append(testbed.GitEnv(t.TempDir()), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		return stderr.String(), err
	}
	restrict := "/rest/branch-permissions/2.0/projects/PRJ/repos/app/restrictions"
	var r struct {
		ID int64 `json:"id"`
	}
	w.must(200, w.admin, "POST", restrict, map[string]any{"type": "pull-request-only",
		"matcher": map[string]any{"id": "main", "type": map[string]string{"id": "BRANCH"}}}, &r)
	w.must(200, w.admin, "POST", restrict, map[string]any{"type": "fast-forward-only",
		"matcher": map[string]any{"id": "ssh/*", "type": map[string]string{"id": "PATTERN"}}}, nil)

	w.git("checkout", "-q", "main")
	w.write("direct.txt", "direct\n")
	w.commit("direct over ssh")
	msg, err := push("main")
	if err == nil {
		t.Fatal("push over SSH to a pull-request-only branch succeeded")
	}
	if !strings.Contains(msg, `branch "main" can only be changed by merging a pull request`) ||
		!strings.Contains(msg, fmt.Sprintf("branch permission #%d: pull-request-only on main", r.ID)) {
		t.Fatalf("rejection over SSH: %q", msg)
	}

	w.git("checkout", "-q", "-B", "ssh/topic", "origin/main")
	w.write("t.txt", "1\n")
	w.commit("one")
	if msg, err := push("ssh/topic"); err != nil {
		t.Fatalf("new branch over SSH: %v %s", err, msg)
	}
	w.write("t.txt", "2\n")
	w.commit("two")
	if msg, err := push("ssh/topic"); err != nil {
		t.Fatalf("fast-forward over SSH: %v %s", err, msg)
	}
	w.git("reset", "-q", "--hard", "HEAD~1")
	w.write("t.txt", "rewritten\n")
	w.commit("rewrite")
	if msg, err := push("+ssh/topic"); err == nil || !strings.Contains(msg, `branch "ssh/topic" only accepts fast-forward updates`) {
		t.Fatalf("force push over SSH: %v %q", err, msg)
	}
}

// sshKey registers a new key for the user and returns the environment
// that makes git use it through OpenSSH.
func sshKey(t *testing.T, n *testbed.Node, userID int64) []string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Store().AddSSHKey(context.Background(), &store.SSHKey{UserID: userID, Label: "pull-test",
		PublicKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))),
		Fingerprint: ssh.FingerprintSHA256(signer.PublicKey())}); err != nil {
		t.Fatal(err)
	}
	return []string{"GIT_SSH_COMMAND=ssh -F /dev/null -i " + keyFile + " -o IdentitiesOnly=yes -o UserKnownHostsFile=" +
		filepath.Join(dir, "known_hosts") + " -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR"}
}
