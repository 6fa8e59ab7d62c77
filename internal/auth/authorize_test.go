package auth

import (
	"context"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

type matrixCase struct {
	who  string
	res  string // repo slug, "project:KEY" or "global"
	a    Action
	want string // "ok" or a problem kind
	msg  string // expected message, when it matters
}

var permissionMatrix = []matrixCase{
	// Anonymous: public things are readable, nothing else; a refusal asks
	// for credentials rather than hiding the resource.
	{"anonymous", "priv", Read, "unauthenticated", "authentication required"},
	{"anonymous", "priv", Write, "unauthenticated", ""},
	{"anonymous", "open", Read, "ok", ""},
	{"anonymous", "open", Write, "unauthenticated", "authentication required"},
	{"anonymous", "open", Admin, "unauthenticated", ""},
	{"anonymous", "inpub", Read, "ok", ""},
	{"anonymous", "inpub", Write, "unauthenticated", ""},
	{"anonymous", "project:PUB", Read, "ok", ""},
	{"anonymous", "project:PRV", Read, "unauthenticated", ""},
	{"anonymous", "global", Read, "unauthenticated", ""},
	{"anonymous", "global", Write, "unauthenticated", ""},

	// A user without grants: private things do not exist for them.
	{"alice", "priv", Read, "not_found", "repository not found"},
	{"alice", "priv", Write, "not_found", "repository not found"},
	{"alice", "open", Read, "ok", ""},
	{"alice", "open", Write, "forbidden", "you do not have write permission on this repository"},
	{"alice", "inpub", Read, "ok", ""},
	{"alice", "inpub", Write, "forbidden", ""},
	{"alice", "project:PRV", Read, "not_found", "project not found"},
	{"alice", "project:PUB", Read, "ok", ""},
	{"alice", "project:PUB", Write, "forbidden", "you do not have write permission on this project"},
	{"alice", "global", Read, "ok", ""},
	{"alice", "global", Write, "forbidden", "you do not have permission to create projects"},
	{"alice", "global", Admin, "forbidden", "you do not have admin permission"},

	// Repository grants.
	{"rita", "priv", Read, "ok", ""},
	{"rita", "priv", Write, "forbidden", "you do not have write permission on this repository"},
	{"rita", "other", Read, "not_found", ""},
	{"rita", "project:PRV", Read, "not_found", ""},
	{"grace", "priv", Read, "ok", ""}, // through the group
	{"grace", "priv", Write, "ok", ""},
	{"grace", "priv", Admin, "forbidden", "you do not have admin permission on this repository"},
	{"grace", "other", Read, "not_found", ""},
	{"rex", "priv", Admin, "ok", ""},
	{"rex", "priv", Write, "ok", ""},
	{"rex", "other", Read, "not_found", ""},

	// Project grants reach every repository of the project.
	{"walt", "priv", Write, "ok", ""},
	{"walt", "other", Write, "ok", ""},
	{"walt", "other", Admin, "forbidden", ""},
	{"walt", "project:PRV", Write, "ok", ""},
	{"walt", "project:PRV", Admin, "forbidden", ""},
	{"walt", "inpub", Write, "forbidden", ""},
	{"walt", "global", Write, "forbidden", ""},
	{"pam", "priv", Admin, "ok", ""},
	{"pam", "other", Admin, "ok", ""},
	{"pam", "project:PRV", Admin, "ok", ""},
	{"pam", "inpub", Write, "forbidden", ""},
	{"pam", "global", Admin, "forbidden", ""},

	// Global permissions.
	{"creator", "global", Write, "ok", ""},
	{"creator", "global", Admin, "forbidden", ""},
	{"creator", "priv", Read, "not_found", ""},
	{"root", "priv", Admin, "ok", ""},
	{"root", "project:PRV", Admin, "ok", ""},
	{"root", "global", Write, "ok", ""},
	{"root", "global", Admin, "ok", ""},
	{"sys", "other", Admin, "ok", ""},
	{"sys", "global", Admin, "ok", ""},

	// A disabled or deleted user is anonymous, grants or not.
	{"dis", "priv", Read, "unauthenticated", "authentication required"},
	{"dis", "open", Read, "ok", ""},
	{"dis", "global", Admin, "unauthenticated", ""},
	{"deleted", "priv", Read, "unauthenticated", ""},
	{"deleted", "global", Read, "unauthenticated", ""},

	// Token scopes cap what the user may do.
	{"root-read", "priv", Read, "ok", ""},
	{"root-read", "priv", Write, "forbidden", "this access token only has read scope"},
	{"root-read", "global", Write, "forbidden", "this access token only has read scope"},
	{"root-read", "global", Admin, "forbidden", ""},
	{"root-write", "priv", Write, "ok", ""},
	{"root-write", "priv", Admin, "forbidden", "this access token only has write scope"},
	{"root-write", "global", Write, "ok", ""},
	{"root-write", "global", Admin, "forbidden", ""},
	{"root-admin", "global", Admin, "ok", ""},
	{"root-admin", "priv", Admin, "ok", ""},
	{"grace-read", "priv", Read, "ok", ""},
	{"grace-read", "priv", Write, "forbidden", "this access token only has read scope"},
	{"grace-write", "priv", Write, "ok", ""},
	{"grace-write", "priv", Admin, "forbidden", "you do not have admin permission on this repository"},
	{"grace-write", "other", Read, "not_found", "repository not found"},
	{"alice-admin", "priv", Read, "not_found", ""}, // a big scope grants nothing
	{"alice-admin", "open", Write, "forbidden", "you do not have write permission on this repository"},

	// Access keys reach their one repository within their scope.
	{"key-read", "priv", Read, "ok", ""},
	{"key-read", "priv", Write, "forbidden", "this access key only has read scope"},
	{"key-read", "other", Read, "not_found", "repository not found"},
	{"key-read", "open", Read, "not_found", ""},
	{"key-read", "project:PRV", Read, "not_found", ""},
	{"key-read", "global", Read, "forbidden", ""},
	{"key-write", "priv", Write, "ok", ""},
	{"key-write", "priv", Admin, "forbidden", "this access key only has write scope"},
	{"key-write", "other", Write, "not_found", ""},
}

func (w *world) resource(t *testing.T, name string) Resource {
	t.Helper()
	switch name {
	case "global":
		return Resource{}
	case "project:PUB":
		return Resource{Project: w.pub}
	case "project:PRV":
		return Resource{Project: w.prv}
	case "priv":
		return Resource{Repo: w.priv}
	case "open":
		return Resource{Repo: w.open}
	case "other":
		return Resource{Repo: w.other}
	case "inpub":
		// Without the project, so Authorize must look up whether the
		// project is public.
		return Resource{Repo: w.inpub}
	}
	t.Fatalf("no resource %q", name)
	return Resource{}
}

func runMatrix(t *testing.T, w *world) {
	ctx := context.Background()
	principals := map[string]*Principal{}
	for _, tc := range permissionMatrix {
		p, ok := principals[tc.who]
		if !ok {
			p = w.principal(t, tc.who)
			principals[tc.who] = p
		}
		err := w.svc.Authorize(ctx, p, w.resource(t, tc.res), tc.a)
		if got := kindName(err); got != tc.want {
			t.Errorf("%s %s %s: got %s (%v), want %s", tc.who, tc.a, tc.res, got, err, tc.want)
			continue
		}
		if tc.msg != "" && problem.Message(err) != tc.msg {
			t.Errorf("%s %s %s: message %q, want %q", tc.who, tc.a, tc.res, problem.Message(err), tc.msg)
		}
	}
}

func TestAuthorizeMatrix(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) { runMatrix(t, newWorld(t, st)) })
}

