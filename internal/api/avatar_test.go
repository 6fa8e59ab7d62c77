package api_test

import (
	"bytes"
	"image/png"
	"io"
	"net/http"
	"testing"
)

func TestAvatars(t *testing.T) {
	e := newEnv(t)
	e.project("PRJ", false)
	e.project("PUB", true)
	e.project("OTH", false)

	get := func(path, authz string) ([]byte, string) {
		t.Helper()
		r := e.must(200, "GET", path, authz, nil)
		if ct := r.header.Get("Content-Type"); ct != "image/png" {
			t.Fatalf("%s: content type %q", path, ct)
		}
		img, err := png.Decode(bytes.NewReader(r.body))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", path, err)
		}
		if b := img.Bounds(); b.Dx() != b.Dy() {
			t.Fatalf("%s: %v not square", path, b)
		}
		return r.body, r.header.Get("ETag")
	}

	// Deterministic per key and size, different across keys.
	a1, etag := get("/rest/api/1.0/projects/PRJ/avatar.png", e.admin)
	a2, _ := get("/rest/api/1.0/projects/prj/avatar.png", e.admin)
	b, _ := get("/rest/api/1.0/projects/OTH/avatar.png", e.admin)
	if !bytes.Equal(a1, a2) || bytes.Equal(a1, b) || etag == "" {
		t.Fatal("project avatars are not one picture per key")
	}
	big, _ := get("/rest/api/1.0/projects/PRJ/avatar.png?s=128", e.admin)
	img, _ := png.Decode(bytes.NewReader(big))
	if img.Bounds().Dx() != 128 {
		t.Errorf("size 128 gave %v", img.Bounds())
	}
	huge, _ := get("/rest/api/1.0/projects/PRJ/avatar.png?s=100000", e.admin)
	if img, _ := png.Decode(bytes.NewReader(huge)); img.Bounds().Dx() != 256 {
		t.Errorf("size is not capped: %v", img.Bounds())
	}
	e.must(400, "GET", "/rest/api/1.0/projects/PRJ/avatar.png?s=big", e.admin, nil)

	// Revalidation answers 304 without a body.
	r := e.do("GET", "/rest/api/1.0/projects/PRJ/avatar.png", e.admin, nil)
	if cc := r.header.Get("Cache-Control"); cc != "private, max-age=3600" {
		t.Errorf("Cache-Control %q", cc)
	}
	req, _ := http.NewRequest("GET", e.url+"/rest/api/1.0/projects/PRJ/avatar.png", nil)
	req.Header.Set("Authorization", e.admin)
	req.Header.Set("If-None-Match", etag)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 304 || len(body) != 0 {
		t.Errorf("If-None-Match: %d, %d bytes", res.StatusCode, len(body))
	}

	// Visibility is the project's and the user's.
	e.must(404, "GET", "/rest/api/1.0/projects/PRJ/avatar.png", e.bob, nil)
	e.must(404, "GET", "/rest/api/1.0/projects/NOPE/avatar.png", e.bob, nil)
	e.must(401, "GET", "/rest/api/1.0/projects/PRJ/avatar.png", "", nil)
	get("/rest/api/1.0/projects/PUB/avatar.png", "")
	u1, _ := get("/rest/api/1.0/users/alice/avatar.png", e.bob)
	u2, _ := get("/rest/api/latest/users/ALICE/avatar.png", e.alice)
	u3, _ := get("/rest/api/1.0/users/bob/avatar.png", e.bob)
	if !bytes.Equal(u1, u2) || bytes.Equal(u1, u3) {
		t.Error("user avatars are not one picture per user")
	}
	e.must(401, "GET", "/rest/api/1.0/users/alice/avatar.png", "", nil)
	e.must(404, "GET", "/rest/api/1.0/users/nobody/avatar.png", e.bob, nil)
}
