package store

import (
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

// hostile are values every validator rejects.
var hostile = []string{
	"", ".", "..", "../../etc", "..%2F..", "a/b", `a\b`, "-rf", "--upload-pack=x",
	"a\x00b", "a\nb", "a\rb", "a\tb", "a\x7fb", "a..b", "100%", "\xff\xfe",
}

func TestNamesRejectHostile(t *testing.T) {
	validators := map[string]func(string) error{
		"ValidateProjectKey": ValidateProjectKey,
		"ValidateRepoName":   ValidateRepoName,
		"ValidateSlug":       ValidateSlug,
		"ValidateUserName":   ValidateUserName,
		"ValidateGroupName":  ValidateGroupName,
		// Branch names legitimately hold '/' and '%'.
		"ValidateBranchName": func(v string) error {
			if strings.ContainsAny(v, "/%") {
				return problem.New(problem.Invalid, "skip")
			}
			return ValidateBranchName(v)
		},
	}
	for name, validate := range validators {
		for _, v := range hostile {
			err := validate(v)
			if !problem.Is(err, problem.Invalid) {
				t.Errorf("%s(%q) = %v, want Invalid", name, v, err)
				continue
			}
			// The message is for users: it names the field and never
			// carries a raw control character.
			msg := problem.Message(err)
			if strings.ContainsAny(msg, "\x00\r\n") {
				t.Errorf("%s(%q): message holds control characters: %q", name, v, msg)
			}
		}
	}
}

func TestValidateProjectKey(t *testing.T) {
	tests := []struct {
		key  string
		ok   bool
		rule string
	}{
		{"PROJ", true, ""},
		{"proj", true, ""},
		{"A", true, ""},
		{"A_1_B2", true, ""},
		{strings.Repeat("K", 128), true, ""},
		{strings.Repeat("K", 129), false, "at most 128"},
		{"1ABC", false, "begin with a letter"},
		{"_ABC", false, "begin with a letter"},
		{"AB-C", false, "letters, digits and '_'"},
		{"AB C", false, "letters, digits and '_'"},
		{"ÄBC", false, "begin with a letter"},
		{"~USER", true, ""},
		{"~alice.smith-2", true, ""},
		{"~", false, "personal project key"},
		{"~.a", false, "personal project key"},
		{"~a~b", false, "personal project key"},
		{"~a@b", false, "personal project key"},
		{"~a/b", false, "must not contain"},
		{"a~b", false, "letters, digits and '_'"},
		{"A~", false, "letters, digits and '_'"},
		{"~~A", false, "personal project key"},
		{"", false, "must not be empty"},
	}
	for _, tc := range tests {
		err := ValidateProjectKey(tc.key)
		check(t, "project key", tc.key, err, tc.ok, tc.rule)
	}
}

func TestValidateSlug(t *testing.T) {
	tests := []struct {
		slug string
		ok   bool
		rule string
	}{
		{"repo", true, ""},
		{"my-repo_2.0", true, ""},
		{"a", true, ""},
		{"git", true, ""},
		{strings.Repeat("s", 128), true, ""},
		{strings.Repeat("s", 129), false, "at most 128"},
		{"Repo", false, "lower-case"},
		{"my repo", false, "lower-case"},
		{".hidden", false, "begin with '.'"},
		{"trailing.", false, "end with '.'"},
		{"repo.git", false, "'.git'"},
		{"-rf", false, "begin with '-'"},
		{"a..b", false, "'..'"},
		{"rest", false, "reserved"},
		{"scm", false, "reserved"},
		{".", false, "reserved"},
		{"..", false, "reserved"},
		{"ünï", false, "lower-case"},
	}
	for _, tc := range tests {
		check(t, "repository slug", tc.slug, ValidateSlug(tc.slug), tc.ok, tc.rule)
	}
}

func TestValidateRepoName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
		rule string
	}{
		{"My Repo", true, ""},
		{"lib.core_2-x", true, ""},
		{"Ünïcode Repo", true, ""}, // slug "code-repo"
		{strings.Repeat("n", 255), true, ""},
		{strings.Repeat("n", 256), false, "at most 255"},
		{" padded", false, "begin or end with a space"},
		{"a:b", false, "letters, digits, spaces"},
		{"x.git", true, ""}, // slug "x"
		{".git", false, "begin with '.'"},
		{"rest", false, "valid slug"},
		{"ÄÖÜ", false, "valid slug"}, // slug would be empty
		{"a/b", false, "'/'"},
	}
	for _, tc := range tests {
		check(t, "repository name", tc.name, ValidateRepoName(tc.name), tc.ok, tc.rule)
	}
}