// TestAuthorizeReadsStoreEachTime proves there is no permission cache:
// grants changed by someone else (the CLI) count on the next call.
func TestAuthorizeReadsStoreEachTime(t *testing.T) {
	eachStore(t, testAuthorizeReadsStoreEachTime)
}

func testAuthorizeReadsStoreEachTime(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)
	grace := w.principal(t, "grace")
	res := Resource{Repo: w.priv}
	if err := w.svc.Authorize(ctx, grace, res, Write); err != nil {
		t.Fatalf("before removal: %v", err)
	}
	must(t, st.RemoveGroupMember(ctx, w.group.ID, w.users["grace"].ID))
	if err := w.svc.Authorize(ctx, grace, res, Read); !problem.Is(err, problem.NotFound) {
		t.Fatalf("after removal from the group: %v, want not found", err)
	}

	rita := w.principal(t, "rita")
	must(t, st.SetRepoPermission(ctx, w.priv.ID, store.Grant{UserID: w.users["rita"].ID, Permission: store.PermRepoWrite}))
	if err := w.svc.Authorize(ctx, rita, res, Write); err != nil {
		t.Fatalf("after upgrade: %v", err)
	}
	must(t, st.RevokeRepoPermission(ctx, w.priv.ID, w.users["rita"].ID, 0))
	if err := w.svc.Authorize(ctx, rita, res, Read); !problem.Is(err, problem.NotFound) {
		t.Fatalf("after revoke: %v, want not found", err)
	}

	// Disabling a user takes effect on principals already handed out.
	root := w.principal(t, "root")
	u := *w.users["root"]
	u.Active = false
	must(t, st.UpdateUser(ctx, &u))
	if err := w.svc.Authorize(ctx, root, res, Read); !problem.Is(err, problem.Unauthenticated) {
		t.Fatalf("disabled admin: %v, want unauthenticated", err)
	}
}

