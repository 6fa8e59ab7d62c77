package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClone(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 40)
	want := s.countObjects(dir)
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	for _, proto := range []Protocol{V0, V2} {
		t.Run(proto.String(), func(t *testing.T) {
			res, err := c.Clone(testContext(t), s.url("r.git"), CloneOptions{Protocol: proto})
			if err != nil {
				t.Fatal(err)
			}
			if int(res.Objects) != want {
				t.Errorf("objects = %d, want %d", res.Objects, want)
			}
			// main, side and the v1 tag object; light is main's tip.
			if res.Wants != 3 {
				t.Errorf("wants = %d, want 3", res.Wants)
			}
			if res.PackBytes < 32 || res.Bytes <= res.PackBytes {
				t.Errorf("pack bytes %d, response bytes %d", res.PackBytes, res.Bytes)
			}
			if res.TTFB <= 0 || res.TTFB > res.Total {
				t.Errorf("ttfb %s, total %s", res.TTFB, res.Total)
			}
		})
	}
}

func TestCloneEmptyRepository(t *testing.T) {
	s := newGitServer(t)
	s.git(s.root, "init", "--bare", "-q", s.path("empty.git"))
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	for _, proto := range []Protocol{V0, V2} {
		res, err := c.Clone(testContext(t), s.url("empty.git"), CloneOptions{Protocol: proto})
		if err != nil {
			t.Fatalf("%v: %v", proto, err)
		}
		if res.Refs != 0 || res.Objects != 0 {
			t.Errorf("%v: refs %d objects %d, want none", proto, res.Refs, res.Objects)
		}
	}
}

func TestCloneDetectsCorruption(t *testing.T) {
	s := newGitServer(t)
	s.repo("r.git", 30)
	c := NewClient(Options{Transport: corruptingTransport{base: http.DefaultTransport}})
	defer c.CloseIdleConnections()
	for _, proto := range []Protocol{V0, V2} {
		_, err := c.Clone(testContext(t), s.url("r.git"), CloneOptions{Protocol: proto})
		if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Errorf("%v: err = %v, want a checksum mismatch", proto, err)
		}
	}
}

func TestCredentials(t *testing.T) {
	s := newGitServer(t)
	s.repo("r.git", 3)
	s.auth = "alice:s3cret"
	withUser := strings.Replace(s.url("r.git"), "http://", "http://alice:s3cret@", 1)
	tests := []struct {
		name    string
		opts    Options
		url     string
		wantErr bool
	}{
		{"none", Options{}, s.url("r.git"), true},
		{"url userinfo", Options{}, withUser, false},
		{"options", Options{Username: "alice", Password: "s3cret"}, s.url("r.git"), false},
		{"wrong password", Options{Username: "alice", Password: "nope"}, s.url("r.git"), true},
		{"userinfo overrides options", Options{Username: "alice", Password: "nope"}, withUser, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewClient(tt.opts)
			defer c.CloseIdleConnections()
			_, err := c.LsRemote(testContext(t), tt.url, V2)
			var he *HTTPError
			if tt.wantErr && (!errors.As(err, &he) || he.Status != http.StatusUnauthorized) {
				t.Errorf("err = %v, want http 401", err)
			}
			if !tt.wantErr && err != nil {
				t.Errorf("err = %v", err)
			}
		})
	}
}

