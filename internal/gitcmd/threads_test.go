package gitcmd

import (
	"context"
	"strings"
	"testing"
)

// PackThreads reaches git as configuration on the command line, and
// leaves git's default alone when zero.
func TestPackThreads(t *testing.T) {
	for _, tc := range []struct {
		threads int
		want    string // "" means unset
	}{{1, "1"}, {3, "3"}, {0, ""}} {
		r := newRunner(t, "", func(c *Config) { c.PackThreads = tc.threads })
		f := makeRepo(t, r)
		out, err := r.Output(context.Background(), Cmd{Dir: f.dir, Name: "config", Flags: []string{"--get"}, Args: []string{"pack.threads"}})
		got := strings.TrimSpace(string(out))
		switch {
		case tc.want == "" && ExitCode(err) != 1:
			t.Errorf("PackThreads 0: pack.threads = %q, %v; want it unset", got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("PackThreads %d: pack.threads = %q, %v; want %q", tc.threads, got, err, tc.want)
		}
	}
}
