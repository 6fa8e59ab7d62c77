package repo

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// RefOrder is the order of a ref listing.
type RefOrder int

const (
	// OrderByName sorts by full ref name.
	OrderByName RefOrder = iota
	// OrderByModification puts the most recently committed tip first
	// (Bitbucket's MODIFICATION: "recently updated branches"), ties by
	// name so that paging is stable.
	OrderByModification
)

// sortFlags are for-each-ref's keys; the last --sort is the primary key.
func (o RefOrder) sortFlags() []string {
	if o == OrderByModification {
		// *committerdate is an annotated tag's target commit; for a
		// branch it is empty and committerdate decides.
		return []string{"--sort=refname", "--sort=-*committerdate", "--sort=-committerdate"}
	}
	return []string{"--sort=refname"}
}

// PathType reports what path is in commit rev: "FILE", "DIRECTORY" or
// "SUBMODULE"; NotFound when rev has no such path. It reads one object's
// header, never the object, so it is cheap for any file size.
func (m *Manager) PathType(ctx context.Context, id int64, rev, path string) (string, error) {
	path, err := cleanPath(path)
	if err != nil {
		return "", err
	}
	dir, err := m.dir(id)
	if err != nil {
		return "", err
	}
	_, typ, _, err := m.treeish(ctx, dir, rev, path)
	switch {
	case err == nil && typ == "tree":
		return "DIRECTORY", nil
	case err == nil && typ == "blob":
		return "FILE", nil
	case err == nil:
		return "", fmt.Errorf("path %q at %q: unexpected object type %q", path, rev, typ)
	case !problem.Is(err, problem.NotFound) || path == "":
		return "", err
	}
	// A submodule's entry names a commit of another repository, which
	// this one does not hold: the lookup above misses it, its parent
	// directory's listing shows it.
	parent, name := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		parent, name = path[:i], path[i+1:]
	}
	entries, terr := m.Tree(ctx, id, rev, parent)
	if terr != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Path == name && e.Type == "SUBMODULE" {
			return "SUBMODULE", nil
		}
	}
	return "", err
}

// AheadBehind counts the commits of tip that base lacks (ahead) and of
// base that tip lacks (behind). Both are commit ids the caller resolved.
func (m *Manager) AheadBehind(ctx context.Context, id int64, base, tip string) (ahead, behind int, err error) {
	if !isHex(base, 40, 64) || !isHex(tip, 40, 64) {
		return 0, 0, problem.New(problem.Invalid, "ahead/behind needs two full commit ids")
	}
	dir, err := m.dir(id)
	if err != nil {
		return 0, 0, err
	}
	out, err := m.output(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: []string{"--left-right", "--count"},
		Args: []string{base + "..." + tip}})
	if err != nil {
		return 0, 0, fmt.Errorf("count ahead/behind: %w", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("count ahead/behind: unexpected output %q", out)
	}
	if behind, err = strconv.Atoi(f[0]); err == nil {
		ahead, err = strconv.Atoi(f[1])
	}
	if err != nil {
		return 0, 0, fmt.Errorf("count ahead/behind: unexpected output %q", out)
	}
	return ahead, behind, nil
}
