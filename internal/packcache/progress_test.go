package packcache_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/testbed"
	"github.com/sluice-scm/sluice/internal/throttle"
)

// ticketWorld is a world with one hosting ticket.
func ticketWorld(t *testing.T, queueWait time.Duration) *world {
	t.Helper()
	return newWorld(t, 6, func(c *config.Config) {
		c.Throttle.Strategy, c.Throttle.Fixed = "fixed", 1
		c.Throttle.QueueWait = config.Duration{Duration: queueWait}
		c.Throttle.RateLimit = false
	})
}

// holdTicket takes the node's only ticket, as a long clone would, until
// the returned release is called.
func (w *world) holdTicket() func() {
	w.t.Helper()
	release, err := w.n.App.Throttle.Admit(context.Background(), throttle.Ticket{
		Principal: &auth.Principal{UserID: 1 << 40, Name: "holder"}, Command: "upload-pack", Transport: "test"}, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(release)
	return release
}

// gitClone runs git clone over HTTP with protocol v2 in the background.
func (w *world) gitClone(dir string, args ...string) <-chan string {
	done := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "git", append(append([]string{"-c", "protocol.version=2", "clone"}, args...), w.url, dir)...)
		cmd.Env = testbed.GitEnv(filepath.Dir(dir))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			done <- "FAILED: " + err.Error() + "\n" + stderr.String()
			return
		}
		done <- stderr.String()
	}()
	return done
}

func (w *world) waitQueued(n int) {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for w.n.App.Throttle.State().Queued < n {
		if time.Now().After(deadline) {
			w.t.Fatalf("no request queued: %+v", w.n.App.Throttle.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHTTPv2QueueProgress: a protocol v2 clone over HTTP whose pack is a
// cache miss while every ticket is taken is told it waits, on the
// side-band, then completes; the cache keeps git's own response.
func TestHTTPv2QueueProgress(t *testing.T) {
	w := ticketWorld(t, 30*time.Second)
	// A first clone caches the capabilities and ls-refs a clone asks for;
	// the partial clones below ask for another pack.
	if out := <-w.gitClone(filepath.Join(t.TempDir(), "warm"), "-q"); strings.HasPrefix(out, "FAILED") {
		t.Fatal(out)
	}

	release := w.holdTicket()
	dir := filepath.Join(t.TempDir(), "waits")
	done := w.gitClone(dir, "--progress", "--filter=blob:none")
	w.waitQueued(1)
	time.Sleep(100 * time.Millisecond)
	release()
	stderr := <-done
	if strings.HasPrefix(stderr, "FAILED") {
		t.Fatal(stderr)
	}
	if !strings.Contains(stderr, "remote: sluice: waiting for capacity, 0 ahead of you") {
		t.Fatalf("no progress message; git printed:\n%s", stderr)
	}
	if got := strings.TrimSpace(testbed.Git(t, dir, "rev-parse", "HEAD")); got != w.rev("main") {
		t.Fatalf("clone at %s", got)
	}

	// The entry the waiting clone produced is git's response: the same
	// clone is now a hit that git accepts, and no ticket is needed.
	release = w.holdTicket()
	defer release()
	before := w.started()
	dir2 := filepath.Join(t.TempDir(), "hit")
	if stderr := <-w.gitClone(dir2, "--progress", "--filter=blob:none"); strings.HasPrefix(stderr, "FAILED") || strings.Contains(stderr, "waiting for capacity") {
		t.Fatalf("cached clone:\n%s", stderr)
	}
	if w.started() != before {
		t.Fatalf("a cached clone started %v git processes", w.started()-before)
	}
	testbed.Git(t, dir2, "fsck", "--no-progress")
}

// TestHTTPv2QueueTimeoutInBand: when the wait that was announced on the
// side-band runs out, the client prints why (band 3, which git shows as
// "remote: …" before it gives up).
func TestHTTPv2QueueTimeoutInBand(t *testing.T) {
	w := ticketWorld(t, time.Second)
	if out := <-w.gitClone(filepath.Join(t.TempDir(), "warm"), "-q"); strings.HasPrefix(out, "FAILED") {
		t.Fatal(out)
	}
	w.holdTicket()
	stderr := <-w.gitClone(filepath.Join(t.TempDir(), "gives-up"), "--progress", "--filter=blob:none")
	if !strings.HasPrefix(stderr, "FAILED") {
		t.Fatalf("clone succeeded without a ticket:\n%s", stderr)
	}
	for _, want := range []string{"sluice: waiting for capacity", "remote: waited 1s for capacity; try again later"} {
		if !strings.Contains(stderr, want) {
			t.Fatalf("git did not print %q:\n%s", want, stderr)
		}
	}
}

// TestHTTPv2QueueProgressCoalesced: a clone identical to one already
// waiting for a ticket joins it instead of queueing, and is told that it
// waits too.
func TestHTTPv2QueueProgressCoalesced(t *testing.T) {
	w := ticketWorld(t, 30*time.Second)
	if out := <-w.gitClone(filepath.Join(t.TempDir(), "warm"), "-q"); strings.HasPrefix(out, "FAILED") {
		t.Fatal(out)
	}
	release := w.holdTicket()
	first := w.gitClone(filepath.Join(t.TempDir(), "first"), "--progress", "--filter=blob:none")
	w.waitQueued(1)
	second := w.gitClone(filepath.Join(t.TempDir(), "second"), "--progress", "--filter=blob:none")
	// The second clone follows the first's entry rather than queueing.
	deadline := time.Now().Add(20 * time.Second)
	for w.n.App.Cache.Stats().Coalesced < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the second clone did not join the first: %+v", w.n.App.Throttle.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if q := w.n.App.Throttle.State().Queued; q != 1 {
		t.Fatalf("%d requests queued, want only the first", q)
	}
	time.Sleep(100 * time.Millisecond)
	release()
	for name, done := range map[string]<-chan string{"first": first, "second": second} {
		stderr := <-done
		if strings.HasPrefix(stderr, "FAILED") {
			t.Fatalf("%s clone: %s", name, stderr)
		}
		if !strings.Contains(stderr, "remote: sluice: waiting for capacity") {
			t.Errorf("%s clone was not told it waits; git printed:\n%s", name, stderr)
		}
	}
}
