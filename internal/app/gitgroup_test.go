package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/config"
	"github.com/sluice-scm/sluice/internal/gitcmd"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// TestGitCgroup: a node in a cgroup of its own runs its heavy git
// processes in the git group the throttle drives; with the fixed strategy
// there is none.
func TestGitCgroup(t *testing.T) {
	// This test process is the node: it gets a cgroup of its own.
	nodePath := testbed.OwnCgroup(t, "test-app-gitgroup")

	n := testbed.NewNode(t, testbed.NodeOptions{})
	st := n.App.Throttle.State()
	if st.Controller == nil || st.Controller.GitCgroup == "" || st.Controller.GitCPUShare != 1 {
		t.Fatalf("controller state %+v, want a git cgroup at share 1", st.Controller)
	}
	group := st.Controller.GitCgroup
	if filepath.Dir(group) != nodePath {
		t.Fatalf("git cgroup %s is not under the node's %s", group, nodePath)
	}
	// The admin endpoint shows it.
	req, _ := http.NewRequest(http.MethodGet, n.URL+"/rest/sluice/1.0/admin/throttle", nil)
	req.SetBasicAuth("admin", n.AdminPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Controller struct {
			GitCgroup   string  `json:"gitCgroup"`
			GitCPUShare float64 `json:"gitCpuShare"`
		} `json:"controller"`
	}
	err = json.NewDecoder(resp.Body).Decode(&state)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || state.Controller.GitCgroup != group || state.Controller.GitCPUShare != 1 {
		t.Errorf("admin throttle state: status %d, %+v, %v", resp.StatusCode, state.Controller, err)
	}
	if b, err := os.ReadFile(filepath.Join(group, "cpu.shares")); err != nil || strings.TrimSpace(string(b)) != "256" {
		t.Errorf("cpu.shares %q, %v; want 256", b, err)
	}

	// A heavy command lands in it while it runs.
	repo := filepath.Join(t.TempDir(), "r.git")
	if out, err := exec.Command("git", "init", "--bare", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	p, err := n.App.Git.Start(context.Background(), gitcmd.Cmd{Dir: repo, Name: "upload-pack", Flags: []string{"--stateless-rpc"}, Stdin: pr, Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cgroup")
	pw.Close()
	p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := ":/" + filepath.Base(nodePath) + "/" + filepath.Base(group) + "\n"
	if !strings.Contains(string(b), want) {
		t.Errorf("upload-pack's cgroups:\n%s\nwant a cpu line ending %q", b, want)
	}

	// The fixed strategy has no controller to drive a group.
	fixed := testbed.NewNode(t, testbed.NodeOptions{Configure: func(c *config.Config) { c.Throttle.Strategy = "fixed" }})
	if st := fixed.App.Throttle.State(); st.Controller != nil {
		t.Errorf("fixed strategy has a controller: %+v", st.Controller)
	}
	entries, _ := os.ReadDir(nodePath)
	groups := 0
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "git-") {
			groups++
		}
	}
	if groups != 1 {
		t.Errorf("%d git groups under the node, want the adaptive node's one", groups)
	}
}
