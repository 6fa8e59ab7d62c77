package store

import (
	"context"

	"github.com/sluice-scm/sluice/internal/problem"
)

func scanGroup(sc interface{ Scan(...any) error }, g *Group) error {
	return sc.Scan(&g.ID, &g.Name)
}

// CreateGroup inserts g and sets its ID. Names are unique
// case-insensitively, like user names.
func (d *DB) CreateGroup(ctx context.Context, g *Group) error {
	if err := ValidateGroupName(g.Name); err != nil {
		return err
	}
	err := d.queryRow(ctx, "INSERT INTO groups (name, name_key) VALUES (?, ?) RETURNING id", g.Name, foldName(g.Name)).Scan(&g.ID)
	if isUnique(err) {
		return problem.New(problem.Conflict, "a group named %q already exists", g.Name)
	}
	return d.fail(err, "create group")
}

func (d *DB) GroupByName(ctx context.Context, name string) (*Group, error) {
	var g Group
	if err := scanGroup(d.queryRow(ctx, "SELECT id, name FROM groups WHERE name_key = ?", foldName(name)), &g); err != nil {
		return nil, d.notFound(err, "group by name", "group not found")
	}
	return &g, nil
}

// ListGroups lists groups whose name contains filter, ordered by name.
func (d *DB) ListGroups(ctx context.Context, filter string, p Page) ([]Group, error) {
	limit, offset := p.Bounds()
	rows, err := d.query(ctx, `SELECT id, name FROM groups WHERE name_key LIKE ? ESCAPE '\'
		ORDER BY name_key, id LIMIT ? OFFSET ?`, likeContains(filter), limit, offset)
	if err != nil {
		return nil, d.fail(err, "list groups")
	}
	return collect(rows, d, "list groups", scanGroup)
}

// DeleteGroup removes the group with its memberships and grants.
func (d *DB) DeleteGroup(ctx context.Context, id int64) error {
	res, err := d.exec(ctx, "DELETE FROM groups WHERE id = ?", id)
	return d.mustAffect(res, err, "delete group", "group not found")
}

// AddGroupMember adds userID to groupID; adding a member twice is not an
// error.
func (d *DB) AddGroupMember(ctx context.Context, groupID, userID int64) error {
	_, err := d.exec(ctx, "INSERT INTO group_members (group_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING", groupID, userID)
	if isForeignKey(err) {
		if _, uerr := d.UserByID(ctx, userID); uerr != nil {
			return uerr
		}
		return problem.New(problem.NotFound, "group not found")
	}
	return d.fail(err, "add group member")
}

// RemoveGroupMember removes userID from groupID; NotFound when they were
// not a member.
func (d *DB) RemoveGroupMember(ctx context.Context, groupID, userID int64) error {
	res, err := d.exec(ctx, "DELETE FROM group_members WHERE group_id = ? AND user_id = ?", groupID, userID)
	return d.mustAffect(res, err, "remove group member", "group member not found")
}

// GroupMembers lists a group's users ordered by name.
func (d *DB) GroupMembers(ctx context.Context, groupID int64) ([]User, error) {
	rows, err := d.query(ctx, `SELECT u.id, u.name, u.display_name, u.email, u.password_hash, u.active, u.created_at
		FROM users u JOIN group_members m ON m.user_id = u.id WHERE m.group_id = ? ORDER BY u.name_key, u.id`, groupID)
	if err != nil {
		return nil, d.fail(err, "group members")
	}
	return collect(rows, d, "group members", scanUser)
}

// UserGroups lists the groups userID belongs to, ordered by name.
func (d *DB) UserGroups(ctx context.Context, userID int64) ([]Group, error) {
	rows, err := d.query(ctx, `SELECT g.id, g.name FROM groups g JOIN group_members m ON m.group_id = g.id
		WHERE m.user_id = ? ORDER BY g.name_key, g.id`, userID)
	if err != nil {
		return nil, d.fail(err, "user groups")
	}
	return collect(rows, d, "user groups", scanGroup)
}
