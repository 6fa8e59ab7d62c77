package store

import (
	"context"
	"database/sql"

	"github.com/sluice-scm/sluice/internal/problem"
)

const userCols = "id, name, display_name, email, password_hash, active, created_at"

func scanUser(sc interface{ Scan(...any) error }, u *User) error {
	if err := sc.Scan(&u.ID, &u.Name, &u.DisplayName, &u.Email, &u.PasswordHash, &u.Active, &u.CreatedAt); err != nil {
		return err
	}
	u.CreatedAt = u.CreatedAt.UTC()
	return nil
}

// CreateUser inserts u and sets its ID and CreatedAt.
func (d *DB) CreateUser(ctx context.Context, u *User) error {
	if err := ValidateUserName(u.Name); err != nil {
		return err
	}
	created := now()
	err := d.queryRow(ctx, `INSERT INTO users (name, name_key, display_name, email, password_hash, active, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		u.Name, foldName(u.Name), u.DisplayName, u.Email, u.PasswordHash, u.Active, created).Scan(&u.ID)
	if isUnique(err) {
		return problem.New(problem.Conflict, "a user named %q already exists", u.Name)
	}
	if err != nil {
		return d.fail(err, "create user")
	}
	u.CreatedAt = created
	return nil
}

func (d *DB) UserByID(ctx context.Context, id int64) (*User, error) {
	var u User
	err := scanUser(d.queryRow(ctx, "SELECT "+userCols+" FROM users WHERE id = ?", id), &u)
	if err != nil {
		return nil, d.notFound(err, "user by id", "user not found")
	}
	return &u, nil
}

// UserByName finds a user by login, case-insensitively.
func (d *DB) UserByName(ctx context.Context, name string) (*User, error) {
	var u User
	err := scanUser(d.queryRow(ctx, "SELECT "+userCols+" FROM users WHERE name_key = ?", foldName(name)), &u)
	if err != nil {
		return nil, d.notFound(err, "user by name", "user not found")
	}
	return &u, nil
}

// ListUsers lists users whose name, display name or e-mail contains filter
// (case-insensitively), ordered by name.
func (d *DB) ListUsers(ctx context.Context, filter string, p Page) ([]User, error) {
	limit, offset := p.Bounds()
	pat := likeContains(filter)
	rows, err := d.query(ctx, "SELECT "+userCols+` FROM users
		WHERE name_key LIKE ? ESCAPE '\' OR lower(display_name) LIKE ? ESCAPE '\' OR lower(email) LIKE ? ESCAPE '\'
		ORDER BY name_key, id LIMIT ? OFFSET ?`, pat, pat, pat, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list users")
	}
	return collect(rows, d, "list users", scanUser)
}

// UpdateUser writes every field of u but ID and CreatedAt; renaming is
// allowed and keeps case-insensitive uniqueness.
func (d *DB) UpdateUser(ctx context.Context, u *User) error {
	if err := ValidateUserName(u.Name); err != nil {
		return err
	}
	res, err := d.exec(ctx, `UPDATE users SET name = ?, name_key = ?, display_name = ?, email = ?, password_hash = ?, active = ?
		WHERE id = ?`, u.Name, foldName(u.Name), u.DisplayName, u.Email, u.PasswordHash, u.Active, u.ID)
	if isUnique(err) {
		return problem.New(problem.Conflict, "a user named %q already exists", u.Name)
	}
	return d.mustAffect(res, err, "update user", "user not found")
}

// DeleteUser removes the user with their tokens, keys, memberships and
// grants (ON DELETE CASCADE).
func (d *DB) DeleteUser(ctx context.Context, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM users WHERE id = ?", id)
	return d.mustAffect(res, err, "delete user", "user not found")
}

func (d *DB) CountUsers(ctx context.Context) (int, error) {
	var n int
	if err := d.queryRow(ctx, "SELECT count(*) FROM users").Scan(&n); err != nil {
		return 0, d.fail(err, "count users")
	}
	return n, nil
}

// collect scans every row with scan, closing rows.
func collect[T any](rows *sql.Rows, d *DB, op string, scan func(interface{ Scan(...any) error }, *T) error) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, d.fail(err, op)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail(err, op)
	}
	return out, nil
}
