package bulkimport_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/bulkimport"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	dir   string
	db    *store.DB
	repos *repo.Manager
	auth  *auth.Service
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "sluice.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	logger := slog.New(slog.DiscardHandler)
	git, err := gitcmd.New(gitcmd.Config{Binary: "git", HomeDir: filepath.Join(dir, "home"), HookBinary: "/bin/true"}, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { git.Close() })
	return &fixture{t: t, ctx: ctx, dir: dir, db: db, repos: repo.NewManager(filepath.Join(dir, "repos"), git, logger),
		auth: auth.New(db, logger, nil)}
}

func (f *fixture) load(doc string, tokens *bytes.Buffer) (bulkimport.Counts, error) {
	d := bulkimport.Deps{DB: f.db, Repos: f.repos, Auth: f.auth}
	if tokens != nil {
		d.Tokens = tokens
	}
	return bulkimport.Import(f.ctx, d, strings.NewReader(doc))
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a",
		"GIT_COMMITTER_EMAIL=a@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// history makes a bare repository with main (two commits) and a topic
// branch, its refs loose or packed.
func history(t *testing.T, packed bool) (dir, main, topic string) {
	t.Helper()
	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "a"), []byte("a\n"), 0o644)
	git(t, work, "add", "a")
	git(t, work, "commit", "-q", "-m", "one")
	git(t, work, "checkout", "-q", "-b", "topic/x")
	os.WriteFile(filepath.Join(work, "b"), []byte("b\n"), 0o644)
	git(t, work, "add", "b")
	git(t, work, "commit", "-q", "-m", "two")
	git(t, work, "checkout", "-q", "main")
	os.WriteFile(filepath.Join(work, "a"), []byte("a2\n"), 0o644)
	git(t, work, "commit", "-q", "-am", "three")
	dir = filepath.Join(t.TempDir(), "h.git")
	git(t, work, "clone", "-q", "--bare", work, dir)
	if packed {
		git(t, dir, "repack", "-q", "-a", "-d")
		git(t, dir, "pack-refs", "--all", "--prune")
	}
	return dir, git(t, dir, "rev-parse", "main"), git(t, dir, "rev-parse", "topic/x")
}

