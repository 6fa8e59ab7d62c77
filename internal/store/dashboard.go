package store

import (
	"context"
	"strings"
)

// Queries for the web dashboard.
//
// "Recently pushed repositories visible to the user" decides visibility in
// SQL, through the grants tables, rather than fetching a bounded set of
// recently pushed candidates and filtering them with auth.Visible. A
// candidate set of any fixed size can be filled entirely by repositories
// the user cannot read (a user with access to three repositories of
// thousands would see an empty dashboard), while the SQL answers exactly,
// in one query, whatever the ratio. The SQL mirrors auth's read rule: a
// public repository or project; or, for an active user, a global ADMIN or
// SYS_ADMIN, any project permission on the repository's project, or any
// repository permission, held directly or through a group. It is a
// narrowing step, not the authority: the web UI still passes each of the
// few rows through auth.Authorize, so were the two ever to disagree the
// dashboard would show less, never more.

// readProjectPerms and readRepoPerms are the grants that include read.
var (
	readProjectPerms = []Permission{PermProjectRead, PermProjectWrite, PermProjectAdmin}
	readRepoPerms    = []Permission{PermRepoRead, PermRepoWrite, PermRepoAdmin}
	adminPerms       = []Permission{PermAdmin, PermSysAdmin}
)

// inList renders perms as a quoted SQL list. They are this package's
// constants, never user input.
func inList(perms []Permission) string {
	q := make([]string, len(perms))
	for i, p := range perms {
		q[i] = "'" + string(p) + "'"
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// readableRepo is the SQL condition "the user may read repository r (of
// project p)"; readableArgs(userID) are its arguments, in order.
var readableRepo = func() string {
	// mine matches a grant row held by the user or one of their groups.
	const mine = "(%s.user_id = ? OR %s.group_id IN (SELECT group_id FROM group_members WHERE user_id = ?))"
	grantee := func(alias string) string { return strings.ReplaceAll(mine, "%s", alias) }
	return `(r.public OR p.public
		OR (EXISTS (SELECT 1 FROM users u WHERE u.id = ? AND u.active) AND (
			EXISTS (SELECT 1 FROM global_permissions g
				WHERE g.permission IN ` + inList(adminPerms) + ` AND ` + grantee("g") + `)
			OR EXISTS (SELECT 1 FROM project_permissions pp
				WHERE pp.project_id = r.project_id AND pp.permission IN ` + inList(readProjectPerms) + ` AND ` + grantee("pp") + `)
			OR EXISTS (SELECT 1 FROM repo_permissions rp
				WHERE rp.repo_id = r.id AND rp.permission IN ` + inList(readRepoPerms) + ` AND ` + grantee("rp") + `))))`
}()

func readableArgs(userID int64) []any {
	return []any{userID, userID, userID, userID, userID, userID, userID}
}

// RecentlyPushedRepos lists up to limit repositories userID may read (0:
// anonymous, public ones only), most recently pushed first; repositories
// never pushed follow, newest first.
func (d *DB) RecentlyPushedRepos(ctx context.Context, userID int64, limit int) ([]Repository, error) {
	limit = max(1, min(limit, 1000))
	query := "SELECT " + repoCols + repoFrom + `
		WHERE ` + readableRepo + `
		ORDER BY (r.pushed_at IS NULL), r.pushed_at DESC, r.created_at DESC, r.id DESC
		LIMIT ?`
	rows, err := d.query(ctx, query, append(readableArgs(userID), limit)...)
	if err != nil {
		return nil, d.fail(err, "list recently pushed repositories")
	}
	return collect(rows, d, "list recently pushed repositories", scanRepo)
}
