// Package bulkimport loads a node's data from a file: users, groups,
// projects with their grants, repositories with their history, pull
// requests with reviewers and comments, access tokens and SSH keys. It is
// what `sluice admin import FILE` runs, and the one way the performance
// lab's data sets (internal/datagen, which only writes such a file) reach
// a node's database and disk: the lab drives a node through the binary's
// documented commands, never through its packages.
//
// # The file
//
// NDJSON: one JSON object per line, its "type" saying what it describes
// (the field table is Record's). Records name what they refer to by
// natural key — a user or group by name, a project by key, a repository
// as "KEY/slug", a pull request by repository and number — and a record
// may refer only to rows that exist or that an earlier line creates.
//
//	{"type":"user","name":"alice","display_name":"Alice","email":"alice@example.com","password":"s3cret","groups":["dev"]}
//	{"type":"group","name":"dev","members":["alice"]}
//	{"type":"project","key":"APP","name":"App","grants":[{"group":"dev","permission":"PROJECT_WRITE"}]}
//	{"type":"repository","project":"APP","slug":"api","history":"/srv/import/api.git"}
//	{"type":"repository","project":"APP","slug":"api-fork","fork_of":"APP/api"}
//	{"type":"pull_request","repository":"APP/api","number":1,"from_ref":"refs/heads/topic","from_sha":"…","to_ref":"refs/heads/main","to_sha":"…","base_sha":"…","title":"Fix","author":"alice"}
//	{"type":"pull_request_activity","repository":"APP/api","number":1,"participants":[{"user":"alice","role":"AUTHOR"}],"comments":[{"author":"alice","text":"Done."}]}
//	{"type":"token","user":"alice","label":"ci","scope":"write"}
//	{"type":"ssh_key","user":"alice","label":"laptop","public_key":"ssh-ed25519 AAAA…"}
//
// # Re-running
//
// A record whose row exists (by natural key) is skipped, and what it
// carries — a group's members, a user's groups, a project's grants, a
// pull request's activity — is applied only by the record that creates
// the row. So importing the same file twice changes nothing, and an
// interrupted import is finished by running it again. Repositories are
// the exception that makes this work for disk: a row without its
// directory (the import stopped between the two) gets its directory.
// Tokens are minted, never given: each token record creates a new token
// and its secret is written, once, to the caller's tokens writer as a
// "user secret" line; a file that must not mint again omits the record.
//
// # History
//
// A repository's "history" is a local bare repository it starts as a copy
// of: its packs are hard-linked (copied across filesystems) and its refs
// written as the new repository's packed-refs, so a large history costs a
// directory of links, not a clone. A "fork_of" repository borrows its
// parent's objects through alternates (repo.Manager.Fork) and starts with
// its parent's refs, as a fork made through the API does. Neither: empty.
//
// # Speed
//
// Consecutive records of one type are loaded in batches of 5,000 with the
// store's bulk methods (COPY on PostgreSQL, multi-row INSERTs in one
// transaction on SQLite), which is what makes a data set of a million
// pull requests a matter of minutes. Passwords are hashed once per
// distinct password: argon2id per row would take hours for a generated
// data set whose users share one.
package bulkimport

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
)

