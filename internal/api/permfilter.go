package api

import (
	"strings"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
)

// permissionFilter reads the permission query parameter of a listing:
// only what the caller holds that permission on is listed. Bitbucket
// takes REPO_READ/WRITE/ADMIN on /repos and PROJECT_READ/WRITE/ADMIN on
// /projects; clients ask for REPO_WRITE to find where they may push, so
// an ignored filter would offer them repositories they cannot use. ok is
// false when the parameter is absent.
func (c *call) permissionFilter(prefix string) (a auth.Action, ok bool, err error) {
	v := c.query("permission")
	if v == "" {
		return 0, false, nil
	}
	level, found := strings.CutPrefix(strings.ToUpper(v), prefix)
	switch {
	case !found:
	case level == "READ":
		return auth.Read, true, nil
	case level == "WRITE":
		return auth.Write, true, nil
	case level == "ADMIN":
		return auth.Admin, true, nil
	}
	return 0, false, problem.New(problem.Invalid, "query parameter permission must be %sREAD, %sWRITE or %sADMIN, not %s", prefix, prefix, prefix, quoteShort(v))
}

// canDo is canSee for any action: denials are answers, failures errors.
func (c *call) canDo(res auth.Resource, a auth.Action) (bool, error) {
	err := c.authorize(res, a)
	switch problem.KindOf(err) {
	case problem.NotFound, problem.Unauthenticated, problem.Forbidden:
		return false, nil
	}
	return err == nil, err
}
