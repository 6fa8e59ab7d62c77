package store

import (
	"context"
	"database/sql"
	"slices"

	"github.com/sluice-scm/sluice/internal/problem"
)

// Three grant tables, one per resource level, share this code: resCol is
// the resource column ("" for global), resID its value.
type grantTable struct {
	table  string
	resCol string
	what   string // for messages: "project", "repository"
	valid  map[Permission]bool
}

var (
	globalGrants = grantTable{table: "global_permissions",
		valid: map[Permission]bool{PermSysAdmin: true, PermAdmin: true, PermProjectCreate: true}}
	projectGrants = grantTable{table: "project_permissions", resCol: "project_id", what: "project",
		valid: map[Permission]bool{PermProjectRead: true, PermProjectWrite: true, PermProjectAdmin: true}}
	repoGrants = grantTable{table: "repo_permissions", resCol: "repo_id", what: "repository",
		valid: map[Permission]bool{PermRepoRead: true, PermRepoWrite: true, PermRepoAdmin: true}}
)

func checkGrantee(userID, groupID int64) error {
	if (userID == 0) == (groupID == 0) {
		return problem.New(problem.Invalid, "a permission goes to exactly one of a user and a group")
	}
	return nil
}

// set upserts g: the partial unique indexes (one for user grants, one for
// group grants) are the conflict targets, so a second Set replaces.
func (d *DB) setGrant(ctx context.Context, t grantTable, resID int64, g Grant) error {
	if err := checkGrantee(g.UserID, g.GroupID); err != nil {
		return err
	}
	if !t.valid[g.Permission] {
		level := t.what
		if level == "" {
			level = "global"
		}
		return problem.New(problem.Invalid, "permission %q is not a %s permission", g.Permission, level)
	}
	cols, vals, args := "", "", []any{}
	if t.resCol != "" {
		cols, vals, args = t.resCol+", ", "?, ", append(args, resID)
	}
	granteeCol := "user_id"
	if g.GroupID != 0 {
		granteeCol = "group_id"
	}
	target := granteeCol
	if t.resCol != "" {
		target = t.resCol + ", " + granteeCol
	}
	args = append(args, nullID(g.UserID), nullID(g.GroupID), string(g.Permission))
	_, err := d.exec(ctx, "INSERT INTO "+t.table+" ("+cols+"user_id, group_id, permission) VALUES ("+vals+"?, ?, ?)"+
		" ON CONFLICT ("+target+") WHERE "+granteeCol+" IS NOT NULL DO UPDATE SET permission = excluded.permission", args...)
	if isForeignKey(err) {
		return d.missingGrantRef(ctx, t, resID, g)
	}
	return d.fail(err, "set "+t.table)
}

// missingGrantRef names what a foreign key violation on a grant was about.
func (d *DB) missingGrantRef(ctx context.Context, t grantTable, resID int64, g Grant) error {
	exists := func(table string, id int64) bool {
		var one int
		err := d.queryRow(ctx, "SELECT 1 FROM "+table+" WHERE id = ?", id).Scan(&one)
		return err == nil
	}
	switch {
	case g.UserID != 0 && !exists("users", g.UserID):
		return problem.New(problem.NotFound, "user not found")
	case g.GroupID != 0 && !exists("groups", g.GroupID):
		return problem.New(problem.NotFound, "group not found")
	default:
		return problem.New(problem.NotFound, "%s not found", t.what)
	}
}

// revokeGrant removes a grant; revoking one that does not exist is not an
// error (the caller's wish, "no grant", holds).
func (d *DB) revokeGrant(ctx context.Context, t grantTable, resID, userID, groupID int64) error {
	if err := checkGrantee(userID, groupID); err != nil {
		return err
	}
	where, args := "", []any{}
	if t.resCol != "" {
		where, args = t.resCol+" = ? AND ", append(args, resID)
	}
	if userID != 0 {
		where, args = where+"user_id = ?", append(args, userID)
	} else {
		where, args = where+"group_id = ?", append(args, groupID)
	}
	_, err := d.exec(ctx, "DELETE FROM "+t.table+" WHERE "+where, args...)
	return d.fail(err, "revoke "+t.table)
}