// Record is one line of an import file. Type selects the fields that
// apply; the others must be empty.
type Record struct {
	Type string `json:"type"`

	// user: Name, DisplayName, Email, Password (clear text, hashed
	// here; empty means no password login), Groups (joined on creation).
	// group: Name, Members (user names). project: Key, Name, Description,
	// Public, Grants. repository: Project, Slug, Name (default the slug),
	// Description, Public, DefaultBranch (default main), History or ForkOf.
	Name          string   `json:"name,omitempty"`
	DisplayName   string   `json:"display_name,omitempty"`
	Email         string   `json:"email,omitempty"`
	Password      string   `json:"password,omitempty"`
	Groups        []string `json:"groups,omitempty"`
	Members       []string `json:"members,omitempty"`
	Key           string   `json:"key,omitempty"`
	Description   string   `json:"description,omitempty"`
	Public        bool     `json:"public,omitempty"`
	Grants        []Grant  `json:"grants,omitempty"`
	Project       string   `json:"project,omitempty"`
	Slug          string   `json:"slug,omitempty"`
	DefaultBranch string   `json:"default_branch,omitempty"`
	History       string   `json:"history,omitempty"`
	ForkOf        string   `json:"fork_of,omitempty"`

	// pull_request: Repository ("KEY/slug"), Number, the refs and
	// commits, Title, Description, State (OPEN, MERGED, DECLINED;
	// default OPEN), Author. pull_request_activity: Repository, Number,
	// Participants, Comments.
	Repository   string        `json:"repository,omitempty"`
	Number       int64         `json:"number,omitempty"`
	FromRef      string        `json:"from_ref,omitempty"`
	FromSHA      string        `json:"from_sha,omitempty"`
	ToRef        string        `json:"to_ref,omitempty"`
	ToSHA        string        `json:"to_sha,omitempty"`
	BaseSHA      string        `json:"base_sha,omitempty"`
	Title        string        `json:"title,omitempty"`
	State        string        `json:"state,omitempty"`
	Author       string        `json:"author,omitempty"`
	Participants []Participant `json:"participants,omitempty"`
	Comments     []Comment     `json:"comments,omitempty"`

	// token: User, Label, Scope (read, write, admin). ssh_key: User,
	// Label, PublicKey (authorized_keys format).
	User      string `json:"user,omitempty"`
	Label     string `json:"label,omitempty"`
	Scope     string `json:"scope,omitempty"`
	PublicKey string `json:"public_key,omitempty"`

	// CreatedAt dates users, projects, repositories, pull requests;
	// zero is the time of the import.
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Grant is a project permission for a user or a group (one of them).
type Grant struct {
	User       string `json:"user,omitempty"`
	Group      string `json:"group,omitempty"`
	Permission string `json:"permission"`
}

// Participant is a pull request's author, reviewer or participant.
type Participant struct {
	User   string `json:"user"`
	Role   string `json:"role"`             // AUTHOR, REVIEWER, PARTICIPANT
	Status string `json:"status,omitempty"` // APPROVED, NEEDS_WORK, UNAPPROVED (default)
}

// Comment is a top-level pull request comment.
type Comment struct {
	Author    string    `json:"author"`
	Text      string    `json:"text"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// Record types.
const (
	TypeUser         = "user"
	TypeGroup        = "group"
	TypeProject      = "project"
	TypeRepository   = "repository"
	TypePullRequest  = "pull_request"
	TypePullActivity = "pull_request_activity"
	TypeToken        = "token"
	TypeSSHKey       = "ssh_key"
)

// Deps are what an import writes into.
type Deps struct {
	DB     *store.DB
	Repos  *repo.Manager
	Auth   *auth.Service
	Logger *slog.Logger
	// Tokens receives a "user secret" line per minted token; nil refuses
	// token records (the secrets would be lost).
	Tokens io.Writer
}

// Counts says how many rows of each kind an import created.
type Counts struct {
	Users, Groups, Projects, Repositories, PullRequests, Comments, Tokens, SSHKeys int
}

// batchSize bounds the records held before a bulk insert: large enough
// that COPY's per-statement cost vanishes, small enough to hold in memory
// at any profile.
const batchSize = 5000

// maxLine bounds one record; a pull request's activity with thousands of
// comments stays well below it.
const maxLine = 64 << 20

// Import reads an import file from r and loads it. On error the rows of
// the batch that failed are not loaded; earlier batches are, and a re-run
// completes the import.
func Import(ctx context.Context, d Deps, r io.Reader) (Counts, error) {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	im := &importer{d: d, hashes: map[string]string{}, createdPRs: map[string]bool{},
		ids: map[string]*idMap{}, logger: d.Logger.With("component", "bulkimport")}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return im.created, fmt.Errorf("line %d: %w", line, err)
		}
		if err := im.add(ctx, line, rec); err != nil {
			return im.created, err
		}
		if line%batchSize == 0 {
			if err := ctx.Err(); err != nil {
				return im.created, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return im.created, fmt.Errorf("line %d: %w", line+1, err)
	}
	if err := im.flush(ctx); err != nil {
		return im.created, err
	}
	return im.created, nil
}

// pending is a record waiting in the batch, with its line for errors.
type pending struct {
	line int
	rec  Record
}

type importer struct {
	d       Deps
	logger  *slog.Logger
	created Counts

	batch     []pending
	batchType string

	ids        map[string]*idMap // by store bulk kind
	hashes     map[string]string // password → argon2id hash
	createdPRs map[string]bool   // "KEY/slug#N" created by this import
}

// idMap is a natural key → id map read from the store, read again when
// the importer has written rows of its kind since.
type idMap struct {
	m     map[string]int64
	stale bool
}

func (im *importer) lookup(ctx context.Context, kind, key string) (int64, error) {
	e := im.ids[kind]
	if e == nil || e.stale {
		m, err := im.d.DB.NameIDs(ctx, kind)
		if err != nil {
			return 0, err
		}
		e = &idMap{m: m}
		im.ids[kind] = e
	}
	return e.m[key], nil
}

func (im *importer) touched(kind string) {
	if e := im.ids[kind]; e != nil {
		e.stale = true
	}
}

// add queues rec, flushing the batch first when its type changes or it
// is full, so batches hold one type and keep the file's order.
func (im *importer) add(ctx context.Context, line int, rec Record) error {
	switch rec.Type {
	case TypeUser, TypeGroup, TypeProject, TypeRepository, TypePullRequest, TypePullActivity, TypeToken, TypeSSHKey:
	default:
		return fmt.Errorf("line %d: unknown record type %q", line, rec.Type)
	}
	if rec.Type != im.batchType || len(im.batch) >= batchSize {
		if err := im.flush(ctx); err != nil {
			return err
		}
	}
	im.batchType = rec.Type
	im.batch = append(im.batch, pending{line, rec})
	return nil
}

func (im *importer) flush(ctx context.Context) error {
	if len(im.batch) == 0 {
		return nil
	}
	var err error
	switch im.batchType {
	case TypeUser:
		err = im.users(ctx)
	case TypeGroup:
		err = im.groups(ctx)
	case TypeProject:
		err = im.projects(ctx)
	case TypeRepository:
		err = im.repositories(ctx)
	case TypePullRequest:
		err = im.pullRequests(ctx)
	case TypePullActivity:
		err = im.activity(ctx)
	case TypeToken:
		err = im.tokens(ctx)
	case TypeSSHKey:
		err = im.sshKeys(ctx)
	}
	im.batch = im.batch[:0]
	return err
}

// lineErr names the line a record came from.
func lineErr(p pending, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", p.line, fmt.Sprintf(format, args...))
}

// need resolves a reference that must exist.
func (im *importer) need(ctx context.Context, p pending, kind, what, key string) (int64, error) {
	id, err := im.lookup(ctx, kind, lookupKey(kind, key))
	if err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, lineErr(p, "unknown %s %q", what, key)
	}
	return id, nil
}

// lookupKey is the form NameIDs keys a kind by.
func lookupKey(kind, key string) string {
	switch kind {
	case store.BulkUsers, store.BulkGroups:
		return strings.ToLower(key)
	case store.BulkProjects:
		return strings.ToUpper(key)
	case store.BulkRepos:
		k, slug, _ := strings.Cut(key, "/")
		return strings.ToUpper(k) + "/" + strings.ToLower(slug)
	}
	return key
}

// fresh drops records whose natural key exists or appears earlier in the
// batch, and validates the rest.
func (im *importer) fresh(ctx context.Context, kind string, key func(Record) string, valid func(Record) error) ([]pending, error) {
	var out []pending
	seen := map[string]bool{}
	for _, p := range im.batch {
		k := key(p.rec)
		if err := valid(p.rec); err != nil {
			return nil, lineErr(p, "%s", problem.Message(err))
		}
		id, err := im.lookup(ctx, kind, lookupKey(kind, k))
		if err != nil {
			return nil, err
		}
		if id != 0 || seen[lookupKey(kind, k)] {
			continue
		}
		seen[lookupKey(kind, k)] = true
		out = append(out, p)
	}
	return out, nil
}

func (im *importer) hash(password string) (string, error) {
	if password == "" {
		return "", nil
	}
	if h, ok := im.hashes[password]; ok {
		return h, nil
	}
	h, err := auth.HashPassword(password)
	if err != nil {
		return "", err
	}
	im.hashes[password] = h
	return h, nil
}

func (im *importer) users(ctx context.Context) error {
	todo, err := im.fresh(ctx, store.BulkUsers, func(r Record) string { return r.Name },
		func(r Record) error { return store.ValidateUserName(r.Name) })
	if err != nil || len(todo) == 0 {
		return err
	}
	rows := make([]store.User, len(todo))
	for i, p := range todo {
		h, err := im.hash(p.rec.Password)
		if err != nil {
			return err
		}
		display := p.rec.DisplayName
		if display == "" {
			display = p.rec.Name
		}
		rows[i] = store.User{Name: p.rec.Name, DisplayName: display, Email: p.rec.Email, PasswordHash: h,
			Active: true, CreatedAt: p.rec.CreatedAt}
	}
	if err := im.d.DB.BulkCreateUsers(ctx, rows); err != nil {
		return err
	}
	im.created.Users += len(rows)
	im.touched(store.BulkUsers)
	var members []store.GroupMember
	for _, p := range todo {
		if len(p.rec.Groups) == 0 {
			continue
		}
		uid, err := im.need(ctx, p, store.BulkUsers, "user", p.rec.Name)
		if err != nil {
			return err
		}
		for _, g := range p.rec.Groups {
			gid, err := im.need(ctx, p, store.BulkGroups, "group", g)
			if err != nil {
				return err
			}
			members = append(members, store.GroupMember{GroupID: gid, UserID: uid})
		}
	}
	return im.d.DB.BulkAddGroupMembers(ctx, dedupeMembers(members))
}

func dedupeMembers(ms []store.GroupMember) []store.GroupMember {
	seen := map[store.GroupMember]bool{}
	out := ms[:0]
	for _, m := range ms {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

func validGroupName(name string) error {
	if strings.TrimSpace(name) == "" || len(name) > 255 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return problem.New(problem.Invalid, "group name %q must be 1 to 255 printable characters", name)
	}
	return nil
}

func (im *importer) groups(ctx context.Context) error {
	todo, err := im.fresh(ctx, store.BulkGroups, func(r Record) string { return r.Name },
		func(r Record) error { return validGroupName(r.Name) })
	if err != nil || len(todo) == 0 {
		return err
	}
	rows := make([]store.Group, len(todo))
	for i, p := range todo {
		rows[i] = store.Group{Name: p.rec.Name}
	}
	if err := im.d.DB.BulkCreateGroups(ctx, rows); err != nil {
		return err
	}
	im.created.Groups += len(rows)
	im.touched(store.BulkGroups)
	var members []store.GroupMember
	for _, p := range todo {
		if len(p.rec.Members) == 0 {
			continue
		}
		gid, err := im.need(ctx, p, store.BulkGroups, "group", p.rec.Name)
		if err != nil {
			return err
		}
		for _, u := range p.rec.Members {
			uid, err := im.need(ctx, p, store.BulkUsers, "user", u)
			if err != nil {
				return err
			}
			members = append(members, store.GroupMember{GroupID: gid, UserID: uid})
		}
	}
	return im.d.DB.BulkAddGroupMembers(ctx, dedupeMembers(members))
}

var projectPerms = map[store.Permission]bool{store.PermProjectRead: true, store.PermProjectWrite: true, store.PermProjectAdmin: true}

func (im *importer) projects(ctx context.Context) error {
	todo, err := im.fresh(ctx, store.BulkProjects, func(r Record) string { return r.Key }, func(r Record) error {
		if err := validImportKey(r.Key); err != nil {
			return err
		}
		for _, g := range r.Grants {
			if (g.User == "") == (g.Group == "") {
				return problem.New(problem.Invalid, "a grant names a user or a group")
			}
			if !projectPerms[store.Permission(g.Permission)] {
				return problem.New(problem.Invalid, "project permission %q is not PROJECT_READ, PROJECT_WRITE or PROJECT_ADMIN", g.Permission)
			}
		}
		return nil
	})
	if err != nil || len(todo) == 0 {
		return err
	}
	rows := make([]store.Project, len(todo))
	for i, p := range todo {
		name := p.rec.Name
		if name == "" {
			name = p.rec.Key
		}
		rows[i] = store.Project{Key: p.rec.Key, Name: name, Description: p.rec.Description, Public: p.rec.Public, CreatedAt: p.rec.CreatedAt}
	}
	if err := im.d.DB.BulkCreateProjects(ctx, rows); err != nil {
		return err
	}
	im.created.Projects += len(rows)
	im.touched(store.BulkProjects)
	var grants []store.ProjectGrant
	for _, p := range todo {
		pid, err := im.need(ctx, p, store.BulkProjects, "project", p.rec.Key)
		if err != nil {
			return err
		}
		seen := map[store.Grant]bool{}
		for _, g := range p.rec.Grants {
			gr := store.Grant{Permission: store.Permission(g.Permission)}
			if g.User != "" {
				gr.UserID, err = im.need(ctx, p, store.BulkUsers, "user", g.User)
			} else {
				gr.GroupID, err = im.need(ctx, p, store.BulkGroups, "group", g.Group)
			}
			if err != nil {
				return err
			}
			// One permission per grantee and project: the strongest.
			key := store.Grant{UserID: gr.UserID, GroupID: gr.GroupID}
			if !seen[key] {
				seen[key] = true
				grants = append(grants, store.ProjectGrant{ProjectID: pid, Grant: gr})
			}
		}
	}
	return im.d.DB.BulkProjectGrants(ctx, grants)
}

func (im *importer) tokens(ctx context.Context) error {
	if im.d.Tokens == nil {
		return lineErr(im.batch[0], "token records need somewhere to write the secrets")
	}
	for _, p := range im.batch {
		uid, err := im.need(ctx, p, store.BulkUsers, "user", p.rec.User)
		if err != nil {
			return err
		}
		secret, _, err := im.d.Auth.CreateToken(ctx, uid, p.rec.Label, store.Scope(p.rec.Scope), nil)
		if err != nil {
			return lineErr(p, "%s", problem.Message(err))
		}
		if _, err := fmt.Fprintf(im.d.Tokens, "%s %s\n", p.rec.User, secret); err != nil {
			return err
		}
		im.created.Tokens++
	}
	return nil
}

func (im *importer) sshKeys(ctx context.Context) error {
	for _, p := range im.batch {
		pub, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(p.rec.PublicKey))
		if err != nil || len(strings.TrimSpace(string(rest))) != 0 {
			return lineErr(p, "public key is not one authorized_keys line")
		}
		fp := ssh.FingerprintSHA256(pub)
		if _, err := im.d.DB.SSHKeyByFingerprint(ctx, fp); err == nil {
			continue
		} else if problem.KindOf(err) != problem.NotFound {
			return err
		}
		uid, err := im.need(ctx, p, store.BulkUsers, "user", p.rec.User)
		if err != nil {
			return err
		}
		label := p.rec.Label
		if label == "" {
			label = "imported"
		}
		if err := im.d.DB.AddSSHKey(ctx, &store.SSHKey{UserID: uid, Label: label,
			PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))), Fingerprint: fp}); err != nil {
			return lineErr(p, "%s", problem.Message(err))
		}
		im.created.SSHKeys++
	}
	return nil
}