func TestLsRemote(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 5)
	want := strings.Split(s.git(dir, "ls-remote", dir), "\n")
	slices.Sort(want)
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	for _, proto := range []Protocol{V0, V2} {
		refs, err := c.LsRemote(testContext(t), s.url("r.git"), proto)
		if err != nil {
			t.Fatalf("%v: %v", proto, err)
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.OID+"\t"+r.Name)
			if r.Peeled != "" {
				got = append(got, r.Peeled+"\t"+r.Name+"^{}")
			}
			if r.Name == "HEAD" && r.Target != "refs/heads/main" {
				t.Errorf("%v: HEAD target %q", proto, r.Target)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%v: refs\n%s\nwant\n%s", proto, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestFetchWithHaves(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 40)
	main := s.git(dir, "rev-parse", "main")
	have := s.git(dir, "rev-parse", "main~10")
	// What git itself would send for main given main~10.
	wantObjects := len(strings.Split(s.git(dir, "rev-list", "--objects", "main", "^"+have), "\n"))
	tests := []struct {
		name  string
		proto Protocol
		wants []string
		// posts is the number of POSTs; 0 means not checked. A v2
		// fetch of main given main~10 needs one round: the server is
		// ready at once.
		posts int
	}{
		{"v0 main", V0, []string{main}, 1},
		{"v2 main", V2, []string{main}, 2},
		{"v0 all refs", V0, nil, 0},
		{"v2 all refs", V2, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			posts := 0
			c := NewClient(Options{Transport: countingTransport{base: http.DefaultTransport, posts: &posts}})
			defer c.CloseIdleConnections()
			clone, err := c.Clone(testContext(t), s.url("r.git"), CloneOptions{Protocol: tt.proto})
			if err != nil {
				t.Fatal(err)
			}
			posts = 0
			res, err := c.Fetch(testContext(t), s.url("r.git"), FetchOptions{Protocol: tt.proto, Wants: tt.wants, Haves: []string{have}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Objects == 0 || res.Objects >= clone.Objects {
				t.Errorf("fetch objects %d, clone objects %d", res.Objects, clone.Objects)
			}
			if tt.wants != nil && int(res.Objects) != wantObjects {
				t.Errorf("fetch objects %d, want %d", res.Objects, wantObjects)
			}
			if res.Common != 1 {
				t.Errorf("common = %d, want 1", res.Common)
			}
			if tt.posts != 0 && posts != tt.posts {
				t.Errorf("posts = %d, want %d", posts, tt.posts)
			}
		})
	}
}

func TestFetchUnknownHave(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 10)
	all := s.countObjects(dir)
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	for _, proto := range []Protocol{V0, V2} {
		// A have the server lacks is NAKed and the whole history comes.
		res, err := c.Fetch(testContext(t), s.url("r.git"), FetchOptions{Protocol: proto, Haves: []string{strings.Repeat("ab", 20)}})
		if err != nil {
			t.Fatalf("%v: %v", proto, err)
		}
		if int(res.Objects) != all || res.Common != 0 {
			t.Errorf("%v: objects %d common %d, want %d and 0", proto, res.Objects, res.Common, all)
		}
	}
}

func TestPush(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 5)
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	tests := []struct {
		branch  string
		newRef  bool
		size    int
		pushes  int
		wantLog int
	}{
		{branch: "main", pushes: 2, wantLog: 7},
		{branch: "feature/new", newRef: true, size: 5000, pushes: 1, wantLog: 1},
	}
	for _, tt := range tests {
		t.Run(tt.branch, func(t *testing.T) {
			for i := range tt.pushes {
				old := zeroOID
				if !tt.newRef || i > 0 {
					old = s.git(dir, "rev-parse", tt.branch)
				}
				res, err := c.Push(testContext(t), s.url("r.git"), tt.branch, PushOptions{FileSize: tt.size})
				if err != nil {
					t.Fatal(err)
				}
				if res.Old != old {
					t.Errorf("old = %s, want %s", res.Old, old)
				}
				if tip := s.git(dir, "rev-parse", tt.branch); tip != res.New {
					t.Errorf("tip = %s, pushed %s", tip, res.New)
				}
				if old != zeroOID {
					if parent := s.git(dir, "rev-parse", tt.branch+"^"); parent != old {
						t.Errorf("parent = %s, want %s", parent, old)
					}
				}
			}
			if n := len(strings.Split(s.git(dir, "log", "--format=%H", tt.branch), "\n")); n != tt.wantLog {
				t.Errorf("log has %d commits, want %d", n, tt.wantLog)
			}
			if tt.size > 0 {
				if got := s.git(dir, "cat-file", "-s", tt.branch+":loadgen.txt"); got != fmt.Sprint(tt.size) {
					t.Errorf("file size %s, want %d", got, tt.size)
				}
			}
		})
	}
	s.git(dir, "fsck", "--strict", "--no-dangling")
}

func TestPushRejected(t *testing.T) {
	s := newGitServer(t)
	dir := s.repo("r.git", 3)
	hook := filepath.Join(dir, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho no pushes today >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := s.git(dir, "rev-parse", "main")
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	_, err := c.Push(testContext(t), s.url("r.git"), "main", PushOptions{})
	var rej *PushRejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Reason, "pre-receive hook declined") {
		t.Fatalf("err = %v, want a rejection by the hook", err)
	}
	if after := s.git(dir, "rev-parse", "main"); after != before {
		t.Errorf("main moved from %s to %s", before, after)
	}
}

func TestNotFound(t *testing.T) {
	s := newGitServer(t)
	c := NewClient(Options{})
	defer c.CloseIdleConnections()
	_, err := c.Clone(testContext(t), s.url("missing.git"), CloneOptions{Protocol: V2})
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Fatalf("err = %v, want http 404", err)
	}
}
