package gitref

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

var refCases = []struct {
	ref  string
	want string // substring of the reason; "" means accepted
	git  bool   // git check-ref-format refuses it too
}{
	{"refs/heads/main", "", false},
	{"refs/heads/feature/x-1", "", false},
	{"refs/tags/v1.0", "", false},
	{"refs/heads/a-", "", false},
	{"refs/heads/ünïcode", "", false},
	{"refs/heads/x@y", "", false},
	{"refs/heads/@x", "", false},
	{"refs/heads/feature/HEAD", "", false},
	{"refs/remotes/origin/HEAD", "", false},
	{"refs/heads/" + strings.Repeat("a", MaxRefNameLen-len("refs/heads/")), "", false},

	// Sluice's own rules: git accepts these.
	{"refs/heads/HEAD", `"HEAD"`, false},
	{"refs/tags/HEAD", `"HEAD"`, false},
	{"refs/heads/@", "'@'", false},
	{"refs/heads/a/@/b", "'@'", false},
	{"refs/heads/--output=x", "beginning with '-'", false},
	{"refs/heads/-", "beginning with '-'", false},
	{"refs/heads/feature/-x", "beginning with '-'", false},
	{"refs/-heads/x", "beginning with '-'", false},
	{"refs/heads/\xff\xfe", "UTF-8", false},
	{"refs/heads/a\xc3", "UTF-8", false},
	{"refs/heads/a\u0085b", "control character", false},
	{"refs/heads/a\u009bb", "control character", false},
	{"refs/heads/" + strings.Repeat("a", MaxRefNameLen), "longer than", false},
	{"heads/main", "not under refs/", false},
	{"HEAD", "not under refs/", false},

	// git check-ref-format's rules.
	{"refs/heads/a..b", "'..'", true},
	{"refs/heads/a/", "ends with '/'", true},
	{"refs/heads//a", "empty path component", true},
	{"refs/heads/a.", "ends with '.'", true},
	{"refs/heads/.hidden", "beginning with '.'", true},
	{"refs/heads/a.lock", ".lock", true},
	{"refs/heads/a.lock/b", ".lock", true},
	{"refs/heads/a@{1}", "'@{'", true},
	{"refs/heads/a b", "' '", true},
	{"refs/heads/a~1", "'~'", true},
	{"refs/heads/a^", "'^'", true},
	{"refs/heads/a:b", "':'", true},
	{"refs/heads/a?", "'?'", true},
	{"refs/heads/a*", "'*'", true},
	{"refs/heads/a[", "'['", true},
	{"refs/heads/a\\b", "'\\\\'", true},
	{"refs/heads/a\x01", "control character", true},
	{"refs/heads/a\tb", "control character", true},
	{"refs/heads/a\x7f", "control character", true},
}

func TestCheckRefName(t *testing.T) {
	for _, tt := range refCases {
		t.Run(tt.ref[:min(len(tt.ref), 40)], func(t *testing.T) {
			err := CheckRefName(tt.ref)
			if ValidRefName(tt.ref) != (err == nil) {
				t.Errorf("ValidRefName and CheckRefName disagree: %v", err)
			}
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckRefName(%q) = %v, want nil", tt.ref, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckRefName(%q) = nil, want an error about %s", tt.ref, tt.want)
			}
			if !problem.Is(err, problem.Invalid) {
				t.Errorf("kind = %v, want Invalid", problem.KindOf(err))
			}
			msg := problem.Message(err)
			if !strings.Contains(msg, tt.want) {
				t.Errorf("message %q does not state %s", msg, tt.want)
			}
			if len(tt.ref) < 64 && !strings.Contains(msg, strconv.Quote(tt.ref)) {
				t.Errorf("message %q does not name the ref", msg)
			}
			if !utf8Printable(msg) {
				t.Errorf("message %q is not printable text", msg)
			}
		})
	}
}

// TestGitAgrees asks git 2.39 itself: every name accepted here must be
// accepted by git check-ref-format, and every case marked as git's rule
// must be refused by it, so the two rule sets cannot drift apart.
func TestGitAgrees(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	for _, tt := range refCases {
		if !strings.HasPrefix(tt.ref, "refs/") {
			continue // git check-ref-format has no "must be under refs/" rule
		}
		cmd := exec.Command("git", "check-ref-format", tt.ref)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}
		gitOK := cmd.Run() == nil
		switch {
		case tt.want == "" && !gitOK:
			t.Errorf("git refuses %q, which gitref accepts", tt.ref)
		case tt.git && gitOK:
			t.Errorf("git accepts %q, marked as one of git's rules", tt.ref)
		}
	}
}

func TestCheckBranchName(t *testing.T) {
	good := []string{"main", "feature/x", "release-1.0", "a.b", "UPPER", "ünïcode", "x@y", "feature/HEAD"}
	bad := []string{"", "-x", "feature/-x", "a..b", "a b", "x.lock", "a//b", "@", "a/@", "HEAD", "a^b", "a:b", "a~1",
		"a?", "a*", "a[b", `a\b`, "/x", "x/", "x.", ".x", "a/.b", "a@{1}", "a\x00b", "a\nb", "a\x7fb", "\xff",
		"a\u0085", strings.Repeat("a", MaxRefNameLen)}
	for _, name := range good {
		if err := CheckBranchName(name); err != nil {
			t.Errorf("CheckBranchName(%q) = %v, want nil", name, err)
		}
		if err := CheckTagName(name); err != nil {
			t.Errorf("CheckTagName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range bad {
		err := CheckBranchName(name)
		if !problem.Is(err, problem.Invalid) {
			t.Errorf("CheckBranchName(%q) = %v, want Invalid", name, err)
			continue
		}
		if msg := problem.Message(err); !strings.HasPrefix(msg, "branch name") {
			t.Errorf("CheckBranchName(%q): message %q does not name the field", name, msg)
		}
		if err := CheckTagName(name); !problem.Is(err, problem.Invalid) {
			t.Errorf("CheckTagName(%q) = %v, want Invalid", name, err)
		}
	}
}

func TestObjectID(t *testing.T) {
	sha1 := "0123456789abcdef0123456789abcdef01234567"
	sha256 := strings.Repeat("ab", 32)
	for _, s := range []string{sha1, sha256} {
		id, err := ParseObjectID(s)
		if err != nil || id.String() != s || id.IsZero() {
			t.Errorf("ParseObjectID(%q) = %q, %v", s, id, err)
		}
	}
	for _, s := range []string{"", "0123", sha1[:39], sha1 + "0", strings.ToUpper(sha1), "g" + sha1[1:], sha1[:20] + " " + sha1[21:], "-" + sha1[1:]} {
		if _, err := ParseObjectID(s); !problem.Is(err, problem.Invalid) {
			t.Errorf("ParseObjectID(%q) = %v, want Invalid", s, err)
		}
	}
	for _, n := range []int{SHA1HexLen, SHA256HexLen} {
		z := Zero(n)
		if len(z) != n || !z.IsZero() || !ValidObjectID(string(z)) {
			t.Errorf("Zero(%d) = %q", n, z)
		}
	}
	if ObjectID("000").IsZero() || ObjectID("").IsZero() {
		t.Error("a short string of zeros is not the zero id")
	}
}

func utf8Printable(s string) bool {
	for _, r := range s {
		if r == 0xfffd || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}
