package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

const tokenCols = "id, user_id, name, hash, scope, created_at, expires_at, last_used_at, revoked_at"

func scanToken(sc interface{ Scan(...any) error }, t *Token) error {
	var scope string
	var exp, used, rev sql.NullTime
	if err := sc.Scan(&t.ID, &t.UserID, &t.Name, &t.Hash, &scope, &t.CreatedAt, &exp, &used, &rev); err != nil {
		return err
	}
	t.Scope = Scope(scope)
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt, t.LastUsedAt, t.RevokedAt = timePtr(exp), timePtr(used), timePtr(rev)
	return nil
}

func validScope(s Scope) bool { return s == ScopeRead || s == ScopeWrite || s == ScopeAdmin }

// CreateToken stores t (its hash, never the secret) and sets ID and
// CreatedAt.
func (d *DB) CreateToken(ctx context.Context, t *Token) error {
	switch {
	case len(t.Hash) == 0:
		return problem.New(problem.Invalid, "token hash must not be empty")
	case !validScope(t.Scope):
		return problem.New(problem.Invalid, "token scope %q must be read, write or admin", t.Scope)
	}
	if err := validateText("token name", t.Name, maxNameLen, true); err != nil {
		return err
	}
	created := now()
	err := d.queryRow(ctx, `INSERT INTO tokens (user_id, name, hash, scope, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
		t.UserID, t.Name, t.Hash, string(t.Scope), created, nullTimePtr(t.ExpiresAt)).Scan(&t.ID)
	switch {
	case isUnique(err):
		return problem.New(problem.Conflict, "token already exists")
	case isForeignKey(err):
		return problem.New(problem.NotFound, "user not found")
	case err != nil:
		return d.fail(err, "create token")
	}
	t.CreatedAt = created
	if t.ExpiresAt != nil {
		e := dbTime(*t.ExpiresAt)
		t.ExpiresAt = &e
	}
	return nil
}

// TokenByHash finds a token by the SHA-256 of its secret, revoked and
// expired ones included: auth checks RevokedAt and ExpiresAt so that it can
// tell the user why.
func (d *DB) TokenByHash(ctx context.Context, hash []byte) (*Token, error) {
	var t Token
	if err := scanToken(d.queryRow(ctx, "SELECT "+tokenCols+" FROM tokens WHERE hash = ?", hash), &t); err != nil {
		return nil, d.notFound(err, "token by hash", "token not found")
	}
	return &t, nil
}

// ListTokens lists a user's tokens, revoked ones included, oldest first.
func (d *DB) ListTokens(ctx context.Context, userID int64) ([]Token, error) {
	rows, err := d.query(ctx, "SELECT "+tokenCols+" FROM tokens WHERE user_id = ? ORDER BY id", userID)
	if err != nil {
		return nil, d.fail(err, "list tokens")
	}
	return collect(rows, d, "list tokens", scanToken)
}

// RevokeToken marks the user's token revoked. Revoking twice keeps the
// first time; another user's token is NotFound.
func (d *DB) RevokeToken(ctx context.Context, userID, tokenID int64) error {
	res, err := d.exec(ctx, "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND user_id = ?",
		now(), tokenID, userID)
	return d.mustAffect(res, err, "revoke token", "token not found")
}

func (d *DB) TouchToken(ctx context.Context, tokenID int64, at time.Time) error {
	res, err := d.exec(ctx, "UPDATE tokens SET last_used_at = ? WHERE id = ?", dbTime(at), tokenID)
	return d.mustAffect(res, err, "touch token", "token not found")
}

const sshKeyCols = "id, user_id, repo_id, scope, label, public_key, fingerprint, created_at, last_used_at"

func scanSSHKey(sc interface{ Scan(...any) error }, k *SSHKey) error {
	var uid, rid sql.NullInt64
	var scope string
	var used sql.NullTime
	if err := sc.Scan(&k.ID, &uid, &rid, &scope, &k.Label, &k.PublicKey, &k.Fingerprint, &k.CreatedAt, &used); err != nil {
		return err
	}
	k.UserID, k.RepoID, k.Scope = uid.Int64, rid.Int64, Scope(scope)
	k.CreatedAt = k.CreatedAt.UTC()
	k.LastUsedAt = timePtr(used)
	return nil
}

// AddSSHKey stores a user key (UserID set, Scope empty) or an access key
// (RepoID set, Scope read or write) and sets ID and CreatedAt. A
// fingerprint is registered once across users and repositories, so a key
// always names one principal.
func (d *DB) AddSSHKey(ctx context.Context, k *SSHKey) error {
	switch {
	case (k.UserID == 0) == (k.RepoID == 0):
		return problem.New(problem.Invalid, "an SSH key belongs to exactly one of a user and a repository")
	case k.RepoID != 0 && k.Scope != ScopeRead && k.Scope != ScopeWrite:
		return problem.New(problem.Invalid, "access key scope %q must be read or write", k.Scope)
	case k.UserID != 0 && k.Scope != "":
		return problem.New(problem.Invalid, "a user's SSH key has no scope")
	case k.Fingerprint == "" || k.PublicKey == "":
		return problem.New(problem.Invalid, "SSH key and fingerprint must not be empty")
	}
	if err := validateText("SSH key label", k.Label, maxNameLen, false); err != nil {
		return err
	}
	if err := validateText("SSH public key", k.PublicKey, 16<<10, true); err != nil {
		return err
	}
	created := now()
	err := d.queryRow(ctx, `INSERT INTO ssh_keys (user_id, repo_id, scope, label, public_key, fingerprint, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		nullID(k.UserID), nullID(k.RepoID), string(k.Scope), k.Label, k.PublicKey, k.Fingerprint, created).Scan(&k.ID)
	switch {
	case isUnique(err):
		return problem.New(problem.Conflict, "this SSH key is already registered")
	case isForeignKey(err) && k.UserID != 0:
		return problem.New(problem.NotFound, "user not found")
	case isForeignKey(err):
		return problem.New(problem.NotFound, "repository not found")
	case err != nil:
		return d.fail(err, "add ssh key")
	}
	k.CreatedAt = created
	return nil
}

func (d *DB) SSHKeyByFingerprint(ctx context.Context, fp string) (*SSHKey, error) {
	var k SSHKey
	if err := scanSSHKey(d.queryRow(ctx, "SELECT "+sshKeyCols+" FROM ssh_keys WHERE fingerprint = ?", fp), &k); err != nil {
		return nil, d.notFound(err, "ssh key by fingerprint", "SSH key not found")
	}
	return &k, nil
}

// ListSSHKeys lists a user's keys, oldest first.
func (d *DB) ListSSHKeys(ctx context.Context, userID int64) ([]SSHKey, error) {
	rows, err := d.query(ctx, "SELECT "+sshKeyCols+" FROM ssh_keys WHERE user_id = ? ORDER BY id", userID)
	if err != nil {
		return nil, d.fail(err, "list ssh keys")
	}
	return collect(rows, d, "list ssh keys", scanSSHKey)
}

// ListAccessKeys lists a repository's access keys, oldest first.
func (d *DB) ListAccessKeys(ctx context.Context, repoID int64) ([]SSHKey, error) {
	rows, err := d.query(ctx, "SELECT "+sshKeyCols+" FROM ssh_keys WHERE repo_id = ? ORDER BY id", repoID)
	if err != nil {
		return nil, d.fail(err, "list access keys")
	}
	return collect(rows, d, "list access keys", scanSSHKey)
}

func (d *DB) DeleteSSHKey(ctx context.Context, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM ssh_keys WHERE id = ?", id)
	return d.mustAffect(res, err, "delete ssh key", "SSH key not found")
}

func (d *DB) TouchSSHKey(ctx context.Context, id int64, at time.Time) error {
	res, err := d.exec(ctx, "UPDATE ssh_keys SET last_used_at = ? WHERE id = ?", dbTime(at), id)
	return d.mustAffect(res, err, "touch ssh key", "SSH key not found")
}
