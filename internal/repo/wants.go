package repo

// Object wants.
//
// git 2.39's protocol v2 upload-pack serves any object its repository (or,
// for a fork, its parent through alternates) holds: it ignores
// uploadpack.allowAnySHA1InWant=false. A caller could then fetch by id a
// commit of a deleted branch, a commit pushed to a parent after it was made
// private, or anything only a hidden ref (refs/pull-requests/*) reaches.
// CheckWants is the server's own version of the check git leaves out: every
// wanted object must be reachable from the refs the caller is shown.
//
// The check is cheap when it can be and bounded when it cannot:
//
//  1. a want equal to a visible ref tip (or a tag's peeled target) passes
//     with no git process at all: the tips are read from packed-refs and
//     the loose ref files, which is how every clone and ordinary fetch
//     looks. A ref read half-way through a concurrent update is only ever
//     missed, never invented, and a missed tip falls through to step 2;
//  2. the others are looked up in the pool of cat-file processes; a missing
//     object is refused like an unreachable one (git says "not our ref"
//     for both, and telling them apart would tell a caller which objects
//     exist in a repository it may not read);
//  3. commits and tags go to one rev-list walk from the wants that stops at
//     history the visible refs reach (with a commit-graph, a handful of
//     commits for anything on or near a branch);
//  4. trees and blobs (a partial clone fetching what it filtered out) go to
//     an object walk with bitmaps that subtracts what the visible refs
//     reach; a bitmap answer is exact, and without bitmaps git may leave a
//     reachable object in the answer (it walks only the tip commits' trees
//     of the uninteresting side), so the objects still unproven are looked
//     for in a full walk of the objects the visible refs reach, which stops
//     as soon as it has seen them all.
//
// Every walk runs under WantCheckTimeout; a want not proven reachable in
// time is refused, not served.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/problem"
)

// DefaultWantCheckTimeout bounds the walks that prove wants reachable. A
// full object walk of a repository the size of git.git takes a few seconds
// on one core; a request that needs longer is refused rather than allowed to
// hold a CPU.
const DefaultWantCheckTimeout = 20 * time.Second

// NotOurRef is the error for a want the caller may not fetch. Its message
// is git's own ("upload-pack: not our ref <oid>"), which the transports
// send as an ERR pkt-line that the client prints.
func NotOurRef(oid string) error {
	return problem.New(problem.Forbidden, "upload-pack: not our ref %s", oid)
}

// SetWantCheckTimeout changes the bound on CheckWants' walks (0: the
// default).
func (m *Manager) SetWantCheckTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultWantCheckTimeout
	}
	m.wantTimeout = d
}

func (m *Manager) wantCheckTimeout() time.Duration {
	if m.wantTimeout <= 0 {
		return DefaultWantCheckTimeout
	}
	return m.wantTimeout
}

// hiddenExcludes are the rev-list flags that leave the hidden refs out of a
// following --all.
func hiddenExcludes() []string {
	var f []string
	for _, p := range gitcmd.HiddenRefs {
		f = append(f, "--exclude="+p+"/*")
	}
	return f
}

// visible says whether a full ref name is one clients are shown.
func visible(ref string) bool {
	for _, p := range gitcmd.HiddenRefs {
		if ref == p || strings.HasPrefix(ref, p+"/") {
			return false
		}
	}
	return true
}

// CheckWants returns nil when every object id in wants is reachable from
// the visible refs of repository id, and a NotOurRef error naming the first
// one that is not (or that does not exist). wants must be object ids; the
// transports' parser (pktline) guarantees it.
func (m *Manager) CheckWants(ctx context.Context, id int64, wants []string) error {
	if len(wants) == 0 {
		return nil
	}
	dir, err := m.dir(id)
	if err != nil {
		return err
	}
	for _, w := range wants {
		if !validOID(w) {
			return NotOurRef(w)
		}
	}
	tips := readTips(dir)
	var rest []string
	seen := make(map[string]bool, len(wants))
	for _, w := range wants {
		if !tips[w] && !seen[w] {
			seen[w] = true
			rest = append(rest, w)
		}
	}
	if len(rest) == 0 {
		m.wantChecks("tip")
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, m.wantCheckTimeout(), errWantTimeout)
	defer cancel()
	var commits, objects []string
	for _, w := range rest {
		_, typ, _, found, err := m.object(ctx, dir, w)
		if err != nil {
			return m.wantError(ctx, w, err)
		}
		if !found {
			m.wantChecks("missing")
			return NotOurRef(w)
		}
		switch typ {
		case "commit", "tag":
			commits = append(commits, w)
		default:
			objects = append(objects, w)
		}
	}
	if len(commits) > 0 {
		if bad, err := m.unreachableCommit(ctx, dir, commits); err != nil {
			return m.wantError(ctx, commits[0], err)
		} else if bad != "" {
			m.wantChecks("unreachable")
			return NotOurRef(bad)
		}
	}
	if len(objects) > 0 {
		if bad, err := m.unreachableObject(ctx, dir, objects); err != nil {
			return m.wantError(ctx, objects[0], err)
		} else if bad != "" {
			m.wantChecks("unreachable")
			return NotOurRef(bad)
		}
	}
	m.wantChecks("walked")
	return nil
}

