// Package store is Sluice's metadata: users, groups, projects,
// repositories, permissions, tokens, SSH keys, the per-repository refs
// generation and settings.
//
// Store is one interface with two implementations sharing one body of SQL:
// SQLite (modernc.org/sqlite, the default, WAL mode with a busy timeout so
// the admin CLI can write while a server runs) and PostgreSQL (pgx). The
// queries are written once with ? placeholders and rebound to $n for
// PostgreSQL; what the dialects do differently (column types, identity
// columns) lives in the migrations only. Both dialects support what the
// queries lean on: INSERT … RETURNING, ON CONFLICT … DO UPDATE with partial
// unique indexes as targets, UNION ALL. The same test suite (storetest)
// runs against both.
//
// SQLite is opened with synchronous=FULL (an acknowledged push survives a
// power cut), foreign_keys on, a 10 s busy timeout and BEGIN IMMEDIATE for
// write transactions, all set through the DSN so every pooled connection
// gets them. Times are stored in UTC at microsecond precision. Each query
// text stays prepared once used (stmtCache in db.go): on SQLite planning a
// statement cost more than running the small reads every request makes;
// pgx already caches prepared statements on PostgreSQL.
//
// Case-insensitive names: user and group names are unique by
// strings.ToLower(name), kept in a name_key column computed here rather
// than by lower() in SQL, so both dialects fold the same way beyond ASCII.
// Project keys are stored upper case and slugs lower case, and lookups
// fold the caller's input the same way.
//
// # Migrations
//
// The schema is managed by goose migrations embedded in the binary, one
// directory per dialect (migrations/sqlite, migrations/postgres) holding
// the same version numbers. Open runs them; on PostgreSQL under a
// session-level pg_advisory_lock so that nodes starting together migrate
// one at a time. Migrations are expand/contract, because during a rolling
// upgrade release N and N+1 run against the same database:
//
//   - expand (release N+1): add tables, nullable or defaulted columns and
//     indexes; never rename or drop anything release N still reads, never
//     add a constraint that release N's writes would break;
//   - migrate: N+1 writes both the old and the new shape and backfills in
//     a job, not inside the migration (which holds the lock);
//   - contract (release N+2 or later): drop what no running release uses.
//
// A migration that must rewrite a large table says so in its comment.
// Permission names are validated in Go, not by CHECK constraints, so a new
// permission needs no migration. Ids are never reused (identity columns,
// SQLite AUTOINCREMENT): a repository's directory derives from its id.
//
// Errors: a missing row is problem.NotFound ("repository not found"), a
// unique-constraint violation is problem.Conflict, a bad name is
// problem.Invalid (see names.go), a database that cannot be reached, a
// lost session or an SQLite lock held past the busy timeout is
// problem.Unavailable. Anything else is an internal error that wraps the
// driver's for the log. On PostgreSQL a query waits at most the acquire
// timeout (WithAcquireTimeout, config database.acquire_timeout) for a
// pooled connection, then fails with Unavailable: pgxpool's MaxConns is
// the one bound and database/sql keeps no queue of its own, so no request
// waits on a saturated or silent database for as long as its context
// lasts.
package store

import (
	"context"
	"time"
)

// Permission is a Bitbucket permission name. Global permissions are
// PermAdmin, PermSysAdmin and PermProjectCreate; project permissions are
// PermProject*; repository permissions are PermRepo*.
type Permission string

const (
	PermSysAdmin      Permission = "SYS_ADMIN"
	PermAdmin         Permission = "ADMIN"
	PermProjectCreate Permission = "PROJECT_CREATE"
	PermProjectRead   Permission = "PROJECT_READ"
	PermProjectWrite  Permission = "PROJECT_WRITE"
	PermProjectAdmin  Permission = "PROJECT_ADMIN"
	PermRepoRead      Permission = "REPO_READ"
	PermRepoWrite     Permission = "REPO_WRITE"
	PermRepoAdmin     Permission = "REPO_ADMIN"
)

// Scope limits what an access token or access key may do.
type Scope string

const (
	ScopeRead  Scope = "read"
	ScopeWrite Scope = "write"
	ScopeAdmin Scope = "admin"
)

// User is an account. Name is the login, unique case-insensitively.
type User struct {
	ID           int64
	Name         string
	DisplayName  string
	Email        string
	PasswordHash string // argon2id PHC string; empty means no password login
	Active       bool
	CreatedAt    time.Time
}

// Group is a named set of users.
type Group struct {
	ID   int64
	Name string
}

// Project groups repositories under a short upper-case key.
type Project struct {
	ID          int64
	Key         string // upper case, unique
	Name        string
	Description string
	Public      bool
	CreatedAt   time.Time
}

