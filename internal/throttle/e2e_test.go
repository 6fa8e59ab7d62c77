package throttle_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/testbed/wait"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// ticketNode starts a node with one hosting ticket and no pack cache, so
// every git operation takes the ticket, and a repository with history.
func ticketNode(t *testing.T, queueWait time.Duration, withSSH bool) *testbed.Node {
	t.Helper()
	n := testbed.NewNode(t, testbed.NodeOptions{SSH: withSSH, Configure: func(c *config.Config) {
		c.Cache.Packs, c.Cache.Refs = false, false
		c.Throttle.Strategy, c.Throttle.Fixed = "fixed", 1
		c.Throttle.QueueWait = config.Duration{Duration: queueWait}
		c.Throttle.RateLimit = false
	}})
	n.CreateRepo(t, "PRJ", "app")
	wt := testbed.WorkTree(t, 5)
	testbed.Git(t, wt, "push", "-q", n.CloneURL("PRJ", "app", "admin", n.AdminPassword), "main")
	return n
}

// holdTicket takes the node's only ticket, as a long clone would, until
// the returned release is called.
func holdTicket(t *testing.T, n *testbed.Node) func() {
	t.Helper()
	release, err := n.App.Throttle.Admit(context.Background(), throttle.Ticket{
		Principal: &auth.Principal{UserID: 1 << 40, Name: "holder"}, Command: "upload-pack", Transport: "test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return release
}

type gitResult struct {
	stderr string
	err    error
}

func gitRun(dir string, env []string, args ...string) gitResult {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(testbed.GitEnv(dir), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return gitResult{stderr: stderr.String(), err: err}
}

func TestE2ESecondCloneWaitsThenCompletes(t *testing.T) {
	n := ticketNode(t, 30*time.Second, false)
	url := n.CloneURL("PRJ", "app", "admin", n.AdminPassword)
	release := holdTicket(t, n)

	// Two concurrent uncached clones while the only ticket is taken:
	// both wait; once it comes back they run one after the other.
	results := make([]gitResult, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = gitRun(t.TempDir(), nil, "clone", "-q", url, "clone")
		}()
	}
	wait.For(t, "two queued clones", 20*time.Second, func() bool { return n.App.Throttle.State().Queued == 2 })
	st := adminState(t, n)
	if st.Limit != 1 || st.InUse != 1 || st.Queued != 2 || st.Strategy != "fixed" {
		t.Fatalf("admin state while queued: %+v", st)
	}
	time.Sleep(200 * time.Millisecond)
	release()
	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("clone %d: %v\n%s", i+1, r.err, r.stderr)
		}
	}
	if st := n.App.Throttle.State(); st.InUse != 0 || st.Queued != 0 {
		t.Fatalf("tickets left after the clones: %+v", st)
	}
	// Both waited at least the 200 ms the ticket was held.
	h := histogram(t, n, "sluice_throttle_queue_wait_seconds")
	if h.GetSampleCount() < 2 || h.GetSampleSum() < 0.4 {
		t.Fatalf("queue wait histogram: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
}

func TestE2EQueueTimeoutMessage(t *testing.T) {
	n := ticketNode(t, time.Second, false)
	url := n.CloneURL("PRJ", "app", "admin", n.AdminPassword)
	holdTicket(t, n)

	// The real git client prints the reason (GET info/refs: a 503 with a
	// text body).
	r := gitRun(t.TempDir(), nil, "clone", "-q", url, "clone")
	if r.err == nil {
		t.Fatal("clone succeeded without a ticket")
	}
	if !strings.Contains(r.stderr, "remote: waited 1s for capacity; try again later") {
		t.Fatalf("git printed:\n%s", r.stderr)
	}

	// The HTTP answer itself: 503 with Retry-After.
	req, _ := http.NewRequest("GET", n.URL+"/scm/prj/app.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("admin", n.AdminPassword)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q, body %q", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if got := counter(t, n, "sluice_throttle_rejections_total", "reason", "queue_timeout"); got != 2 {
		t.Fatalf("queue_timeout rejections = %v, want 2", got)
	}
}

func TestE2ESSHWaitsWithProgressAndTimesOut(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		testbed.Missing(t, "the OpenSSH client", "apt-get install openssh-client")
	}
	n := ticketNode(t, 30*time.Second, true)
	u := n.CreateUser(t, "dev", "dev-password")
	if err := n.Store().SetGlobalPermission(context.Background(), store.Grant{UserID: u.ID, Permission: store.PermSysAdmin}); err != nil {
		t.Fatal(err)
	}
	env := sshEnv(t, n, u.ID)
	url := n.SSHURL("PRJ", "app")
	release := holdTicket(t, n)

	// Over SSH the waiting client is told so on stderr, and completes.
	done := make(chan gitResult, 1)
	go func() { done <- gitRun(t.TempDir(), env, "clone", "--progress", url, "clone") }()
	wait.For(t, "a queued ssh clone", 20*time.Second, func() bool { return n.App.Throttle.State().Queued == 1 })
	time.Sleep(100 * time.Millisecond)
	release()
	r := <-done
	if r.err != nil {
		t.Fatalf("clone: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "sluice: waiting for capacity, 0 ahead of you") {
		t.Fatalf("no progress message; git printed:\n%s", r.stderr)
	}
}

func TestE2ESSHQueueTimeout(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		testbed.Missing(t, "the OpenSSH client", "apt-get install openssh-client")
	}
	n := ticketNode(t, time.Second, true)
	u := n.CreateUser(t, "dev", "dev-password")
	if err := n.Store().SetGlobalPermission(context.Background(), store.Grant{UserID: u.ID, Permission: store.PermSysAdmin}); err != nil {
		t.Fatal(err)
	}
	env := sshEnv(t, n, u.ID)
	holdTicket(t, n)
	r := gitRun(t.TempDir(), env, "clone", "-q", n.SSHURL("PRJ", "app"), "clone")
	if r.err == nil {
		t.Fatal("clone succeeded without a ticket")
	}
	if !strings.Contains(r.stderr, "waited 1s for capacity; try again later") {
		t.Fatalf("git printed:\n%s", r.stderr)
	}
}

func TestE2ERateLimits(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{SSH: true, Configure: func(c *config.Config) {
		c.Cache.Packs, c.Cache.Refs = false, false
		c.Throttle.RateLimit = true
		c.Throttle.RateBucket, c.Throttle.RateRefill = 4, 0.01
	}})
	ctx := context.Background()
	n.CreateRepo(t, "PRJ", "app")
	alice := n.CreateUser(t, "alice", "alice-password")
	bob := n.CreateUser(t, "bob", "bob-password")
	carol := n.CreateUser(t, "carol", "carol-password")
	dave := n.CreateUser(t, "dave", "dave-password")
	for _, u := range []*store.User{alice, bob, carol, dave} {
		if err := n.Store().SetGlobalPermission(ctx, store.Grant{UserID: u.ID, Permission: store.PermSysAdmin}); err != nil {
			t.Fatal(err)
		}
	}
	g := &store.Group{Name: "ci"}
	if err := n.Store().CreateGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := n.Store().AddGroupMember(ctx, g.ID, carol.ID); err != nil {
		t.Fatal(err)
	}
	aliceToken, tok, err := n.App.Auth.CreateToken(ctx, alice.ID, "build", store.ScopeRead, nil)
	if err != nil {
		t.Fatal(err)
	}

	// The defaults come from the config until an administrator saves
	// settings through the API.
	res := rest(t, n, "GET", "/rest/sluice/1.0/admin/rate-limits", "admin", n.AdminPassword, "")
	var got struct {
		throttle.RateLimits
		Stored bool `json:"stored"`
	}
	decode(t, res, &got)
	if got.Stored || !got.Enabled || got.Bucket != 4 {
		t.Fatalf("initial settings %+v", got)
	}
	doc := `{"enabled": true, "bucket": 4, "refill": 0.01, "exemptions": [
		{"user": "admin", "unlimited": true},
		{"group": "ci", "unlimited": true},
		{"token": ` + itoa(tok.ID) + `, "bucket": 50, "refill": 1}]}`
	res = rest(t, n, "PUT", "/rest/sluice/1.0/admin/rate-limits", "admin", n.AdminPassword, doc)
	decode(t, res, &got)
	if res.StatusCode != 200 || !got.Stored || len(got.Exemptions) != 3 {
		t.Fatalf("PUT: %d %+v", res.StatusCode, got)
	}
	if res := rest(t, n, "PUT", "/rest/sluice/1.0/admin/rate-limits", "alice", "alice-password", `{"enabled": false}`); res.StatusCode != 400 {
		// alice is a sysadmin too; the document is what is wrong.
		t.Fatalf("invalid PUT: %d", res.StatusCode)
	}
	// The admin is unlimited now: give the repository some history.
	wt := testbed.WorkTree(t, 3)
	testbed.Git(t, wt, "push", "-q", n.CloneURL("PRJ", "app", "admin", n.AdminPassword), "main")
	stored, err := n.Store().GetSetting(ctx, throttle.SettingRateLimits)
	if err != nil || !strings.Contains(stored, `"ci"`) {
		t.Fatalf("stored setting %q: %v", stored, err)
	}

	// REST: alice had 4, the bad PUT took one; three more, then 429.
	for i, want := range []string{"2", "1", "0"} {
		res := rest(t, n, "GET", "/rest/api/1.0/projects", "alice", "alice-password", "")
		if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit") != "4" || res.Header.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d: %d, limit %q, remaining %q", i+1, res.StatusCode,
				res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"))
		}
	}
	res = rest(t, n, "GET", "/rest/api/1.0/projects", "alice", "alice-password", "")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" ||
		res.Header.Get("X-RateLimit-Limit") != "4" || res.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("over the limit: %d %v", res.StatusCode, res.Header)
	}
	// Exemptions: alice's build token has its own bucket; carol is in an
	// unlimited group; the admin is unlimited.
	if res := rest(t, n, "GET", "/rest/api/1.0/projects", "alice", aliceToken, ""); res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit") != "50" {
		t.Fatalf("exempt token: %d %v", res.StatusCode, res.Header)
	}
	for range 10 {
		for _, who := range [][2]string{{"carol", "carol-password"}, {"admin", n.AdminPassword}} {
			if res := rest(t, n, "GET", "/rest/api/1.0/projects", who[0], who[1], ""); res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit") != "" {
				t.Fatalf("unlimited %s: %d %v", who[0], res.StatusCode, res.Header)
			}
		}
	}

	// Git over HTTP: bob's first clone (protocol v2: GET info/refs, then
	// ls-refs and fetch) leaves one request; the next clone's ls-refs is
	// refused inside the 200 response, and git prints it.
	url := n.CloneURL("PRJ", "app", "bob", "bob-password")
	if r := gitRun(t.TempDir(), nil, "-c", "protocol.version=2", "clone", "-q", url, "c"); r.err != nil {
		t.Fatalf("first clone: %v\n%s", r.err, r.stderr)
	}
	r := gitRun(t.TempDir(), nil, "-c", "protocol.version=2", "clone", "-q", url, "c")
	if r.err == nil || !strings.Contains(r.stderr, "rate limit exceeded") {
		t.Fatalf("second clone: %v\n%s", r.err, r.stderr)
	}
	// Now GET info/refs itself: 429 with a text body git prints.
	r = gitRun(t.TempDir(), nil, "clone", "-q", url, "c")
	if r.err == nil || !strings.Contains(r.stderr, "remote: rate limit exceeded") {
		t.Fatalf("third clone: %v\n%s", r.err, r.stderr)
	}
	req, _ := http.NewRequest("GET", n.URL+"/scm/prj/app.git/info/refs?service=git-upload-pack", nil)
	req.SetBasicAuth("bob", "bob-password")
	hres, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hres.Body.Close()
	if hres.StatusCode != http.StatusTooManyRequests || hres.Header.Get("Retry-After") == "" ||
		hres.Header.Get("X-RateLimit-Limit") != "4" || hres.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("info/refs over the limit: %d %v", hres.StatusCode, hres.Header)
	}

	// Git over SSH is limited too: dave's key, five ls-remotes.
	env := sshEnv(t, n, dave.ID)
	var last gitResult
	for range 5 {
		if last = gitRun(t.TempDir(), env, "ls-remote", n.SSHURL("PRJ", "app")); last.err != nil {
			break
		}
	}
	if last.err == nil || !strings.Contains(last.stderr, "rate limit exceeded") {
		t.Fatalf("ssh over the limit: %v\n%s", last.err, last.stderr)
	}

	if got := counter(t, n, "sluice_throttle_rate_limited_total", "class", "user"); got < 4 {
		t.Fatalf("user rate-limited count %v", got)
	}
	st := adminState(t, n)
	if !st.RateLimit.Enabled || !st.RateLimit.Stored || st.RateLimit.Exemptions != 3 || st.RateLimit.Buckets == 0 {
		t.Fatalf("admin state %+v", st.RateLimit)
	}
}

