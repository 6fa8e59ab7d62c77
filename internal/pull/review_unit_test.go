package pull

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

func TestRefMatchers(t *testing.T) {
	t.Parallel()
	r := &store.Repository{DefaultBranch: "main"}
	for _, tc := range []struct {
		typ, id, ref string
		want         bool
	}{
		{MatchBranch, "main", "refs/heads/main", true},
		{MatchBranch, "refs/heads/main", "refs/heads/main2", false},
		{MatchPattern, "release/*", "refs/heads/release/1.0/fix", true},
		{MatchPattern, "release/*", "refs/heads/main", false},
		{MatchAnyRef, "", "refs/heads/anything", true},
		{MatchModelBranch, "development", "refs/heads/main", true},
		{MatchModelBranch, "Development", "refs/heads/dev", false},
		{MatchModelBranch, "production", "refs/heads/main", false},
		{MatchModelCategory, "feature", "refs/heads/feature/x", true},
		{MatchModelCategory, "BUGFIX", "refs/heads/feature/x", false},
	} {
		m := store.RefMatcher{Type: tc.typ, ID: tc.id}
		if err := ValidRefMatcher(&m); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if got := refMatches(m, r, tc.ref); got != tc.want {
			t.Errorf("%s %q on %s = %v", tc.typ, tc.id, tc.ref, got)
		}
	}
	m := store.RefMatcher{Type: MatchAnyRef, ID: "whatever"}
	if ValidRefMatcher(&m); m.ID != AnyRefID {
		t.Errorf("any-ref id %q", m.ID)
	}
	for _, bad := range []store.RefMatcher{{Type: "TAG", ID: "v1"}, {Type: MatchBranch, ID: "-x"}, {Type: MatchPattern},
		{Type: MatchPattern, ID: "[a"}, {Type: MatchModelBranch, ID: "staging"}, {Type: MatchModelCategory, ID: "chore"}} {
		if err := ValidRefMatcher(&bad); !problem.Is(err, problem.Invalid) {
			t.Errorf("%+v accepted: %v", bad, err)
		}
	}
}

func TestCheckCondition(t *testing.T) {
	t.Parallel()
	anyRef := store.RefMatcher{Type: MatchAnyRef}
	c := &store.ReviewerCondition{Source: anyRef, Target: anyRef, Reviewers: []int64{1, 2, 1}, RequiredApprovals: 2}
	if err := checkCondition(c); err != nil || len(c.Reviewers) != 2 {
		t.Fatalf("duplicates: %v %v", err, c.Reviewers)
	}
	for _, bad := range []store.ReviewerCondition{
		{Source: anyRef, Target: anyRef},
		{Source: anyRef, Target: anyRef, Reviewers: []int64{1}, RequiredApprovals: 2},
		{Source: anyRef, Target: anyRef, Reviewers: []int64{1}, RequiredApprovals: -1},
		{Source: store.RefMatcher{Type: "X"}, Target: anyRef, Reviewers: []int64{1}},
	} {
		if err := checkCondition(&bad); !problem.Is(err, problem.Invalid) {
			t.Errorf("%+v accepted: %v", bad, err)
		}
	}
}

func TestCheckReport(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("A", 40)
	datum := func(title, typ, value string) InsightDatum {
		return InsightDatum{Title: title, Type: typ, Value: json.RawMessage(value)}
	}
	good := []InsightDatum{datum("bugs", "NUMBER", "3"), datum("ok", "BOOLEAN", "true"), datum("cov", "PERCENTAGE", "87.5"),
		datum("site", "LINK", `{"linktext":"x","href":"https://ci.example/1"}`), datum("note", "TEXT", `"fine"`), datum("plain", "", `"x"`)}
	r := &store.InsightReport{CommitSHA: sha, Key: "lint.v2", Title: "Lint", Result: ReportFail, Link: "https://ci.example/r"}
	if err := checkReport(r, good); err != nil {
		t.Fatal(err)
	}
	if r.CommitSHA != strings.ToLower(sha) || !strings.Contains(r.Data, `"bugs"`) {
		t.Fatalf("normalised: %+v", r)
	}
	if got := ReportData(r); len(got) != len(good) || got[3].Type != "LINK" {
		t.Fatalf("data round trip: %+v", got)
	}
	bad := []struct {
		name string
		r    store.InsightReport
		data []InsightDatum
	}{
		{"short sha", store.InsightReport{CommitSHA: "abc", Key: "k", Title: "t"}, nil},
		{"key with slash", store.InsightReport{CommitSHA: sha, Key: "a/b", Title: "t"}, nil},
		{"no title", store.InsightReport{CommitSHA: sha, Key: "k"}, nil},
		{"result", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t", Result: "OK"}, nil},
		{"javascript link", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t", Link: "javascript:alert(1)"}, nil},
		{"relative logo", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t", LogoURL: "/logo.png"}, nil},
		{"seven data", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t"}, append(good, datum("x", "", "1"))},
		{"percentage", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t"}, []InsightDatum{datum("p", "PERCENTAGE", "101")}},
		{"link href", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t"}, []InsightDatum{datum("l", "LINK", `{"href":"data:x"}`)}},
		{"object untyped", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t"}, []InsightDatum{datum("o", "", `{"a":1}`)}},
		{"type", store.InsightReport{CommitSHA: sha, Key: "k", Title: "t"}, []InsightDatum{datum("o", "MONEY", `1`)}},
	}
	for _, tc := range bad {
		if err := checkReport(&tc.r, tc.data); !problem.Is(err, problem.Invalid) {
			t.Errorf("%s accepted: %v", tc.name, err)
		}
	}
}

func TestCheckAnnotation(t *testing.T) {
	t.Parallel()
	ok := store.InsightAnnotation{Path: "a.go", Line: 3, Message: "m", Severity: "HIGH", Type: "BUG", Link: "http://x.example/"}
	if err := checkAnnotation(&ok); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []store.InsightAnnotation{
		{Message: "", Severity: "LOW"},
		{Message: "m", Severity: "CRITICAL"},
		{Message: "m", Severity: "LOW", Type: "STYLE"},
		{Message: "m", Severity: "LOW", Line: 4},
		{Message: "m", Severity: "LOW", Path: "a", Line: -1},
		{Message: "m", Severity: "LOW", Link: "file:///etc/passwd"},
		{Message: "m\x00", Severity: "LOW"},
	} {
		if err := checkAnnotation(&bad); !problem.Is(err, problem.Invalid) {
			t.Errorf("%+v accepted: %v", bad, err)
		}
	}
	f := AnnotationFilter{Severities: []string{"HIGH"}}
	if !f.keep(ok) || f.keep(store.InsightAnnotation{Severity: "LOW"}) {
		t.Error("severity filter")
	}
}