// TestAuthorizePublicReadSkipsStore: reading a public repository needs no
// grants, so listings of public repositories cost no queries.
func TestAuthorizePublicReadSkipsStore(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	w := newWorld(t, st)
	before := st.count("EffectiveGrants") + st.count("UserByID") + st.count("ProjectByID")
	for _, who := range []string{"anonymous", "alice"} {
		if !w.svc.Visible(ctx, w.principal(t, who), w.open) {
			t.Errorf("%s cannot see a public repository", who)
		}
		if err := w.svc.Authorize(ctx, w.principal(t, who), Resource{Repo: w.inpub, Project: w.pub}, Read); err != nil {
			t.Errorf("%s cannot read a repository of a public project: %v", who, err)
		}
	}
	if after := st.count("EffectiveGrants") + st.count("UserByID") + st.count("ProjectByID"); after != before {
		t.Errorf("public reads made %d store calls", after-before)
	}
}

func TestAuthorizeHelpers(t *testing.T) {
	eachStore(t, testAuthorizeHelpers)
}

func testAuthorizeHelpers(t *testing.T, st store.Store) {
	ctx := context.Background()
	w := newWorld(t, st)
	for _, tc := range []struct {
		who                    string
		admin, create, visible bool
	}{
		{"anonymous", false, false, false},
		{"alice", false, false, false},
		{"rita", false, false, true},
		{"creator", false, true, false},
		{"root", true, true, true},
		{"sys", true, true, true},
		{"dis", false, false, false},
		{"root-read", false, false, true},
		{"root-write", false, true, true},
		{"root-admin", true, true, true},
		{"key-read", false, false, true},
	} {
		p := w.principal(t, tc.who)
		if got := w.svc.IsAdmin(ctx, p); got != tc.admin {
			t.Errorf("IsAdmin(%s) = %v", tc.who, got)
		}
		if got := w.svc.CanCreateProject(ctx, p); got != tc.create {
			t.Errorf("CanCreateProject(%s) = %v", tc.who, got)
		}
		if got := w.svc.Visible(ctx, p, w.priv); got != tc.visible {
			t.Errorf("Visible(%s, priv) = %v", tc.who, got)
		}
	}
}

func TestAuthorizeRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, newFakeStore())
	root := w.principal(t, "root")
	if err := w.svc.Authorize(ctx, root, Resource{Repo: w.priv}, Action(0)); err == nil || problem.KindOf(err) != problem.Internal {
		t.Errorf("unknown action: %v", err)
	}
	if err := w.svc.Authorize(ctx, root, Resource{Repo: &store.Repository{}}, Read); err == nil || problem.KindOf(err) != problem.Internal {
		t.Errorf("repository without id: %v", err)
	}
	// A nil principal is anonymous, not a crash.
	if err := w.svc.Authorize(ctx, nil, Resource{Repo: w.priv}, Read); !problem.Is(err, problem.Unauthenticated) {
		t.Errorf("nil principal: %v", err)
	}
	// A principal that names a repository for an access key is held to the
	// access key rules even if it also names a user, and without a scope
	// it reads only.
	half := &Principal{UserID: w.users["root"].ID, Name: "root", AccessKeyRepoID: w.priv.ID}
	for _, tc := range []struct {
		res  Resource
		a    Action
		want string
	}{
		{Resource{Repo: w.priv}, Read, "ok"},
		{Resource{Repo: w.priv}, Write, "forbidden"},
		{Resource{Repo: w.other}, Read, "not_found"},
		{Resource{}, Admin, "forbidden"},
	} {
		if got := kindName(w.svc.Authorize(ctx, half, tc.res, tc.a)); got != tc.want {
			t.Errorf("half-filled access key %s: %s, want %s", tc.a, got, tc.want)
		}
	}
	// A project passed with the wrong repository is not trusted for
	// "public": priv's own project is private.
	if err := w.svc.Authorize(ctx, nil, Resource{Repo: w.priv, Project: w.pub}, Read); !problem.Is(err, problem.Unauthenticated) {
		t.Errorf("mismatched project: %v", err)
	}
}

func TestPrincipalString(t *testing.T) {
	for _, tc := range []struct {
		p    *Principal
		want string
	}{
		{nil, "anonymous"},
		{&Principal{Anonymous: true}, "anonymous"},
		{&Principal{UserID: 3, Name: "alice"}, "alice"},
		{&Principal{UserID: 3, Name: "alice", TokenID: 9, Scope: store.ScopeRead}, "alice (token:9)"},
		{&Principal{AccessKeyID: 4, AccessKeyRepoID: 2, Scope: store.ScopeRead}, "accesskey:4"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
