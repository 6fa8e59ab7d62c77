package store

import (
	"context"

	"github.com/sluice-scm/sluice/internal/problem"
)

// GetSetting returns the value stored under name; NotFound when unset.
func (d *DB) GetSetting(ctx context.Context, name string) (string, error) {
	var v string
	if err := d.queryRow(ctx, "SELECT value FROM settings WHERE name = ?", name).Scan(&v); err != nil {
		return "", d.notFound(err, "get setting", "setting "+quoteShort(name)+" not found")
	}
	return v, nil
}

// PutSetting stores value under name, replacing what was there.
func (d *DB) PutSetting(ctx context.Context, name, value string) error {
	if name == "" {
		return problem.New(problem.Invalid, "setting name must not be empty")
	}
	_, err := d.exec(ctx, `INSERT INTO settings (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value)
	return d.fail(err, "put setting")
}

// PutSettingIfAbsent stores value under name unless name is already set,
// and reports whether it stored it. ON CONFLICT DO NOTHING makes the check
// and the insert one statement, so concurrent callers cannot both win.
func (d *DB) PutSettingIfAbsent(ctx context.Context, name, value string) (bool, error) {
	if name == "" {
		return false, problem.New(problem.Invalid, "setting name must not be empty")
	}
	res, err := d.exec(ctx, `INSERT INTO settings (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO NOTHING`, name, value)
	if err != nil {
		return false, d.fail(err, "put setting if absent")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, d.fail(err, "put setting if absent")
	}
	return n == 1, nil
}
