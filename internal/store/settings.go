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
