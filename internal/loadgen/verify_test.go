package loadgen

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// switchTransport corrupts upload-pack responses while corrupt is set.
type switchTransport struct {
	base    http.RoundTripper
	corrupt *atomic.Bool
}

func (s switchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if s.corrupt.Load() {
		return corruptingTransport{base: s.base}.RoundTrip(req)
	}
	return s.base.RoundTrip(req)
}

func TestCloneFingerprint(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 30)
	want := s.countObjects(dir)
	var corrupt atomic.Bool
	c := NewClient(Options{Transport: switchTransport{base: http.DefaultTransport, corrupt: &corrupt}})
	defer c.CloseIdleConnections()
	for _, proto := range []Protocol{V0, V2} {
		opts := CloneOptions{Protocol: proto, Verify: VerifyFingerprint}
		corrupt.Store(false)
		// The first clone of a request is checksummed, later ones are
		// compared with it (git's pack for an unchanged repository is
		// the same every time).
		for i, checksummed := range []bool{true, false, false} {
			res, err := c.Clone(testContext(t), s.url("r.git"), opts)
			if err != nil {
				t.Fatalf("%v clone %d: %v", proto, i, err)
			}
			if res.Checksummed != checksummed || int(res.Objects) != want {
				t.Errorf("%v clone %d: checksummed %v, objects %d (want %v, %d)", proto, i, res.Checksummed, res.Objects, checksummed, want)
			}
		}
		corrupt.Store(true)
		_, err := c.Clone(testContext(t), s.url("r.git"), opts)
		if err == nil || !strings.Contains(err.Error(), "pack differs from the checksummed pack") {
			t.Errorf("%v: corrupted clone after a good one: err = %v", proto, err)
		}
	}

	// A corrupted first clone is caught by the checksum, and no
	// fingerprint is recorded from it.
	fresh := NewClient(Options{Transport: corruptingTransport{base: http.DefaultTransport}})
	defer fresh.CloseIdleConnections()
	for i := range 2 {
		_, err := fresh.Clone(testContext(t), s.url("r.git"), CloneOptions{Protocol: V2, Verify: VerifyFingerprint})
		if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Errorf("corrupted clone %d of a fresh client: err = %v, want a checksum mismatch", i, err)
		}
	}

	// The default still checksums every pack.
	for i := range 2 {
		res, err := c.Clone(testContext(t), s.url("r.git"), CloneOptions{Protocol: V2})
		if corrupt.Load() {
			if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
				t.Errorf("default clone %d: err = %v, want a checksum mismatch", i, err)
			}
			corrupt.Store(false)
			continue
		}
		if err != nil || !res.Checksummed {
			t.Errorf("default clone %d: checksummed %v, err %v", i, res.Checksummed, err)
		}
	}
}

func TestFetchFingerprintPerRequest(t *testing.T) {
	s := newGitServer(t)
	s.repo("r.git", 30)
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	refs, err := c.LsRemote(testContext(t), s.url("r.git"), V2)
	if err != nil {
		t.Fatal(err)
	}
	var main string
	for _, r := range refs {
		if r.Name == "refs/heads/main" {
			main = r.OID
		}
	}
	// A different request is a different pack: it gets its own checksum.
	for _, o := range []FetchOptions{
		{Protocol: V2, Verify: VerifyFingerprint},
		{Protocol: V2, Verify: VerifyFingerprint, Wants: []string{main}},
	} {
		for i, checksummed := range []bool{true, false} {
			res, err := c.Fetch(testContext(t), s.url("r.git"), o)
			if err != nil || res.Checksummed != checksummed {
				t.Errorf("wants %v, fetch %d: checksummed %v, err %v", o.Wants, i, res.Checksummed, err)
			}
		}
	}
}

func TestSSHCloneFingerprint(t *testing.T) {
	s := newSSHGitServer(t)
	dir := s.repo("r.git", 30)
	want := s.countObjects(dir)
	c := s.sshClient(t, s.client)
	for i, checksummed := range []bool{true, false} {
		res, err := c.Clone(testContext(t), "/r.git", CloneOptions{Protocol: V2, Verify: VerifyFingerprint})
		if err != nil || res.Checksummed != checksummed || int(res.Objects) != want {
			t.Errorf("clone %d: checksummed %v objects %d err %v", i, res.Checksummed, res.Objects, err)
		}
	}
}
