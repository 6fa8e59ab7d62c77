package githttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/packcache"
)

// brokenCache answers with the start of a response, then fails, as a pack
// cache producer that dies mid-pack does.
type brokenCache struct{}

func (brokenCache) Serve(_ context.Context, _ *packcache.Request, w io.Writer, _ func(string), _ packcache.Generate) (bool, error) {
	io.WriteString(w, "0008NAK\n0031\x01PACK partial")
	return true, errors.New("producer failed")
}

// TestFailureAfterStartAborts: once a 200 has gone out, a failure must cut
// the connection rather than end the response cleanly, so a client never
// takes a truncated answer for a complete one.
func TestFailureAfterStartAborts(t *testing.T) {
	f := newFixture(t, serverOptions{cache: brokenCache{}})
	f.seed(1)
	req, err := http.NewRequest(http.MethodPost, f.base+"/scm/PROJ/app.git/git-upload-pack",
		strings.NewReader("0032want 0000000000000000000000000000000000000000\n00000009done\n"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", basic("alice", f.aliceTok))
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "PACK partial") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if err == nil {
		t.Fatal("the truncated response ended cleanly; want a transport error")
	}
}
