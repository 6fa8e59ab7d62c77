package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/hooks"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// world is a service over memStore with one project, a repository, a
// fork of it and three users.
func world(t *testing.T) (*Service, *memStore) {
	t.Helper()
	m := newMemStore()
	m.users[1] = &store.User{ID: 1, Name: "admin", Email: "admin@example.com", DisplayName: "Administrator", Active: true}
	m.users[2] = &store.User{ID: 2, Name: "bob", Active: true}
	m.users[3] = &store.User{ID: 3, Name: "carol", Active: true}
	m.projects[10] = &store.Project{ID: 10, Key: "PRJ", Name: "Project"}
	m.projects[11] = &store.Project{ID: 11, Key: "~BOB", Name: "bob"}
	m.repos[84] = &store.Repository{ID: 84, ProjectID: 10, ProjectKey: "PRJ", Slug: "app", Name: "app", DefaultBranch: "main"}
	m.repos[85] = &store.Repository{ID: 85, ProjectID: 11, ProjectKey: "~BOB", Slug: "app", Name: "app", ForkOf: 84}
	s, err := New(Deps{Store: m, Config: Config{Allow: loopback, Timeout: 5 * time.Second},
		Entities: func() *entity.Renderer { return &entity.Renderer{BaseURL: "https://git.example"} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, m
}

// subscribe adds an active webhook of repository 84 for events.
func subscribe(t *testing.T, s *Service, url string, events ...string) *store.Webhook {
	t.Helper()
	h := &store.Webhook{RepoID: 84, Name: "ci", URL: url, Events: events, Active: true}
	if err := s.Create(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	return h
}

// payload returns the one recorded delivery's body as a generic value,
// with the date checked and removed.
func payload(t *testing.T, m *memStore, event string) map[string]any {
	t.Helper()
	ds := m.recorded()
	if len(ds) != 1 || ds[0].Event != event {
		t.Fatalf("deliveries = %+v, want one %s", ds, event)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(ds[0].Payload), &got); err != nil {
		t.Fatal(err)
	}
	date, _ := got["date"].(string)
	if _, err := time.Parse(dateLayout, date); err != nil || !regexp.MustCompile(`[+-]\d{4}$`).MatchString(date) {
		t.Errorf("date %q is not Bitbucket's yyyy-MM-dd'T'HH:mm:ssZ", date)
	}
	delete(got, "date")
	return got
}

func jsonEqual(t *testing.T, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("got  %s\nwant %s", gb, wb)
	}
}

func TestSubscriptions(t *testing.T) {
	s, _ := world(t)
	ctx := context.Background()
	// Every key Bitbucket DC sends is accepted, so a client registering
	// Bitbucket's whole list (Jenkins does) is not refused.
	h := subscribe(t, s, "https://ci.example/hook", Events...)
	if len(h.Events) != len(Events) {
		t.Fatalf("events = %v", h.Events)
	}
	for _, bad := range []*store.Webhook{
		{RepoID: 84, Name: "x", URL: "https://ci.example", Events: []string{"pr:exploded"}},
		{RepoID: 84, Name: "x", URL: "https://ci.example"},
		{RepoID: 84, Name: "", URL: "https://ci.example", Events: []string{PROpened}},
		{RepoID: 84, Name: "x", URL: "ftp://ci.example", Events: []string{PROpened}},
		{RepoID: 84, Name: "x", URL: "https://user:pw@ci.example", Events: []string{PROpened}},
	} {
		if err := s.Create(ctx, bad); !problem.Is(err, problem.Invalid) {
			t.Errorf("Create(%+v) = %v, want invalid", bad, err)
		}
	}
	// The key Sluice once used for needs-work is read as Bitbucket's.
	old := subscribe(t, s, "https://ci.example/old", "pr:reviewer:needswork", PRReviewerNeedsWork)
	if len(old.Events) != 1 || old.Events[0] != PRReviewerNeedsWork {
		t.Errorf("legacy events = %v", old.Events)
	}
	if !subscribed(&store.Webhook{Events: []string{"pr:reviewer:needswork"}}, PRReviewerNeedsWork) {
		t.Error("a webhook stored with the legacy key no longer hears needs_work")
	}

	name, off, events := "renamed", false, []string{RefsChanged}
	got, err := s.Update(ctx, 84, h.ID, Change{Name: &name, Active: &off, Events: &events})
	if err != nil || got.Name != "renamed" || got.Active || got.URL != "https://ci.example/hook" || len(got.Events) != 1 {
		t.Fatalf("Update = %+v, %v", got, err)
	}
	if _, err := s.Update(ctx, 84, h.ID, Change{URL: new("gopher://x")}); !problem.Is(err, problem.Invalid) {
		t.Errorf("update to a bad URL: %v", err)
	}
	if _, err := s.Get(ctx, 85, h.ID); !problem.Is(err, problem.NotFound) {
		t.Errorf("another repository's webhook: %v", err)
	}
	if _, err := s.Update(ctx, 85, h.ID, Change{Name: &name}); !problem.Is(err, problem.NotFound) {
		t.Errorf("update through another repository: %v", err)
	}
	if err := s.Delete(ctx, 84, h.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, 84, h.ID); !problem.Is(err, problem.NotFound) {
		t.Errorf("deleted webhook: %v", err)
	}
}

// TestRefsChanged checks repo:refs_changed against Bitbucket's documented
// example: the fields Jenkins reads are repository.project.key,
// repository.slug and changes[].ref.displayId and type.
func TestRefsChanged(t *testing.T) {
	s, m := world(t)
	subscribe(t, s, "https://ci.example/hook", RefsChanged)
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	zero := strings.Repeat("0", 40)
	s.OnPushed(hooks.Request{RepoID: 84, Principal: &auth.Principal{UserID: 1, Name: "admin"}}, []hooks.RefUpdate{
		{Ref: "refs/heads/main", Old: a, New: b},
		{Ref: "HEAD", Old: a, New: b}, // git reports the symbolic ref with its branch
		{Ref: "refs/tags/v1", Old: zero, New: a},
		{Ref: "refs/heads/gone", Old: b, New: zero},
		{Ref: "refs/pull-requests/1/from", Old: a, New: b},
	})
	jsonEqual(t, payload(t, m, RefsChanged), `{
		"eventKey": "repo:refs_changed",
		"actor": {"name": "admin", "emailAddress": "admin@example.com", "id": 1, "displayName": "Administrator",
			"active": true, "slug": "admin", "type": "NORMAL", "links": {"self": [{"href": "https://git.example/users/admin"}]}},
		"repository": {"slug": "app", "id": 84, "name": "app", "scmId": "git", "state": "AVAILABLE", "statusMessage": "Available",
			"forkable": true, "public": false, "defaultBranch": "main",
			"project": {"key": "PRJ", "id": 10, "name": "Project", "public": false, "type": "NORMAL",
				"links": {"self": [{"href": "https://git.example/projects/PRJ"}]}},
			"links": {"clone": [{"href": "https://git.example/scm/prj/app.git", "name": "http"}],
				"self": [{"href": "https://git.example/projects/PRJ/repos/app/browse"}]}},
		"changes": [
			{"ref": {"id": "refs/heads/main", "displayId": "main", "type": "BRANCH"}, "refId": "refs/heads/main",
			 "fromHash": "`+a+`", "toHash": "`+b+`", "type": "UPDATE"},
			{"ref": {"id": "refs/tags/v1", "displayId": "v1", "type": "TAG"}, "refId": "refs/tags/v1",
			 "fromHash": "`+zero+`", "toHash": "`+a+`", "type": "ADD"},
			{"ref": {"id": "refs/heads/gone", "displayId": "gone", "type": "BRANCH"}, "refId": "refs/heads/gone",
			 "fromHash": "`+b+`", "toHash": "`+zero+`", "type": "DELETE"}
		]}`)

	// A request that moved only pull request refs announces nothing.
	m.deliveries = nil
	s.OnPushed(hooks.Request{RepoID: 84}, []hooks.RefUpdate{{Ref: "refs/pull-requests/1/merge", Old: a, New: b}})
	if ds := m.recorded(); len(ds) != 0 {
		t.Errorf("pull request ref move announced: %+v", ds)
	}
}

func TestNoSubscriberRendersNothing(t *testing.T) {
	s, m := world(t)
	subscribe(t, s, "https://ci.example/hook", PRMerged)
	h := subscribe(t, s, "https://ci.example/off", PROpened)
	off := false
	if _, err := s.Update(context.Background(), 84, h.ID, Change{Active: &off}); err != nil {
		t.Fatal(err)
	}
	rendered := false
	s.record(context.Background(), 84, PROpened, func(context.Context) (any, error) { rendered = true; return nil, nil })
	if rendered || len(m.recorded()) != 0 {
		t.Error("an event nobody active subscribes to was rendered or recorded")
	}
}

func testPR() *store.PullRequest {
	at := time.UnixMilli(1_700_000_000_000).UTC()
	return &store.PullRequest{ID: 500, Number: 3, RepoID: 84, FromRepoID: 85, FromRef: "refs/heads/fix", FromSHA: strings.Repeat("f", 40),
		ToRef: "refs/heads/main", ToSHA: strings.Repeat("e", 40), Title: "Fix it", State: store.PullOpen, AuthorID: 2, Version: 1,
		CreatedAt: at, UpdatedAt: at}
}

// TestPullRequestEvents checks the pr:* payloads against Bitbucket's
// documented examples: the pull request with both refs' repositories,
// author, reviewers, participants and links, and each event's own fields.
func TestPullRequestEvents(t *testing.T) {
	s, m := world(t)
	subscribe(t, s, "https://ci.example/hook", Events...)
	m.parts[500] = []store.Participant{
		{UserID: 2, Role: store.RoleAuthor, Status: store.StatusUnapproved},
		{UserID: 3, Role: store.RoleReviewer, Status: store.StatusApproved},
		{UserID: 1, Role: store.RoleParticipant, Status: store.StatusUnapproved},
	}
	pr := testPR()
	admin := &auth.Principal{UserID: 1, Name: "admin"}
	ctx := context.Background()

	s.PullRequest(ctx, PullEvent{Key: PROpened, PR: pr, Actor: admin})
	got := payload(t, m, PROpened)
	p := got["pullRequest"].(map[string]any)
	for k, want := range map[string]any{"id": 3.0, "version": 1.0, "title": "Fix it", "state": "OPEN", "open": true, "closed": false,
		"createdDate": 1.7e12, "locked": false} {
		if p[k] != want {
			t.Errorf("pullRequest.%s = %v, want %v", k, p[k], want)
		}
	}
	from := p["fromRef"].(map[string]any)
	jsonEqual(t, []any{from["id"], from["displayId"], from["latestCommit"], from["type"]},
		`["refs/heads/fix", "fix", "`+strings.Repeat("f", 40)+`", "BRANCH"]`)
	fromRepo := from["repository"].(map[string]any)
	if fromRepo["slug"] != "app" || fromRepo["project"].(map[string]any)["key"] != "~BOB" ||
		fromRepo["origin"].(map[string]any)["project"].(map[string]any)["key"] != "PRJ" {
		t.Errorf("fromRef.repository = %v", fromRepo)
	}
	if toRepo := p["toRef"].(map[string]any)["repository"].(map[string]any); toRepo["id"] != 84.0 || toRepo["project"].(map[string]any)["key"] != "PRJ" {
		t.Errorf("toRef.repository = %v", toRepo)
	}
	jsonEqual(t, []any{p["author"].(map[string]any)["user"].(map[string]any)["name"], p["author"].(map[string]any)["role"],
		p["reviewers"].([]any)[0].(map[string]any)["user"].(map[string]any)["name"], p["reviewers"].([]any)[0].(map[string]any)["approved"],
		p["participants"].([]any)[0].(map[string]any)["role"]},
		`["bob", "AUTHOR", "carol", true, "PARTICIPANT"]`)
	if self := p["links"].(map[string]any)["self"].([]any)[0].(map[string]any)["href"]; self != "https://git.example/projects/PRJ/repos/app/pull-requests/3" {
		t.Errorf("links.self = %v", self)
	}
	if got["actor"].(map[string]any)["name"] != "admin" {
		t.Errorf("actor = %v", got["actor"])
	}

	// Each event's own fields, as Bitbucket names them.
	title, desc := "Old title", "old"
	prevTarget := entity.Ref{ID: "refs/heads/dev", DisplayID: "dev", Type: entity.Branch, LatestCommit: "d", LatestChangeset: "d"}
	merge := strings.Repeat("c", 40)
	comment := &store.PullComment{ID: 62, PRID: 500, AuthorID: 3, Text: "new text", Version: 1, ParentID: 43, Severity: "NORMAL", State: "OPEN"}
	previous := "old text"
	for _, tc := range []struct {
		ev   PullEvent
		keys map[string]string // field → its JSON
	}{
		{PullEvent{Key: PRFromRefUpdated, PreviousFromHash: "0a"}, map[string]string{"previousFromHash": `"0a"`}},
		{PullEvent{Key: PRToRefUpdated, PreviousToHash: "0b"}, map[string]string{"previousToHash": `"0b"`}},
		{PullEvent{Key: PRModified, PreviousTitle: &title, PreviousDescription: &desc, PreviousTarget: &prevTarget}, map[string]string{
			"previousTitle": `"Old title"`, "previousDescription": `"old"`,
			"previousTarget": `{"id":"refs/heads/dev","displayId":"dev","type":"BRANCH","latestCommit":"d","latestChangeset":"d","isDefault":false}`}},
		{PullEvent{Key: PRReviewerUpdated, AddedReviewers: []int64{3}}, map[string]string{
			"addedReviewers":   `[{"name":"carol","id":3,"displayName":"carol","active":true,"slug":"carol","type":"NORMAL","links":{"self":[{"href":"https://git.example/users/carol"}]}}]`,
			"removedReviewers": `[]`}},
		{PullEvent{Key: PRReviewerApproved, Participant: &store.Participant{UserID: 3, Role: store.RoleReviewer, Status: store.StatusApproved},
			PreviousStatus: store.StatusUnapproved}, map[string]string{
			"participant":    `{"user":{"name":"carol","id":3,"displayName":"carol","active":true,"slug":"carol","type":"NORMAL","links":{"self":[{"href":"https://git.example/users/carol"}]}},"role":"REVIEWER","approved":true,"status":"APPROVED"}`,
			"previousStatus": `"UNAPPROVED"`}},
		{PullEvent{Key: PRCommentEdited, Comment: comment, PreviousComment: &previous}, map[string]string{
			"comment":         `{"id":62,"version":1,"text":"new text","author":{"name":"carol","id":3,"displayName":"carol","active":true,"slug":"carol","type":"NORMAL","links":{"self":[{"href":"https://git.example/users/carol"}]}},"createdDate":0,"updatedDate":0,"severity":"NORMAL","state":"OPEN","parentId":43,"comments":[]}`,
			"commentParentId": `43`, "previousComment": `"old text"`}},
	} {
		m.deliveries = nil
		tc.ev.PR, tc.ev.Actor = pr, admin
		s.PullRequest(ctx, tc.ev)
		got := payload(t, m, tc.ev.Key)
		for k, want := range tc.keys {
			jsonEqual(t, got[k], want)
		}
		// Nothing of another event leaks in.
		for _, other := range []string{"previousFromHash", "previousToHash", "previousTitle", "participant", "comment", "addedReviewers"} {
			if _, ok := got[other]; ok && tc.keys[other] == "" {
				t.Errorf("%s carries %s", tc.ev.Key, other)
			}
		}
	}

	m.deliveries = nil
	merged := *pr
	merged.State = store.PullMerged
	s.PullRequest(ctx, PullEvent{Key: PRMerged, PR: &merged, Actor: admin, MergeCommit: merge})
	got = payload(t, m, PRMerged)
	jsonEqual(t, got["pullRequest"].(map[string]any)["properties"].(map[string]any)["mergeCommit"],
		`{"id": "`+merge+`", "displayId": "ccccccccccc"}`)

	// A deleted pull request's participant rows are gone; its author is
	// still named.
	m.deliveries = nil
	delete(m.parts, 500)
	s.PullRequest(ctx, PullEvent{Key: PRDeleted, PR: pr, Actor: admin})
	got = payload(t, m, PRDeleted)
	if a := got["pullRequest"].(map[string]any)["author"]; a == nil || a.(map[string]any)["user"].(map[string]any)["name"] != "bob" {
		t.Errorf("pr:deleted author = %v", a)
	}
}

func TestRepositoryEvents(t *testing.T) {
	s, m := world(t)
	subscribe(t, s, "https://ci.example/hook", RepoModified, RepoForked)
	ctx := context.Background()
	old, _ := m.RepoByID(ctx, 84)
	cur := *old
	cur.Name, cur.Slug = "renamed", "renamed"
	s.RepositoryModified(ctx, &auth.Principal{UserID: 1, Name: "admin"}, old, &cur)
	got := payload(t, m, RepoModified)
	if got["old"].(map[string]any)["slug"] != "app" || got["new"].(map[string]any)["slug"] != "renamed" {
		t.Errorf("repo:modified = %v", got)
	}
	m.deliveries = nil
	fork, _ := m.RepoByID(ctx, 85)
	s.RepositoryForked(ctx, &auth.Principal{UserID: 2, Name: "bob"}, fork)
	got = payload(t, m, RepoForked)
	r := got["repository"].(map[string]any)
	if r["project"].(map[string]any)["key"] != "~BOB" || r["origin"].(map[string]any)["slug"] != "app" {
		t.Errorf("repo:forked repository = %v", r)
	}
}

// receiver is a local HTTP server that records what it is sent.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	status atomic.Int32
	got    []*http.Request
	bodies []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.status.Store(200)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req)
		r.bodies = append(r.bodies, string(b))
		r.mu.Unlock()
		w.WriteHeader(int(r.status.Load()))
		io.WriteString(w, "pong")
	}))
	t.Cleanup(r.Close)
	return r
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestDelivery posts to a local receiver: Bitbucket's headers, the
// signature, a UUID request id that a retry repeats, and statistics that
// tell failures from successes.
func TestDelivery(t *testing.T) {
	s, m := world(t)
	rc := newReceiver(t)
	h := subscribe(t, s, rc.URL, RefsChanged)
	h.Secret = "s3cret"
	if err := m.UpdateWebhook(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	s.RefsChanged(context.Background(), 84, nil, []hooks.RefUpdate{{Ref: "refs/heads/main", Old: strings.Repeat("a", 40), New: strings.Repeat("b", 40)}})
	ds := m.recorded()
	if len(ds) != 1 {
		t.Fatalf("deliveries = %+v", ds)
	}
	args, _ := json.Marshal(deliveryArgs{DeliveryID: ds[0].ID})

	rc.status.Store(500)
	if err := s.runDelivery(context.Background(), args); err == nil {
		t.Fatal("a 500 answer counted as delivered (no retry)")
	}
	st, err := s.Statistics(context.Background(), 84, h.ID, "")
	if err != nil || st.LastFailure == nil || st.LastFailure.Result.Outcome != Failure || st.LastFailure.Result.StatusCode != 500 ||
		st.LastSuccess != nil || st.Counts.Failures != 1 {
		t.Fatalf("statistics after a failure = %+v, %v", st, err)
	}
	rc.status.Store(204)
	if err := s.runDelivery(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	// Delivered once: a late duplicate job sends nothing.
	if err := s.runDelivery(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(rc.got))
	}
	first, second := rc.got[0], rc.got[1]
	if id := first.Header.Get("X-Request-Id"); !uuidRE.MatchString(id) || id != second.Header.Get("X-Request-Id") {
		t.Errorf("X-Request-Id %q then %q: want one UUID for both attempts", id, second.Header.Get("X-Request-Id"))
	}
	if k := first.Header.Get("X-Event-Key"); k != RefsChanged {
		t.Errorf("X-Event-Key = %q", k)
	}
	if sig := first.Header.Get("X-Hub-Signature"); sig != Sign("s3cret", []byte(rc.bodies[0])) || !strings.HasPrefix(sig, "sha256=") {
		t.Errorf("X-Hub-Signature = %q", sig)
	}
	if ct := first.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if rc.bodies[0] != ds[0].Payload {
		t.Errorf("body %s, recorded %s", rc.bodies[0], ds[0].Payload)
	}
	st, _ = s.Statistics(context.Background(), 84, h.ID, RefsChanged)
	if st.LastSuccess == nil || st.LastSuccess.Result.Outcome != Success || st.LastSuccess.Attempts != 2 || st.Counts.Successes != 1 || st.Counts.Failures != 0 {
		t.Errorf("statistics after the retry = %+v", st)
	}
	if st, _ := s.Statistics(context.Background(), 84, h.ID, PROpened); st.Window != 0 {
		t.Errorf("statistics of another event = %+v", st)
	}
	// Another delivery's id differs.
	other := store.WebhookDelivery{ID: ds[0].ID + 1, CreatedAt: ds[0].CreatedAt}
	if RequestID(&other) == RequestID(&ds[0]) {
		t.Error("two deliveries share a request id")
	}
}

func TestGuard(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"::ffff:127.0.0.1", false},
		{"fe80::1", false},
		{"fd00::1", false},
		{"8.8.8.8", true},
		{"2001:4860:4860::8888", true},
	} {
		c := newClient(nil, time.Second)
		if got := c.allowed(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("allowed(%s) = %v", tc.addr, got)
		}
	}
	c := newClient([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, time.Second)
	if !c.allowed(netip.MustParseAddr("127.0.0.1")) {
		t.Error("allow list ignored")
	}
}