func TestImport(t *testing.T) {
	f := newFixture(t)
	hist, main, topic := history(t, true)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	doc := fmt.Sprintf(`{"type":"user","name":"alice","display_name":"Alice","email":"alice@example.com","password":"pw-alice-1"}
{"type":"user","name":"bob","password":"pw-alice-1"}
{"type":"group","name":"dev","members":["alice"]}
{"type":"group","name":"ops"}
{"type":"user","name":"carol","groups":["ops"]}

{"type":"project","key":"APP","name":"App","grants":[{"group":"dev","permission":"PROJECT_WRITE"},{"user":"carol","permission":"PROJECT_READ"}]}
{"type":"repository","project":"APP","slug":"svc","history":%q}
{"type":"repository","project":"APP","slug":"svc-fork","fork_of":"APP/svc"}
{"type":"repository","project":"APP","slug":"empty","default_branch":"trunk"}
{"type":"pull_request","repository":"APP/svc","number":1,"from_ref":"refs/heads/topic/x","from_sha":%q,"to_ref":"refs/heads/main","to_sha":%q,"title":"Add b","state":"MERGED","author":"alice"}
{"type":"pull_request","repository":"APP/svc","number":2,"from_ref":"refs/heads/topic/x","to_ref":"refs/heads/main","title":"Again"}
{"type":"pull_request_activity","repository":"APP/svc","number":1,"participants":[{"user":"alice","role":"AUTHOR"},{"user":"bob","role":"REVIEWER","status":"APPROVED"}],"comments":[{"author":"bob","text":"Nice."},{"author":"alice","text":"Thanks."}]}
{"type":"token","user":"bob","label":"ci","scope":"write"}
{"type":"ssh_key","user":"carol","label":"laptop","public_key":%q}
`, hist, topic, main, pub)
	var tokens bytes.Buffer
	got, err := f.load(doc, &tokens)
	if err != nil {
		t.Fatal(err)
	}
	want := bulkimport.Counts{Users: 3, Groups: 2, Projects: 1, Repositories: 3, PullRequests: 2, Comments: 2, Tokens: 1, SSHKeys: 1}
	if got != want {
		t.Fatalf("created %+v, want %+v", got, want)
	}

	// Passwords are hashed, and one hash serves users who share one.
	if p, err := f.auth.Password(f.ctx, "alice", "pw-alice-1"); err != nil || p.Name != "alice" {
		t.Fatalf("alice's password: %+v, %v", p, err)
	}
	// The token minted for bob authenticates as bob.
	name, secret, _ := strings.Cut(strings.TrimSpace(tokens.String()), " ")
	if p, err := f.auth.Token(f.ctx, secret); name != "bob" || err != nil || p.Name != "bob" {
		t.Fatalf("token line %q: %+v, %v", tokens.String(), p, err)
	}
	if p, err := f.auth.PublicKey(f.ctx, signer.PublicKey()); err != nil || p.Name != "carol" {
		t.Fatalf("carol's key: %+v, %v", p, err)
	}
	// Memberships from both sides, and grants: alice writes through dev,
	// carol reads by her own grant, bob has nothing.
	proj, err := f.db.ProjectByKey(f.ctx, "APP")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		user string
		act  auth.Action
		ok   bool
	}{{"alice", auth.Write, true}, {"carol", auth.Read, true}, {"carol", auth.Write, false}, {"bob", auth.Read, false}} {
		u, err := f.db.UserByName(f.ctx, tt.user)
		if err != nil {
			t.Fatal(err)
		}
		err = f.auth.Authorize(f.ctx, &auth.Principal{UserID: u.ID, Name: u.Name}, auth.Resource{Project: proj}, tt.act)
		if (err == nil) != tt.ok {
			t.Errorf("%s %v on APP: %v, want allowed=%v", tt.user, tt.act, err, tt.ok)
		}
	}
	if ms, err := f.db.GroupMembers(f.ctx, groupID(t, f, "ops")); err != nil || len(ms) != 1 || ms[0].Name != "carol" {
		t.Errorf("ops members %+v, %v", ms, err)
	}

	// The history's refs are the repository's; the fork borrows the
	// objects and starts with the same branches; the empty repository
	// has its default branch.
	api, err := f.db.RepoBySlug(f.ctx, "APP", "svc")
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, f.repos.Path(api.ID), "rev-parse", "main", "topic/x"); got != main+"\n"+topic {
		t.Errorf("api refs %q", got)
	}
	git(t, f.repos.Path(api.ID), "fsck", "--no-dangling")
	fork, err := f.db.RepoBySlug(f.ctx, "APP", "svc-fork")
	if err != nil || fork.ForkOf != api.ID {
		t.Fatalf("fork %+v, %v", fork, err)
	}
	if got := git(t, f.repos.Path(fork.ID), "rev-list", "--count", "main"); got != "2" {
		t.Errorf("fork history %q commits", got)
	}
	if _, err := os.Stat(filepath.Join(f.repos.Path(fork.ID), "objects", "info", "alternates")); err != nil {
		t.Errorf("fork has no alternates: %v", err)
	}
	empty, err := f.db.RepoBySlug(f.ctx, "APP", "empty")
	if err != nil || empty.DefaultBranch != "trunk" || !f.repos.Exists(empty.ID) {
		t.Fatalf("empty repository %+v, %v", empty, err)
	}

	// Pull request activity lands on the right pull request.
	pr, err := f.db.PullRequestByNumber(f.ctx, api.ID, 1)
	if err != nil || pr.State != store.PullMerged || pr.FromSHA != topic {
		t.Fatalf("pull request 1: %+v, %v", pr, err)
	}
	for table, n := range map[string]int64{"pull_request_participants": 2, "pull_request_comments": 2, "group_members": 2, "project_permissions": 2} {
		if got, err := f.db.CountRows(f.ctx, table); err != nil || got != n {
			t.Errorf("%s: %d rows, %v; want %d", table, got, err, n)
		}
	}

	// Again, without the token record (the caller kept its secret):
	// nothing new, not even activity for the existing pull request.
	again := strings.Replace(doc, `{"type":"token","user":"bob","label":"ci","scope":"write"}`+"\n", "", 1)
	if got, err := f.load(again, nil); err != nil || got != (bulkimport.Counts{}) {
		t.Fatalf("second import created %+v, %v", got, err)
	}
	if got, err := f.db.CountRows(f.ctx, "pull_request_comments"); err != nil || got != 2 {
		t.Errorf("comments after the second import: %d, %v", got, err)
	}
}

