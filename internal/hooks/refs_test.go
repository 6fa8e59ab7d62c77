package hooks

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/problem"
)

const (
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
	zero = "0000000000000000000000000000000000000000"
)

func TestParseUpdates(t *testing.T) {
	sha256 := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		in      string
		want    []RefUpdate
		wantErr bool
	}{
		{name: "empty", in: ""},
		{name: "one", in: oidA + " " + oidB + " refs/heads/main\n",
			want: []RefUpdate{{oidA, oidB, "refs/heads/main"}}},
		{name: "two", in: zero + " " + oidB + " refs/heads/a\n" + oidA + " " + zero + " refs/tags/v1\n",
			want: []RefUpdate{{zero, oidB, "refs/heads/a"}, {oidA, zero, "refs/tags/v1"}}},
		{name: "sha256", in: sha256 + " " + sha256 + " HEAD\n",
			want: []RefUpdate{{sha256, sha256, "HEAD"}}},
		{name: "no final newline", in: oidA + " " + oidB + " refs/heads/main", wantErr: true},
		{name: "blank line", in: "\n", wantErr: true},
		{name: "two fields", in: oidA + " refs/heads/main\n", wantErr: true},
		{name: "four fields", in: oidA + " " + oidB + " refs/heads/a b\n", wantErr: true},
		{name: "double space", in: oidA + "  " + oidB + " refs/heads/a\n", wantErr: true},
		{name: "upper-case hex", in: strings.ToUpper(oidA[:1]+"a"+oidA[2:]) + " " + oidB + " refs/heads/a\n", wantErr: true},
		{name: "short oid", in: oidA[:39] + " " + oidB + " refs/heads/a\n", wantErr: true},
		{name: "mixed hash lengths", in: oidA + " " + sha256 + " refs/heads/a\n", wantErr: true},
		{name: "empty ref", in: oidA + " " + oidB + " \n", wantErr: true},
		{name: "tab in ref", in: oidA + " " + oidB + " refs/heads/a\tb\n", wantErr: true},
		{name: "carriage return", in: oidA + " " + oidB + " refs/heads/a\r\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseUpdates([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseUpdates: err = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d updates %v, want %v", len(got), got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("update %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestRefUpdateKinds(t *testing.T) {
	if u := (RefUpdate{zero, oidA, "refs/heads/x"}); !u.Created() || u.Deleted() {
		t.Errorf("%+v: want a creation", u)
	}
	if u := (RefUpdate{oidA, zero, "refs/heads/x"}); u.Created() || !u.Deleted() {
		t.Errorf("%+v: want a deletion", u)
	}
	if u := (RefUpdate{oidA, oidB, "refs/heads/x"}); u.Created() || u.Deleted() {
		t.Errorf("%+v: want an update", u)
	}
}

func TestCheckRefName(t *testing.T) {
	tests := []struct {
		ref  string
		want string // substring of the reason; "" means valid
	}{
		{"refs/heads/main", ""},
		{"refs/heads/feature/x-1", ""},
		{"refs/tags/v1.0", ""},
		{"refs/heads/a-", ""},
		{"refs/heads/ünïcode", ""},
		{"refs/heads/--output=x", "beginning with '-'"},
		{"refs/heads/-", "beginning with '-'"},
		{"refs/heads/ok/-x", "beginning with '-'"},
		{"refs/-heads/x", "beginning with '-'"},
		{"heads/main", "not under refs/"},
		{"HEAD", "not under refs/"},
		{"refs/heads/a..b", "'..'"},
		{"refs/heads/a/", "ends with '/'"},
		{"refs/heads//a", "empty path component"},
		{"refs/heads/a.", "ends with '.'"},
		{"refs/heads/.hidden", "beginning with '.'"},
		{"refs/heads/a.lock", ".lock"},
		{"refs/heads/a.lock/b", ".lock"},
		{"refs/heads/a@{1}", "'@{'"},
		{"refs/heads/a b", "' '"},
		{"refs/heads/a~1", "'~'"},
		{"refs/heads/a^", "'^'"},
		{"refs/heads/a:b", "':'"},
		{"refs/heads/a?", "'?'"},
		{"refs/heads/a*", "'*'"},
		{"refs/heads/a[", "'['"},
		{"refs/heads/a\\b", "'\\\\'"},
		{"refs/heads/a\x01", "control character"},
		{"refs/heads/a\x7f", "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			err := CheckRefName(tt.ref)
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
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, strconv.Quote(tt.ref)) {
				t.Errorf("message %q does not name the ref and %s", msg, tt.want)
			}
		})
	}
}