// TestDialCheck proves the guard sees the dialled address: a URL naming
// localhost is refused without a request reaching the server, retrying
// does not help (no error for River to retry on), and the refusal is
// recorded.
func TestDialCheck(t *testing.T) {
	m := newMemStore()
	s, err := New(Deps{Store: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	u := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	if _, _, err := s.send(context.Background(), u, "", PROpened, "id", []byte("{}")); !errors.Is(err, errForbiddenAddress) || hits.Load() != 0 {
		t.Fatalf("localhost webhook: err %v, hits %d", err, hits.Load())
	}
	h := &store.Webhook{RepoID: 1, Name: "x", URL: u, Events: []string{PROpened}, Active: true}
	m.CreateWebhook(context.Background(), h)
	d := &store.WebhookDelivery{WebhookID: h.ID, Event: PROpened, Payload: "{}"}
	m.CreateDelivery(context.Background(), d)
	args, _ := json.Marshal(deliveryArgs{DeliveryID: d.ID})
	if err := s.runDelivery(context.Background(), args); err != nil {
		t.Fatalf("a refused address is retried: %v", err)
	}
	if got, _ := m.DeliveryByID(context.Background(), d.ID); got.Attempts != 1 || got.Delivered || !strings.Contains(got.Error, "not allowed") {
		t.Errorf("refused delivery = %+v", got)
	}
}

// TestPing is POST …/webhooks/test: diagnostics:ping with {"test":true},
// and an unreachable or refused receiver is a result, not an error.
func TestPing(t *testing.T) {
	s, _ := world(t)
	rc := newReceiver(t)
	res, err := s.Test(context.Background(), rc.URL, "k")
	if err != nil || res.StatusCode != 200 || res.Body != "pong" || res.Error != "" {
		t.Fatalf("Test = %+v, %v", res, err)
	}
	rc.mu.Lock()
	req, body := rc.got[0], rc.bodies[0]
	rc.mu.Unlock()
	if req.Header.Get("X-Event-Key") != Ping || body != `{"test":true}` || !uuidRE.MatchString(req.Header.Get("X-Request-Id")) ||
		req.Header.Get("X-Hub-Signature") != Sign("k", []byte(body)) {
		t.Errorf("ping: headers %v body %s", req.Header, body)
	}
	guarded, _ := New(Deps{Store: newMemStore()})
	defer guarded.Close()
	res, err = guarded.Test(context.Background(), rc.URL, "")
	if err != nil || res.StatusCode != 0 || !strings.Contains(res.Error, "not allowed") {
		t.Errorf("Test of a refused address = %+v, %v", res, err)
	}
	if _, err := s.Test(context.Background(), "file:///etc/passwd", ""); !problem.Is(err, problem.Invalid) {
		t.Errorf("Test of a file URL: %v", err)
	}
}
