package githttp

import "testing"

// A '~' is a personal project ("~alice") and only that: the first byte of
// the key, followed by a login.
func TestParseRoutePersonalKeys(t *testing.T) {
	rt, ok := parseRoute("/scm/~alice/notes.git/info/refs")
	if !ok || rt.project != "~ALICE" || rt.slug != "notes" || rt.endpoint != endpointInfoRefs {
		t.Fatalf("personal route = %+v, %v", rt, ok)
	}
	if rt, ok := parseRoute("/scm/~alice.smith/notes/git-upload-pack"); !ok || rt.project != "~ALICE.SMITH" {
		t.Fatalf("dotted login = %+v, %v", rt, ok)
	}
	for _, p := range []string{
		"/scm/~/notes.git/info/refs",
		"/scm/a~b/notes.git/info/refs",
		"/scm/~~a/notes.git/info/refs",
		"/scm/~a/~notes.git/info/refs",
		"/scm/%7Ealice/notes.git/info/refs",
		"/scm/~a@b/notes.git/info/refs",
		"/scm/~../notes.git/info/refs",
		"/scm/~-a/notes.git/info/refs",
	} {
		if rt, ok := parseRoute(p); ok {
			t.Errorf("parseRoute(%q) = %+v, want refused", p, rt)
		}
	}
}