func TestSlugify(t *testing.T) {
	tests := []struct{ in, want string }{
		{"My Repo", "my-repo"},
		{"lib.core_2-X", "lib.core_2-x"},
		{"  spaced  out ", "spaced--out-"},
		{"-rf", "rf"},
		{"..hidden", "hidden"},
		{"a...b", "a.b"},
		{"../../etc/passwd", "etcpasswd"},
		{"..%2F..", "2f"},
		{"repo.git", "repo"},
		{"repo.git.git", "repo"},
		{"trailing...", "trailing"},
		{"Ünïcode", "ncode"},
		{"a\x00b\nc", "abc"},
		{"ÄÖÜ", ""},
		{strings.Repeat("ab", 100), strings.Repeat("ab", 64)},
		{strings.Repeat("a", 127) + ".git", strings.Repeat("a", 127)},
	}
	for _, tc := range tests {
		if got := Slugify(tc.in); got != tc.want {
			t.Errorf("Slugify(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSlugifyMakesValidSlugs: whatever Slugify returns that is non-empty
// and not reserved passes ValidateSlug.
func TestSlugifyMakesValidSlugs(t *testing.T) {
	for _, in := range append(hostile, "My Repo", "-.-.x", ".git", "a.git.", "x . git", strings.Repeat(".-", 100)) {
		s := Slugify(in)
		if s == "" || reservedSlugs[s] {
			continue
		}
		if err := ValidateSlug(s); err != nil {
			t.Errorf("Slugify(%q) = %q, invalid: %v", in, s, err)
		}
	}
}

func TestValidateUserName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
		rule string
	}{
		{"alice", true, ""},
		{"Alice.Smith", true, ""},
		{"ci-bot_2", true, ""},
		{"alice+ci@example.com", true, ""},
		{"admin", true, ""},
		{"zoë", true, ""},
		{strings.Repeat("u", 255), true, ""},
		{strings.Repeat("u", 256), false, "at most 255"},
		{".alice", false, "begin with '.'"},
		{"al ice", false, "letters, digits"},
		{"al:ice", false, "letters, digits"},
		{"-alice", false, "begin with '-'"},
	}
	for _, tc := range tests {
		check(t, "user name", tc.name, ValidateUserName(tc.name), tc.ok, tc.rule)
	}
}

func TestValidateGroupName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
		rule string
	}{
		{"developers", true, ""},
		{"Project Leads", true, ""},
		{"stash-users", true, ""},
		{" leads", false, "begin or end with a space"},
		{"leads ", false, "begin or end with a space"},
		{strings.Repeat("g", 256), false, "at most 255"},
	}
	for _, tc := range tests {
		check(t, "group name", tc.name, ValidateGroupName(tc.name), tc.ok, tc.rule)
	}
}

func TestValidateBranchName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"main", true},
		{"release/1.0", true},
		{"feature/x-y_z", true},
		{"HEAD", false},
		{"@", false},
		{"a@{b", false},
		{"/main", false},
		{"main/", false},
		{"a//b", false},
		{"a.lock", false},
		{"a/.b", false},
		{"a b", false},
		{"a~b", false},
		{"a^b", false},
		{"a:b", false},
		{"a?b", false},
		{"a*b", false},
		{"a[b", false},
		{"main.", false},
		// gitref's rules, shared with the push path (issue 14): the store
		// used to accept these while repo and hooks refused them.
		{"feature/-x", false},
		{"a/@", false},
		{"\xff", false},
		{"a\u0085b", false},
	}
	for _, tc := range tests {
		check(t, "branch name", tc.name, ValidateBranchName(tc.name), tc.ok, "")
	}
}

func check(t *testing.T, field, v string, err error, ok bool, rule string) {
	t.Helper()
	if ok {
		if err != nil {
			t.Errorf("%s %q: unexpected error %v", field, v, err)
		}
		return
	}
	if !problem.Is(err, problem.Invalid) {
		t.Errorf("%s %q: got %v, want Invalid", field, v, err)
		return
	}
	msg := problem.Message(err)
	if !strings.HasPrefix(msg, field) {
		t.Errorf("%s %q: message %q does not name the field", field, v, msg)
	}
	if rule != "" && !strings.Contains(msg, rule) {
		t.Errorf("%s %q: message %q does not state the rule %q", field, v, msg, rule)
	}
}

func TestPageBounds(t *testing.T) {
	tests := []struct {
		p             Page
		limit, offset int
	}{
		{Page{}, 25, 0},
		{Page{Limit: -1}, 25, 0},
		{Page{Start: 10, Limit: 5}, 5, 10},
		{Page{Start: -3, Limit: 1000}, 1000, 0},
		{Page{Limit: 1001}, 1000, 0},
		{Page{Limit: 1 << 40}, 1000, 0},
	}
	for _, tc := range tests {
		l, o := tc.p.Bounds()
		if l != tc.limit || o != tc.offset {
			t.Errorf("%+v.Bounds() = %d, %d; want %d, %d", tc.p, l, o, tc.limit, tc.offset)
		}
	}
}

func TestRebind(t *testing.T) {
	pg := &DB{dialect: "postgres"}
	lite := &DB{dialect: "sqlite"}
	tests := []struct{ in, pg string }{
		{"SELECT 1", "SELECT 1"},
		{"a = ? AND b = ?", "a = $1 AND b = $2"},
		{`x LIKE ? ESCAPE '\' OR y = '?' OR z = ?`, `x LIKE $1 ESCAPE '\' OR y = '?' OR z = $2`},
		{strings.Repeat("?,", 11) + "?", "$1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12"},
	}
	for _, tc := range tests {
		if got := pg.q(tc.in); got != tc.pg {
			t.Errorf("postgres q(%q) = %q, want %q", tc.in, got, tc.pg)
		}
		if got := lite.q(tc.in); got != tc.in {
			t.Errorf("sqlite q(%q) = %q, want it unchanged", tc.in, got)
		}
	}
}