var errWantTimeout = errors.New("want check timed out")

// wantError refuses w when its check failed: a walk that ran out of time
// proves nothing, and neither does a git failure.
func (m *Manager) wantError(ctx context.Context, w string, err error) error {
	if errors.Is(context.Cause(ctx), errWantTimeout) {
		m.logger.Warn("want check timed out; refusing the want", "oid", w, "timeout", m.wantCheckTimeout())
		m.wantChecks("timeout")
		return NotOurRef(w)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	m.logger.Error("want check failed; refusing the want", "oid", w, "err", err)
	m.wantChecks("error")
	return NotOurRef(w)
}

func (m *Manager) wantChecks(outcome string) {
	if m.onWantCheck != nil {
		m.onWantCheck(outcome)
	}
}

// OnWantCheck registers a counter of CheckWants outcomes ("tip", "walked",
// "missing", "unreachable", "timeout", "error"), for metrics.
func (m *Manager) OnWantCheck(fn func(outcome string)) { m.onWantCheck = fn }

// unreachableCommit returns a commit (or tag) of wants that the visible refs
// do not reach, or "". rev-list lists what the wants reach and the refs do
// not; an unreachable want is always among that, and usually first (newest
// first), so the walk stops at the first line that is a want.
func (m *Manager) unreachableCommit(ctx context.Context, dir string, wants []string) (string, error) {
	set := make(map[string]bool, len(wants))
	for _, w := range wants {
		set[w] = true
	}
	flags := append([]string{"--not"}, hiddenExcludes()...)
	flags = append(flags, "--all", "--not")
	var bad, first string
	err := m.scanLines(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: flags, Args: wants}, func(line string) bool {
		if first == "" {
			first = line
		}
		if set[line] {
			bad = line
			return false
		}
		return true
	})
	if err != nil {
		return "", err
	}
	if bad == "" && first != "" {
		// Some want reaches unreachable history, and rev-list always
		// lists a want it prints history for, so this is not reached;
		// refuse all the same rather than serve.
		bad = wants[0]
	}
	return bad, nil
}

// unreachableObject returns a tree or blob of wants that the visible refs do
// not reach, or "".
func (m *Manager) unreachableObject(ctx context.Context, dir string, wants []string) (string, error) {
	flags := []string{"--objects", "--no-object-names", "--use-bitmap-index", "--not"}
	flags = append(flags, hiddenExcludes()...)
	flags = append(flags, "--all", "--not")
	left := make(map[string]bool, len(wants))
	for _, w := range wants {
		left[w] = true
	}
	unproven := map[string]bool{}
	err := m.scanLines(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: flags, Args: wants}, func(line string) bool {
		if left[line] {
			unproven[line] = true
		}
		return true
	})
	if err != nil {
		return "", err
	}
	if len(unproven) == 0 {
		return "", nil
	}
	full := append([]string{"--objects", "--no-object-names"}, hiddenExcludes()...)
	full = append(full, "--all")
	err = m.scanLines(ctx, gitcmd.Cmd{Dir: dir, Name: "rev-list", Flags: full}, func(line string) bool {
		delete(unproven, line)
		return len(unproven) > 0
	})
	if err != nil {
		return "", err
	}
	for _, w := range wants {
		if unproven[w] {
			return w, nil
		}
	}
	return "", nil
}

// readTips returns the object ids the visible refs of the repository at dir
// point at, with annotated tags' peeled targets, read from the ref files
// without starting git. Anything unreadable is left out: a tip missing here
// only sends its want down the slower path.
func readTips(dir string) map[string]bool {
	refs, peeled, _ := ReadRefFiles(dir, func(ref string) bool { return visible(strings.TrimSuffix(ref, "/")) })
	tips := make(map[string]bool, len(refs)+len(peeled))
	for _, oid := range refs {
		tips[oid] = true
	}
	for _, oid := range peeled {
		tips[oid] = true
	}
	return tips
}