func itoa(i int64) string { b, _ := json.Marshal(i); return string(b) }

func rest(t *testing.T, n *testbed.Node, method, path, user, pass, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, n.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	return res
}

func decode(t *testing.T, res *http.Response, v any) {
	t.Helper()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("decode %d response: %v", res.StatusCode, err)
	}
}

func adminState(t *testing.T, n *testbed.Node) throttle.State {
	t.Helper()
	res := rest(t, n, "GET", "/rest/sluice/1.0/admin/throttle", "admin", n.AdminPassword, "")
	if res.StatusCode != 200 {
		t.Fatalf("admin state: %d", res.StatusCode)
	}
	var st throttle.State
	decode(t, res, &st)
	return st
}

func metricFamily(t *testing.T, n *testbed.Node, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := n.App.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func histogram(t *testing.T, n *testbed.Node, name string) *dto.Histogram {
	return metricFamily(t, n, name).GetMetric()[0].GetHistogram()
}

func counter(t *testing.T, n *testbed.Node, name, label, value string) float64 {
	for _, m := range metricFamily(t, n, name).GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// sshEnv registers a new key for the user and returns the environment
// that makes git use it through OpenSSH.
func sshEnv(t *testing.T, n *testbed.Node, userID int64) []string {
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
	sk := &store.SSHKey{UserID: userID, Label: "throttle-test",
		PublicKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))),
		Fingerprint: ssh.FingerprintSHA256(signer.PublicKey())}
	if err := n.Store().AddSSHKey(context.Background(), sk); err != nil {
		t.Fatal(err)
	}
	return []string{"GIT_SSH_COMMAND=ssh -F /dev/null -i " + keyFile + " -o IdentitiesOnly=yes -o UserKnownHostsFile=" +
		filepath.Join(dir, "known_hosts") + " -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR"}
}

func TestE2EAdaptiveControllerRuns(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{Configure: func(c *config.Config) {
		c.Throttle.Cores = 2 // the process tree against two cores
	}})
	// The first interval primes the CPU reading, the second samples it.
	var st throttle.State
	wait.For(t, "a controller sample", 20*time.Second, func() bool {
		st = n.App.Throttle.State()
		return st.Controller != nil && st.Controller.Reason != "" && st.Controller.Reason != "starting"
	})
	st = adminState(t, n)
	c := st.Controller
	if st.Strategy != "adaptive" || c.CPUSource != "process-tree" || c.Cores != 2 || st.Min != 2 || st.Max != 24 ||
		st.Limit < st.Min || st.Limit > st.Max || c.Error != "" {
		t.Fatalf("adaptive state %+v, controller %+v", st, c)
	}
}
