package api_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func pubKeyLine(t *testing.T, comment string) (string, ssh.PublicKey) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " " + comment, k
}

type sshKeyDoc struct {
	ID          int64  `json:"id"`
	Text        string `json:"text"`
	Label       string `json:"label"`
	Fingerprint string `json:"fingerprint"`
}

func TestUserSSHKeys(t *testing.T) {
	e := newEnv(t)
	alicePW, bobPW := basic("alice", testPassword), basic("bob", testPassword)
	line, pub := pubKeyLine(t, "alice@laptop")

	// Adding needs a password session: a token, even an admin-scope one,
	// must not mint a full-power credential.
	e.must(403, "POST", "/rest/ssh/1.0/keys", e.alice, map[string]any{"text": line})
	var k sshKeyDoc
	e.must(201, "POST", "/rest/ssh/1.0/keys", alicePW, map[string]any{"text": line}).json(t, &k)
	if k.Label != "alice@laptop" || k.Fingerprint != ssh.FingerprintSHA256(pub) || k.ID == 0 {
		t.Errorf("added key %+v", k)
	}
	// The key now authenticates alice.
	p, err := e.auth.PublicKey(context.Background(), pub)
	if err != nil || p.Name != "alice" {
		t.Fatalf("PublicKey = %v, %v", p, err)
	}
	// One key, one principal: bob cannot register it again.
	e.must(409, "POST", "/rest/ssh/1.0/keys", bobPW, map[string]any{"text": line})

	for _, bad := range []string{"", "not a key", "ssh-dss AAAAB3NzaC1kc3MAAACBAP", `command="id" ` + line, line + "\n" + line} {
		e.must(400, "POST", "/rest/ssh/1.0/keys", alicePW, map[string]any{"text": bad})
	}

	var page struct {
		Values []sshKeyDoc `json:"values"`
	}
	e.must(200, "GET", "/rest/ssh/1.0/keys", e.alice, nil).json(t, &page)
	if len(page.Values) != 1 || page.Values[0].ID != k.ID {
		t.Errorf("alice's keys %+v", page.Values)
	}
	e.must(200, "GET", "/rest/ssh/1.0/keys", e.bob, nil).json(t, &page)
	if len(page.Values) != 0 {
		t.Errorf("bob sees %+v", page.Values)
	}
	// Only administrators reach another user's keys.
	e.must(403, "GET", "/rest/ssh/1.0/keys?user=alice", e.bob, nil)
	e.must(403, "GET", "/rest/ssh/1.0/keys?user=nobody", e.bob, nil)
	e.must(200, "GET", "/rest/ssh/1.0/keys?user=alice", e.admin, nil).json(t, &page)
	if len(page.Values) != 1 {
		t.Errorf("admin sees %+v", page.Values)
	}
	e.must(404, "GET", "/rest/ssh/1.0/keys?user=nobody", e.admin, nil)

	// Bob cannot delete alice's key, and learns nothing from trying.
	e.must(404, "DELETE", fmt.Sprintf("/rest/ssh/1.0/keys/%d", k.ID), bobPW, nil)
	e.must(404, "DELETE", "/rest/ssh/1.0/keys/x", alicePW, nil)
	e.must(204, "DELETE", fmt.Sprintf("/rest/ssh/1.0/keys/%d", k.ID), alicePW, nil)
	if _, err := e.auth.PublicKey(context.Background(), pub); err == nil {
		t.Error("a deleted key still authenticates")
	}

	// An administrator adds a key for another user.
	line2, pub2 := pubKeyLine(t, "ci")
	e.must(201, "POST", "/rest/ssh/1.0/keys?user=bob", basic("admin", testPassword), map[string]any{"text": line2, "label": "bob's ci"}).json(t, &k)
	if p, err := e.auth.PublicKey(context.Background(), pub2); err != nil || p.Name != "bob" || k.Label != "bob's ci" {
		t.Errorf("admin-added key: %v, %v, %+v", p, err, k)
	}
	e.must(401, "GET", "/rest/ssh/1.0/keys", "", nil)
}

func TestAccessKeysREST(t *testing.T) {
	e := newEnv(t)
	e.project("PRJ", false)
	e.repo("PRJ", "app")
	e.grant("PRJ", "app", "alice", "REPO_ADMIN")
	e.grant("PRJ", "app", "bob", "REPO_WRITE")
	base := "/rest/keys/1.0/projects/PRJ/repos/app/ssh"
	line, pub := pubKeyLine(t, "deploy")

	body := map[string]any{"key": map[string]any{"text": line}, "permission": "REPO_READ"}
	e.must(403, "POST", base, e.bob, body)
	e.must(404, "POST", "/rest/keys/1.0/projects/PRJ/repos/nope/ssh", e.alice, body)
	e.must(400, "POST", base, e.alice, map[string]any{"key": map[string]any{"text": line}, "permission": "REPO_ADMIN"})
	var ak struct {
		Key        sshKeyDoc `json:"key"`
		Permission string    `json:"permission"`
		Repository struct {
			Slug string `json:"slug"`
		} `json:"repository"`
	}
	e.must(201, "POST", base, e.alice, body).json(t, &ak)
	if ak.Permission != "REPO_READ" || ak.Repository.Slug != "app" || ak.Key.Label != "deploy" {
		t.Errorf("access key %+v", ak)
	}
	p, err := e.auth.PublicKey(context.Background(), pub)
	if err != nil || p.AccessKeyRepoID == 0 || p.Scope != "read" {
		t.Fatalf("access key principal %+v, %v", p, err)
	}

	var page struct {
		Values []struct {
			Key        sshKeyDoc `json:"key"`
			Permission string    `json:"permission"`
		} `json:"values"`
	}
	e.must(200, "GET", base, e.alice, nil).json(t, &page)
	if len(page.Values) != 1 || page.Values[0].Key.ID != ak.Key.ID {
		t.Errorf("listing %+v", page.Values)
	}
	e.must(403, "GET", base, e.bob, nil)
	e.must(404, "GET", base, e.reader, nil)

	e.must(404, "DELETE", fmt.Sprintf("%s/%d", base, ak.Key.ID+1000), e.alice, nil)
	e.must(403, "DELETE", fmt.Sprintf("%s/%d", base, ak.Key.ID), e.bob, nil)
	e.must(204, "DELETE", fmt.Sprintf("%s/%d", base, ak.Key.ID), e.alice, nil)
	if _, err := e.auth.PublicKey(context.Background(), pub); err == nil {
		t.Error("a deleted access key still authenticates")
	}
}