func groupID(t *testing.T, f *fixture, name string) int64 {
	t.Helper()
	g, err := f.db.GroupByName(f.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return g.ID
}

// TestImportFinishesRepositories: a repository row whose directory the
// last import did not get to is completed, from loose refs too.
func TestImportFinishesRepositories(t *testing.T) {
	f := newFixture(t)
	hist, main, _ := history(t, false)
	doc := fmt.Sprintf(`{"type":"project","key":"P"}
{"type":"repository","project":"P","slug":"r","history":%q}
{"type":"repository","project":"P","slug":"f","fork_of":"P/r"}
`, hist)
	if _, err := f.load(doc, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := f.db.RepoBySlug(f.ctx, "P", "r")
	fk, _ := f.db.RepoBySlug(f.ctx, "P", "f")
	// Undo the disk half: the fork's directory and the history's refs.
	if err := os.RemoveAll(f.repos.Path(fk.ID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.repos.Path(r.ID), "packed-refs")); err != nil {
		t.Fatal(err)
	}
	got, err := f.load(doc, nil)
	if err != nil || got != (bulkimport.Counts{}) {
		t.Fatalf("second import: %+v, %v", got, err)
	}
	for _, id := range []int64{r.ID, fk.ID} {
		if got := git(t, f.repos.Path(id), "rev-parse", "main"); got != main {
			t.Errorf("repository %d main %q, want %s", id, got, main)
		}
	}
}

func TestImportRefuses(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"unknown type", `{"type":"wiki"}`, `line 1: unknown record type "wiki"`},
		{"not json", `{"type":`, "line 1:"},
		{"bad user name", `{"type":"user","name":"a b"}`, "line 1:"},
		{"unknown member", `{"type":"group","name":"g","members":["ghost"]}`, `line 1: unknown user "ghost"`},
		{"bad project key", `{"type":"project","key":"a-b"}`, "line 1:"},
		{"personal project", `{"type":"user","name":"alice"}` + "\n" + `{"type":"project","key":"~alice"}`, "line 2: project key \"~alice\": personal projects are not imported"},
		{"personal repository", `{"type":"user","name":"alice"}` + "\n" + `{"type":"repository","project":"~alice","slug":"r"}`, "personal projects are not imported"},
		{"tilde inside key", `{"type":"project","key":"a~b"}`, "line 1:"},
		{"bad grant", `{"type":"project","key":"P","grants":[{"group":"g","permission":"REPO_READ"}]}`, "PROJECT_READ"},
		{"unknown project", `{"type":"repository","project":"NOPE","slug":"r"}`, `unknown project "NOPE"`},
		{"relative history", `{"type":"project","key":"P"}` + "\n" + `{"type":"repository","project":"P","slug":"r","history":"h.git"}`, "line 2: history"},
		{"history and fork", `{"type":"project","key":"P"}` + "\n" + `{"type":"repository","project":"P","slug":"r","history":"/h","fork_of":"P/x"}`, "not both"},
		{"bad state", `{"type":"project","key":"P"}` + "\n" + `{"type":"repository","project":"P","slug":"r"}` + "\n" +
			`{"type":"pull_request","repository":"P/r","number":1,"from_ref":"refs/heads/a","to_ref":"refs/heads/main","title":"t","state":"GONE"}`, "line 3:"},
		{"tokens nowhere", `{"type":"user","name":"u"}` + "\n" + `{"type":"token","user":"u","label":"x","scope":"write"}`, "line 2: token records need"},
		{"bad key", `{"type":"user","name":"u"}` + "\n" + `{"type":"ssh_key","user":"u","public_key":"ssh-ed25519 nope"}`, "line 2: public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.load(tt.doc, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
