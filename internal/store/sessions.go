package store

import (
	"context"
	"time"

	"github.com/sluice-scm/sluice/internal/problem"
)

// Session is a signed-in web browser. Hash is the SHA-256 of the random id
// in the browser's cookie; the id itself is never stored.
type Session struct {
	Hash       []byte
	UserID     int64
	CSRF       string // the token every form of this session carries
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time
}

// SessionStore keeps web sessions in the database so that every node of a
// cluster serves every browser. *DB implements it next to Store; only the
// web UI needs it.
type SessionStore interface {
	CreateSession(ctx context.Context, s *Session) error
	// SessionByHash finds a session that has not expired at now;
	// NotFound otherwise.
	SessionByHash(ctx context.Context, hash []byte, now time.Time) (*Session, error)
	// TouchSession records activity and slides the expiry.
	TouchSession(ctx context.Context, hash []byte, lastSeen, expires time.Time) error
	DeleteSession(ctx context.Context, hash []byte) error
	// DeleteUserSessions signs a user out everywhere except the session
	// keep (nil: everywhere), after a password change.
	DeleteUserSessions(ctx context.Context, userID int64, keep []byte) error
	// DeleteExpiredSessions removes sessions expired before now and says
	// how many.
	DeleteExpiredSessions(ctx context.Context, now time.Time) (int64, error)
}

var _ SessionStore = (*DB)(nil)

const sessionCols = "hash, user_id, csrf, created_at, last_seen_at, expires_at"

func scanSession(sc interface{ Scan(...any) error }, s *Session) error {
	if err := sc.Scan(&s.Hash, &s.UserID, &s.CSRF, &s.CreatedAt, &s.LastSeenAt, &s.ExpiresAt); err != nil {
		return err
	}
	s.CreatedAt, s.LastSeenAt, s.ExpiresAt = s.CreatedAt.UTC(), s.LastSeenAt.UTC(), s.ExpiresAt.UTC()
	return nil
}

// CreateSession stores s; CreatedAt and LastSeenAt default to now.
func (d *DB) CreateSession(ctx context.Context, s *Session) error {
	switch {
	case len(s.Hash) == 0:
		return problem.New(problem.Invalid, "session hash must not be empty")
	case s.CSRF == "":
		return problem.New(problem.Invalid, "session CSRF token must not be empty")
	case s.ExpiresAt.IsZero():
		return problem.New(problem.Invalid, "session expiry must be set")
	}
	t := now()
	if s.CreatedAt.IsZero() {
		s.CreatedAt = t
	}
	if s.LastSeenAt.IsZero() {
		s.LastSeenAt = t
	}
	s.CreatedAt, s.LastSeenAt, s.ExpiresAt = dbTime(s.CreatedAt), dbTime(s.LastSeenAt), dbTime(s.ExpiresAt)
	_, err := d.exec(ctx, "INSERT INTO web_sessions ("+sessionCols+") VALUES (?, ?, ?, ?, ?, ?)",
		s.Hash, s.UserID, s.CSRF, s.CreatedAt, s.LastSeenAt, s.ExpiresAt)
	switch {
	case isUnique(err):
		return problem.New(problem.Conflict, "session already exists")
	case isForeignKey(err):
		return problem.New(problem.NotFound, "user not found")
	case err != nil:
		return d.fail(err, "create session")
	}
	return nil
}

func (d *DB) SessionByHash(ctx context.Context, hash []byte, at time.Time) (*Session, error) {
	var s Session
	err := scanSession(d.queryRow(ctx, "SELECT "+sessionCols+" FROM web_sessions WHERE hash = ? AND expires_at > ?",
		hash, dbTime(at)), &s)
	if err != nil {
		return nil, d.notFound(err, "session by hash", "session not found")
	}
	return &s, nil
}

func (d *DB) TouchSession(ctx context.Context, hash []byte, lastSeen, expires time.Time) error {
	res, err := d.exec(ctx, "UPDATE web_sessions SET last_seen_at = ?, expires_at = ? WHERE hash = ?",
		dbTime(lastSeen), dbTime(expires), hash)
	return d.mustAffect(res, err, "touch session", "session not found")
}

// DeleteSession removes a session; a missing one is not an error, since
// signing out twice ends in the same state.
func (d *DB) DeleteSession(ctx context.Context, hash []byte) error {
	_, err := d.exec(ctx, "DELETE FROM web_sessions WHERE hash = ?", hash)
	return d.fail(err, "delete session")
}

func (d *DB) DeleteUserSessions(ctx context.Context, userID int64, keep []byte) error {
	var err error
	if keep == nil {
		_, err = d.exec(ctx, "DELETE FROM web_sessions WHERE user_id = ?", userID)
	} else {
		_, err = d.exec(ctx, "DELETE FROM web_sessions WHERE user_id = ? AND hash <> ?", userID, keep)
	}
	return d.fail(err, "delete user sessions")
}

func (d *DB) DeleteExpiredSessions(ctx context.Context, at time.Time) (int64, error) {
	res, err := d.exec(ctx, "DELETE FROM web_sessions WHERE expires_at <= ?", dbTime(at))
	if err != nil {
		return 0, d.fail(err, "delete expired sessions")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, d.fail(err, "delete expired sessions")
	}
	return n, nil
}
