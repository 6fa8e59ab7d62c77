package githttp_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
)

// policyFunc is a test hooks.Policy.
type policyFunc func(ctx context.Context, req hooks.Request, updates []hooks.RefUpdate, quarantineEnv []string) error

func (f policyFunc) CheckPush(ctx context.Context, req hooks.Request, updates []hooks.RefUpdate, quarantineEnv []string) error {
	return f(ctx, req, updates, quarantineEnv)
}

// requestEnds hands out, per request, a channel closed when that request's
// context ends: the moment net/http notices the client has gone.
type requestEnds struct {
	mu  sync.Mutex
	chs []<-chan struct{}
}

func (r *requestEnds) record(req *http.Request) {
	if req.Method != http.MethodPost {
		return
	}
	r.mu.Lock()
	r.chs = append(r.chs, req.Context().Done())
	r.mu.Unlock()
}

func (r *requestEnds) last() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.chs) == 0 {
		return nil
	}
	return r.chs[len(r.chs)-1]
}

// TestPushCompletesAfterClientHangsUp: a client that sends the whole push
// and hangs up before the answer (a proxy timing out, a killed CI job) has
// still pushed, as it has over SSH. The pre-receive policy holds the push
// until net/http has noticed the hang-up and ended the request's context,
// which used to cancel receive-pack and lose the push.
func TestPushCompletesAfterClientHangsUp(t *testing.T) {
	ends := &requestEnds{}
	held := make(chan bool, 1)
	policy := policyFunc(func(ctx context.Context, _ hooks.Request, _ []hooks.RefUpdate, _ []string) error {
		select {
		case <-ends.last():
			held <- true
		case <-time.After(10 * time.Second):
			held <- false
		}
		return nil
	})
	f := newFixture(t, serverOptions{policy: policy, onRequest: ends.record})
	wt := f.seed(1)
	old := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
	head := f.commit(wt, "x.txt", "x\n")
	pack := packBetween(t, wt, old, head)

	cmd := fmt.Sprintf("%s %s refs/heads/main\x00report-status side-band-64k\n", old, head)
	body := fmt.Sprintf("%04x%s0000", len(cmd)+4, cmd) + string(pack)
	conn, err := net.Dial("tcp", f.host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /scm/PROJ/app.git/git-receive-pack HTTP/1.1\r\nHost: %s\r\n"+
		"Authorization: %s\r\nContent-Type: application/x-git-receive-pack-request\r\n"+
		"Content-Length: %d\r\n\r\n%s", f.host, basic("alice", f.aliceTok), len(body), body)
	conn.Close()

	wait.For(t, "operation to end", 10*time.Second, func() bool { return f.operationLogged("receive-pack") })
	if !strings.Contains(f.refs(f.repo), head+" refs/heads/main") {
		t.Fatalf("the push was lost when its client hung up:\n%s\nlog:\n%s", f.refs(f.repo), f.log.String())
	}
	if !<-held {
		t.Fatal("the request's context never ended; the test did not hang up")
	}
	f.fsck(f.repo)
}

// TestOrphanedPushMovesNoRef: a receive-pack whose node has gone (here its
// hooks server, which is what a dead node takes with it) must not move a
// ref even though its pack is in and pre-receive had allowed it: the
// reference-transaction hook cannot reach the node, so git's prepared
// phase fails and the transaction is aborted. This is what keeps a push
// that a load balancer resent to another node from being applied twice.
func TestOrphanedPushMovesNoRef(t *testing.T) {
	var f *fixture
	policy := policyFunc(func(ctx context.Context, _ hooks.Request, _ []hooks.RefUpdate, _ []string) error {
		socket := f.hooks.SocketPath()
		go f.hooks.Close()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(socket); err != nil {
				break
			}
		}
		return nil
	})
	f = newFixture(t, serverOptions{policy: policy})
	wt := f.seed(1)
	before := f.refs(f.repo)
	old := strings.TrimSpace(f.mustGit(wt, "rev-parse", "main"))
	head := f.commit(wt, "x.txt", "x\n")
	body := pushBody("report-status", packBetween(t, wt, old, head), [3]string{old, head, "refs/heads/main"})
	resp := f.postPush(body)
	if strings.Contains(resp, "ok refs/heads/main") {
		t.Fatalf("a push whose node is gone reported success: %q", resp)
	}
	if after := f.refs(f.repo); after != before {
		t.Fatalf("refs moved:\n%s\nwant:\n%s", after, before)
	}
}
