package datagen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		o       Options
		want    Counts
		wantErr bool
	}{
		{Options{Profile: "large", Scale: 0.005}, Counts{Users: 125, Groups: 250, Projects: 84, Repositories: 260, PullRequests: 4250, Comments: 17500}, false},
		{Options{Profile: "Small", Scale: 0.05}, Counts{Users: 150, Groups: 300, Projects: 100, Repositories: 310, PullRequests: 5900, Comments: 24300}, false},
		{Options{Profile: "small", Scale: 1e-9}, Counts{1, 1, 1, 1, 1, 1}, false},
		{Options{Profile: "huge", Scale: 1}, Counts{}, true},
		{Options{Profile: "small", Scale: 0}, Counts{}, true},
	}
	for _, tt := range tests {
		got, err := tt.o.Plan()
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Plan(%+v) = %+v, %v; want %+v", tt.o, got, err, tt.want)
		}
	}
}

// TestWrite writes a tiny data set twice: the same file both times (the
// keys kept, no second token asked for once the tokens file has them),
// with every record type in the planned numbers, and histories generated
// once into the history directory.
func TestWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := Options{Profile: "small", Scale: 0.001, Seed: 7, Seeds: 2, Commits: 220, LoadUsers: 3, LoadPassword: "pw",
		TokensFile: filepath.Join(dir, "tokens"), KeysFile: filepath.Join(dir, "keys"), SeedCache: filepath.Join(dir, "cache")}
	var first bytes.Buffer
	rep, err := Write(ctx, o, &first, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := o.Plan()
	types := map[string]int{}
	comments := 0
	var histories []string
	for _, line := range strings.Split(strings.TrimSpace(first.String()), "\n") {
		var rec struct {
			Type     string
			History  string
			ForkOf   string `json:"fork_of"`
			Comments []json.RawMessage
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		types[rec.Type]++
		comments += len(rec.Comments)
		if rec.History != "" {
			histories = append(histories, rec.History)
		} else if rec.Type == "repository" && rec.ForkOf == "" {
			t.Errorf("repository with neither history nor parent: %s", line)
		}
	}
	if rep.Records != types["user"]+types["group"]+types["project"]+types["repository"]+types["pull_request"]+
		types["pull_request_activity"]+types["token"]+types["ssh_key"] {
		t.Errorf("report says %d records, file has %v", rep.Records, types)
	}
	want := map[string]int{"user": plan.Users + 3, "group": plan.Groups + 1, "project": plan.Projects, "repository": plan.Repositories,
		"pull_request": plan.PullRequests, "pull_request_activity": plan.PullRequests, "token": 3, "ssh_key": 3}
	for k, n := range want {
		if types[k] != n {
			t.Errorf("%d %s records, want %d (all: %v)", types[k], k, n, types)
		}
	}
	if comments != plan.Comments {
		t.Errorf("%d comments, want %d", comments, plan.Comments)
	}
	if len(histories) != 2 {
		t.Fatalf("histories %v, want 2", histories)
	}
	out, err := exec.Command("git", "-C", histories[1], "rev-list", "--count", "main").Output()
	if err != nil || strings.TrimSpace(string(out)) != "220" {
		t.Fatalf("history: %q, %v", out, err)
	}
	if fi, err := os.Stat(o.KeysFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keys file mode: %v, %v", fi, err)
	}

	// The importer appends the tokens it mints; then a re-run asks for
	// none and is otherwise the same file, histories included.
	var toks strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&toks, "%s tok-%d\n", LoadUserName(i), i)
	}
	if err := os.WriteFile(o.TokensFile, []byte(toks.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var second bytes.Buffer
	if _, err := Write(ctx, o, &second, nil); err != nil {
		t.Fatal(err)
	}
	var noTokens []string
	for _, line := range strings.Split(strings.TrimSpace(first.String()), "\n") {
		if !strings.Contains(line, `"type":"token"`) {
			noTokens = append(noTokens, line)
		}
	}
	if strings.Join(noTokens, "\n")+"\n" != second.String() {
		t.Error("the second run's file differs from the first's beyond the tokens")
	}
	if got, err := ReadTokens(o.TokensFile); err != nil || len(got) != 3 || got[0] != [2]string{LoadUserName(1), "tok-1"} {
		t.Errorf("ReadTokens: %v, %v", got, err)
	}
}

func TestWriteNeedsHistoryDir(t *testing.T) {
	if _, err := Write(context.Background(), Options{Profile: "small", Scale: 0.001}, io.Discard, nil); err == nil {
		t.Fatal("no error without a history directory")
	}
}

func TestReadKeysRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, text, want string }{
		{"missing is empty", "", ""},
		{"no seed", "load-0001\n", ":1:"},
		{"short seed", "load-0001 AAAA\n", ":1:"},
		{"not base64", "load-0001 !!!\n", ":1:"},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, fmt.Sprint(i))
		if tt.text != "" {
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		keys, err := ReadKeys(path)
		if tt.want == "" {
			if err != nil || len(keys) != 0 {
				t.Errorf("%s: %v, %v", tt.name, keys, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}