// Repository is a git repository. Its location on disk derives from ID only.
type Repository struct {
	ID            int64
	ProjectID     int64
	ProjectKey    string // filled by reads for convenience
	Slug          string // unique within the project
	Name          string
	Description   string
	Public        bool
	DefaultBranch string // short name, e.g. "main"
	ForkOf        int64  // 0 when not a fork
	CreatedAt     time.Time
	// PushedAt is the last time refs changed through a push or merge.
	PushedAt time.Time
}

// Grant is one permission given to a user or a group on a resource.
// Exactly one of UserID and GroupID is set.
type Grant struct {
	UserID     int64
	GroupID    int64
	UserName   string // filled by list operations
	GroupName  string // filled by list operations
	Permission Permission
}

// Token is a personal access token. Only the SHA-256 of its secret is stored.
type Token struct {
	ID         int64
	UserID     int64
	Name       string
	Hash       []byte // sha256(secret)
	Scope      Scope
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// SSHKey is a user's public key or, when RepoID is set, an access key bound
// to one repository with Scope read or write.
type SSHKey struct {
	ID          int64
	UserID      int64 // 0 for access keys
	RepoID      int64 // 0 for user keys
	Scope       Scope // for access keys
	Label       string
	PublicKey   string // authorized_keys format, one line
	Fingerprint string // "SHA256:…", unique
	CreatedAt   time.Time
	LastUsedAt  *time.Time
}

// RepoState is what readers of a repository's refs need to know to decide
// whether something computed from the refs is still current.
type RepoState struct {
	// Generation increases whenever a ref transaction is prepared or
	// finished; it never decreases.
	Generation int64
	// Pending counts ref transactions prepared but not yet finished.
	Pending int
}

// RefTxn is a recorded ref transaction, kept until it is committed or
// aborted so a crash between the ref update and the database write can be
// reconciled at start.
type RefTxn struct {
	ID     int64
	RepoID int64
	NodeID string
	// Instance is the random id of the recording process's start ("" for
	// rows of older releases): the transaction is abandoned once that
	// process is gone, even when its node runs again.
	Instance string
	// ClaimedBy names the reconciler holding the transaction's lease (see
	// ClaimRefTxn), "" when none.
	ClaimedBy string
	Updates   string // "old new ref" lines, as git gives them to the hook
	CreatedAt time.Time
}

// GitRun is a git process that may move refs or receive objects, recorded
// from before it starts until it exits (hooks.Server.Register). git takes
// ref locks and fills its quarantine before any ref transaction is
// recorded, so when a process start dies its runs are what says which
// repositories may hold its leftovers, and the runs of live processes
// bound which leftovers a live git could still own.
type GitRun struct {
	ID        int64
	RepoID    int64
	NodeID    string
	Instance  string
	StartedAt time.Time // the recorder's clock, like RefTxn.CreatedAt
}

// Page is a request for one page of a listing.
type Page struct {
	Start int
	Limit int
}

// Store is the metadata store. Every method is safe for concurrent use.
type Store interface {
	// Dialect is "sqlite" or "postgres".
	Dialect() string
	Ping(ctx context.Context) error
	Close() error

	// Users.
	CreateUser(ctx context.Context, u *User) error
	UserByID(ctx context.Context, id int64) (*User, error)
	UserByName(ctx context.Context, name string) (*User, error)
	ListUsers(ctx context.Context, filter string, p Page) ([]User, error)
	UpdateUser(ctx context.Context, u *User) error
	DeleteUser(ctx context.Context, id int64) error
	CountUsers(ctx context.Context) (int, error)

	// Groups.
	CreateGroup(ctx context.Context, g *Group) error
	GroupByName(ctx context.Context, name string) (*Group, error)
	ListGroups(ctx context.Context, filter string, p Page) ([]Group, error)
	DeleteGroup(ctx context.Context, id int64) error
	AddGroupMember(ctx context.Context, groupID, userID int64) error
	RemoveGroupMember(ctx context.Context, groupID, userID int64) error
	GroupMembers(ctx context.Context, groupID int64) ([]User, error)
	UserGroups(ctx context.Context, userID int64) ([]Group, error)

	// Projects. Keys are matched case-insensitively.
	CreateProject(ctx context.Context, p *Project) error
	ProjectByKey(ctx context.Context, key string) (*Project, error)
	ProjectByID(ctx context.Context, id int64) (*Project, error)
	ListProjects(ctx context.Context, filter string, p Page) ([]Project, error)
	UpdateProject(ctx context.Context, p *Project) error
	DeleteProject(ctx context.Context, id int64) error

	// Repositories.
	CreateRepo(ctx context.Context, r *Repository) error
	RepoByID(ctx context.Context, id int64) (*Repository, error)
	RepoBySlug(ctx context.Context, projectKey, slug string) (*Repository, error)
	ListRepos(ctx context.Context, projectID int64, p Page) ([]Repository, error)
	// ListAllRepos lists every repository (all projects), for admins and
	// housekeeping; filter matches the name.
	ListAllRepos(ctx context.Context, filter string, p Page) ([]Repository, error)
	UpdateRepo(ctx context.Context, r *Repository) error
	DeleteRepo(ctx context.Context, id int64) error
	// CountForks counts the repositories forked from id (they borrow its
	// objects through alternates).
	CountForks(ctx context.Context, id int64) (int, error)

	// Permissions. SetXPermission replaces the grantee's grant on the
	// resource (one grant per grantee and resource); Revoke removes it.
	SetGlobalPermission(ctx context.Context, g Grant) error
	RevokeGlobalPermission(ctx context.Context, userID, groupID int64) error
	GlobalGrants(ctx context.Context) ([]Grant, error)
	SetProjectPermission(ctx context.Context, projectID int64, g Grant) error
	RevokeProjectPermission(ctx context.Context, projectID, userID, groupID int64) error
	ProjectGrants(ctx context.Context, projectID int64) ([]Grant, error)
	SetRepoPermission(ctx context.Context, repoID int64, g Grant) error
	RevokeRepoPermission(ctx context.Context, repoID, userID, groupID int64) error
	RepoGrants(ctx context.Context, repoID int64) ([]Grant, error)
	// EffectiveGrants returns every permission userID holds directly or
	// through a group: globally (projectID=repoID=0 rows), on projectID and
	// on repoID, in one round trip. auth turns these into a decision.
	EffectiveGrants(ctx context.Context, userID, projectID, repoID int64) (global, project, repo []Permission, err error)

	// Access tokens.
	CreateToken(ctx context.Context, t *Token) error
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)
	ListTokens(ctx context.Context, userID int64) ([]Token, error)
	RevokeToken(ctx context.Context, userID, tokenID int64) error
	TouchToken(ctx context.Context, tokenID int64, at time.Time) error

	// SSH keys and access keys.
	AddSSHKey(ctx context.Context, k *SSHKey) error
	SSHKeyByFingerprint(ctx context.Context, fp string) (*SSHKey, error)
	ListSSHKeys(ctx context.Context, userID int64) ([]SSHKey, error)
	ListAccessKeys(ctx context.Context, repoID int64) ([]SSHKey, error)
	DeleteSSHKey(ctx context.Context, id int64) error
	TouchSSHKey(ctx context.Context, id int64, at time.Time) error

	// Refs generation and ref transactions.
	RepoState(ctx context.Context, repoID int64) (RepoState, error)
	// BeginRefTxn records a prepared ref transaction and bumps the
	// generation, atomically. It returns the transaction's id.
	BeginRefTxn(ctx context.Context, repoID int64, nodeID, instance, updates string) (int64, error)
	// EndRefTxn removes the transaction and bumps the generation; when
	// committed it also sets the repository's PushedAt.
	EndRefTxn(ctx context.Context, txnID int64, committed bool) error
	// BumpGeneration is for ref moves that happen without a hook (HEAD,
	// rename, delete).
	BumpGeneration(ctx context.Context, repoID int64) error
	// PendingRefTxns lists transactions left behind by nodeID (crash
	// recovery at start); "" lists all.
	PendingRefTxns(ctx context.Context, nodeID string) ([]RefTxn, error)
	// ClaimRefTxn leases an abandoned transaction to one reconciler.
	ClaimRefTxn(ctx context.Context, txnID int64, claimer string, lease time.Duration) (bool, error)
	// BeginGitRun records a git process of instance on repoID that may
	// move refs or receive objects, before it starts; EndGitRun forgets
	// it (no error when it is gone); GitRuns lists every recorded one,
	// oldest first. See GitRun.
	BeginGitRun(ctx context.Context, repoID int64, nodeID, instance string) (int64, error)
	EndGitRun(ctx context.Context, id int64) error
	GitRuns(ctx context.Context) ([]GitRun, error)

	// Settings: small named JSON documents (rate limits, host keys, …).
	GetSetting(ctx context.Context, name string) (string, error) // NotFound when unset
	PutSetting(ctx context.Context, name, value string) error
	// PutSettingIfAbsent stores value under name only when name is unset
	// and reports whether it did. Nodes starting at once use it to agree
	// on one value (the SSH host keys): the loser reads the winner's.
	PutSettingIfAbsent(ctx context.Context, name, value string) (bool, error)
}
