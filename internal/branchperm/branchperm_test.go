package branchperm

import (
	"testing"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestMatchRef(t *testing.T) {
	for _, tc := range []struct {
		pattern, ref string
		want         bool
	}{
		{"main", "refs/heads/main", true},
		{"refs/heads/main", "refs/heads/main", true},
		{"main", "refs/heads/mainline", false},
		{"release/*", "refs/heads/release/1.0", true},
		{"release/*", "refs/heads/release/1.0/hotfix", true},
		{"release/*", "refs/heads/releases/1", false},
		{"*", "refs/heads/anything/at/all", true},
		{"feature-?", "refs/heads/feature-a", true},
		{"feature-?", "refs/heads/feature-ab", false},
		{"refs/tags/v*", "refs/tags/v1", true},
	} {
		if got := MatchRef(tc.pattern, tc.ref); got != tc.want {
			t.Errorf("MatchRef(%q, %q) = %v", tc.pattern, tc.ref, got)
		}
	}
}

func TestValidRestriction(t *testing.T) {
	for _, tc := range []struct {
		r  store.BranchRestriction
		ok bool
		id string
	}{
		{store.BranchRestriction{Type: ReadOnly, MatcherType: MatchBranch, MatcherID: "main"}, true, "refs/heads/main"},
		{store.BranchRestriction{Type: NoDeletes, MatcherType: MatchPattern, MatcherID: "release/*"}, true, "release/*"},
		{store.BranchRestriction{Type: "write-only", MatcherType: MatchBranch, MatcherID: "main"}, false, ""},
		{store.BranchRestriction{Type: ReadOnly, MatcherType: MatchBranch, MatcherID: "-x"}, false, ""},
		{store.BranchRestriction{Type: ReadOnly, MatcherType: MatchPattern, MatcherID: "[a"}, false, ""},
		{store.BranchRestriction{Type: ReadOnly, MatcherType: "REGEX", MatcherID: "a"}, false, ""},
	} {
		r := tc.r
		err := ValidRestriction(&r)
		if (err == nil) != tc.ok || (tc.ok && r.MatcherID != tc.id) {
			t.Errorf("ValidRestriction(%+v) = %v, matcher %q", tc.r, err, r.MatcherID)
		}
	}
}

// TestJudge: every violated restriction is named; exemptions, merges and
// fast-forwards pass where the type allows them.
func TestJudge(t *testing.T) {
	const a, b, zero = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222", "0000000000000000000000000000000000000000"
	rs := []store.BranchRestriction{
		{ID: 1, Type: ReadOnly, MatcherType: MatchBranch, MatcherID: "refs/heads/ro", UserIDs: []int64{7}},
		{ID: 2, Type: NoDeletes, MatcherType: MatchPattern, MatcherID: "keep/*"},
		{ID: 3, Type: FastForwardOnly, MatcherType: MatchPattern, MatcherID: "keep/*", GroupIDs: []int64{9}},
		{ID: 4, Type: PullRequestOnly, MatcherType: MatchBranch, MatcherID: "refs/heads/main"},
	}
	bob := &auth.Principal{UserID: 5, Name: "bob"}
	noGroups := func() []int64 { return nil }
	inGroup := func() []int64 { return []int64{9} }
	ff := func() (bool, error) { return true, nil }
	rewrite := func() (bool, error) { return false, nil }
	for _, tc := range []struct {
		name    string
		p       *auth.Principal
		ch      Change
		viaPull bool
		groups  func() []int64
		isFF    func() (bool, error)
		want    int
	}{
		{"read-only", bob, Change{"refs/heads/ro", a, b}, false, noGroups, ff, 1},
		{"read-only exempt user", &auth.Principal{UserID: 7}, Change{"refs/heads/ro", a, b}, false, noGroups, ff, 0},
		{"delete twice refused", bob, Change{"refs/heads/keep/x", a, zero}, false, noGroups, ff, 2},
		{"rewrite", bob, Change{"refs/heads/keep/x", a, b}, false, noGroups, rewrite, 1},
		{"rewrite by exempt group", bob, Change{"refs/heads/keep/x", a, b}, false, inGroup, rewrite, 0},
		{"fast-forward", bob, Change{"refs/heads/keep/x", a, b}, false, noGroups, ff, 0},
		{"push to pull-request-only", bob, Change{"refs/heads/main", a, b}, false, noGroups, ff, 1},
		{"merge to pull-request-only", bob, Change{"refs/heads/main", a, b}, true, noGroups, ff, 0},
		{"unmatched", nil, Change{"refs/heads/other", a, b}, false, noGroups, rewrite, 0},
	} {
		msgs, err := judge(tc.p, rs, tc.ch, tc.viaPull, tc.groups, tc.isFF)
		if err != nil || len(msgs) != tc.want {
			t.Errorf("%s: %q, %v; want %d messages", tc.name, msgs, err, tc.want)
		}
	}
}