// listGrants lists a resource's grants, users first, each part ordered by
// name.
func (d *DB) listGrants(ctx context.Context, t grantTable, resID int64) ([]Grant, error) {
	where, args := "", []any{}
	if t.resCol != "" {
		where, args = "WHERE x."+t.resCol+" = ? ", append(args, resID)
	}
	rows, err := d.query(ctx, `SELECT x.user_id, x.group_id, u.name, g.name, x.permission FROM `+t.table+` x
		LEFT JOIN users u ON u.id = x.user_id LEFT JOIN groups g ON g.id = x.group_id `+where+`
		ORDER BY CASE WHEN x.user_id IS NULL THEN 1 ELSE 0 END, COALESCE(u.name_key, g.name_key), x.id`, args...)
	if err != nil {
		return nil, d.fail(err, "list "+t.table)
	}
	return collect(rows, d, "list "+t.table, func(sc interface{ Scan(...any) error }, g *Grant) error {
		var uid, gid sql.NullInt64
		var uname, gname sql.NullString
		var perm string
		if err := sc.Scan(&uid, &gid, &uname, &gname, &perm); err != nil {
			return err
		}
		*g = Grant{UserID: uid.Int64, GroupID: gid.Int64, UserName: uname.String, GroupName: gname.String, Permission: Permission(perm)}
		return nil
	})
}

// SetGlobalPermission gives g's grantee one global permission, replacing
// the one it had.
func (d *DB) SetGlobalPermission(ctx context.Context, g Grant) error {
	return d.setGrant(ctx, globalGrants, 0, g)
}

func (d *DB) RevokeGlobalPermission(ctx context.Context, userID, groupID int64) error {
	return d.revokeGrant(ctx, globalGrants, 0, userID, groupID)
}

func (d *DB) GlobalGrants(ctx context.Context) ([]Grant, error) {
	return d.listGrants(ctx, globalGrants, 0)
}

func (d *DB) SetProjectPermission(ctx context.Context, projectID int64, g Grant) error {
	return d.setGrant(ctx, projectGrants, projectID, g)
}

func (d *DB) RevokeProjectPermission(ctx context.Context, projectID, userID, groupID int64) error {
	return d.revokeGrant(ctx, projectGrants, projectID, userID, groupID)
}

func (d *DB) ProjectGrants(ctx context.Context, projectID int64) ([]Grant, error) {
	return d.listGrants(ctx, projectGrants, projectID)
}

func (d *DB) SetRepoPermission(ctx context.Context, repoID int64, g Grant) error {
	return d.setGrant(ctx, repoGrants, repoID, g)
}

func (d *DB) RevokeRepoPermission(ctx context.Context, repoID, userID, groupID int64) error {
	return d.revokeGrant(ctx, repoGrants, repoID, userID, groupID)
}

func (d *DB) RepoGrants(ctx context.Context, repoID int64) ([]Grant, error) {
	return d.listGrants(ctx, repoGrants, repoID)
}

// effectiveGrantsSQL collects, in one round trip, the user's own grants and
// those of their groups at the three levels; the first column says which.
// It does not look at users.active: auth decides what an inactive account
// may do.
const effectiveGrantsSQL = `
SELECT 0, permission FROM global_permissions
 WHERE user_id = ? OR group_id IN (SELECT group_id FROM group_members WHERE user_id = ?)
UNION ALL
SELECT 1, permission FROM project_permissions
 WHERE project_id = ? AND (user_id = ? OR group_id IN (SELECT group_id FROM group_members WHERE user_id = ?))
UNION ALL
SELECT 2, permission FROM repo_permissions
 WHERE repo_id = ? AND (user_id = ? OR group_id IN (SELECT group_id FROM group_members WHERE user_id = ?))`

// EffectiveGrants returns the permissions userID holds globally, on
// projectID and on repoID, directly or through groups, each list without
// duplicates in a stable order. A zero projectID or repoID matches nothing.
func (d *DB) EffectiveGrants(ctx context.Context, userID, projectID, repoID int64) (global, project, repo []Permission, err error) {
	if userID == 0 {
		return nil, nil, nil, nil
	}
	rows, err := d.query(ctx, effectiveGrantsSQL, userID, userID, projectID, userID, userID, repoID, userID, userID)
	if err != nil {
		return nil, nil, nil, d.fail(err, "effective grants")
	}
	defer rows.Close()
	var lists [3][]Permission
	for rows.Next() {
		var level int
		var p string
		if err := rows.Scan(&level, &p); err != nil {
			return nil, nil, nil, d.fail(err, "effective grants")
		}
		if level < 0 || level > 2 {
			continue
		}
		lists[level] = append(lists[level], Permission(p))
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, d.fail(err, "effective grants")
	}
	return dedupe(lists[0]), dedupe(lists[1]), dedupe(lists[2]), nil
}

// dedupe sorts ps by permission name and drops repeats.
func dedupe(ps []Permission) []Permission {
	if len(ps) == 0 {
		return nil
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}
