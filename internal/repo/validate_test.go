package repo

import (
	"io"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"/", "", true},
		{"a", "a", true},
		{"a/b/", "a/b", true},
		{"-dash", "-dash", true},
		{"with space/x", "with space/x", true},
		{":(top)x", ":(top)x", true}, // literal: gitcmd sets GIT_LITERAL_PATHSPECS
		{"..", "", false},
		{"../etc/passwd", "", false},
		{"a/../../b", "", false},
		{"a/..", "", false},
		{"./a", "", false},
		{"a/./b", "", false},
		{"/etc/passwd", "", false},
		{"a//b", "", false},
		{"a\x00b", "", false},
		{"a\nb", "", false},
		{"a\rb", "", false},
		{strings.Repeat("a", maxPathLen+1), "", false},
	}
	for _, tt := range tests {
		got, err := cleanPath(tt.in)
		if tt.ok && (err != nil || got != tt.want) {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
		if !tt.ok && !problem.Is(err, problem.Invalid) {
			t.Errorf("cleanPath(%q) = %q, %v; want Invalid", tt.in, got, err)
		}
	}
}

func TestCleanPrefix(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"proj", "proj/", true},
		{"proj/", "proj/", true},
		{"a/b-1.0", "a/b-1.0/", true},
		{"/", "", false},
		{"/abs", "", false},
		{"-x", "", false},
		{"..", "", false},
		{"a/../..", "", false},
		{"a//b", "", false},
		{"./a", "", false},
		{"a\x00", "", false},
		{"a\tb", "", false},
		{`a\b`, "", false},
		{strings.Repeat("p", maxPrefixLen), "", false}, // too long once "/" is added
		{strings.Repeat("p", maxPrefixLen-1), strings.Repeat("p", maxPrefixLen-1) + "/", true},
	}
	for _, tt := range tests {
		got, err := cleanPrefix(tt.in)
		if tt.ok && (err != nil || got != tt.want) {
			t.Errorf("cleanPrefix(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
		if !tt.ok && !problem.Is(err, problem.Invalid) {
			t.Errorf("cleanPrefix(%q) = %q, %v; want Invalid", tt.in, got, err)
		}
	}
}

func TestValidRev(t *testing.T) {
	good := []string{"main", "HEAD", "refs/heads/main", "refs/tags/v1.0", "feature/x", "abcd", strings.Repeat("a", 40), strings.Repeat("b", 64)}
	bad := []string{"", "-x", "--all", "main~1", "main^", "main^{tree}", "main@{1}", "@{-1}", "a..b", "a...b", "HEAD:x", ":/msg", ":0:x",
		"refs/heads/", "refs//x", "a b", "a\x00", "main.lock", strings.Repeat("a", maxRevLen+1)}
	for _, r := range good {
		if !validRev(r) {
			t.Errorf("validRev(%q) = false", r)
		}
	}
	for _, r := range bad {
		if validRev(r) {
			t.Errorf("validRev(%q) = true", r)
		}
	}
}

func TestLimitReader(t *testing.T) {
	tests := []struct {
		size    int
		limit   int64
		wantErr bool
	}{
		{10, 10, false},
		{9, 10, false},
		{11, 10, true},
		{0, 0, false},
		{1, 0, true},
	}
	for _, tt := range tests {
		l := &limitReader{r: strings.NewReader(strings.Repeat("x", tt.size)), n: tt.limit}
		b, err := io.ReadAll(l)
		if tt.wantErr {
			if !problem.Is(err, problem.TooLarge) || int64(len(b)) > tt.limit {
				t.Errorf("size %d limit %d: read %d, %v; want TooLarge", tt.size, tt.limit, len(b), err)
			}
			continue
		}
		if err != nil || len(b) != tt.size {
			t.Errorf("size %d limit %d: read %d, %v", tt.size, tt.limit, len(b), err)
		}
	}
}
