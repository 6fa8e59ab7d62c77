package integrations_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/testbed"
)

// apiVersions are the two spellings every REST client runs against.
var apiVersions = []struct{ version, key string }{{"1.0", "V1"}, {"latest", "LT"}}

// seedCommits is the length of a seeded main branch: more than one page of
// the page sizes the scripts ask for (1, 7) and of Bitbucket's default (25).
const seedCommits = 30

// suite is the one node every client of a test run talks to.
type suite struct {
	node  *testbed.Node
	other string // a second user, granted permissions and asked for review
}

// seed is a repository with history, made for one client run.
type seed struct {
	project, repo, head, feature, file, content string
}

func (s *suite) seed(t *testing.T, project string) seed {
	t.Helper()
	n := s.node
	n.CreateRepo(t, project, "seeded")
	work := testbed.WorkTree(t, seedCommits)
	remote := n.CloneURL(project, "seeded", "admin", n.AdminPassword)
	testbed.Git(t, work, "tag", "seed-1")
	testbed.Git(t, work, "push", "-q", remote, "main", "seed-1")
	head := strings.TrimSpace(testbed.Git(t, work, "rev-parse", "HEAD"))
	content := testbed.Git(t, work, "show", "HEAD:file0.txt")
	testbed.Git(t, work, "checkout", "-q", "-b", "feature")
	if err := os.WriteFile(filepath.Join(work, "feature.txt"), []byte("a feature\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.Git(t, work, "add", "feature.txt")
	testbed.Git(t, work, "commit", "-q", "-m", "add a feature")
	testbed.Git(t, work, "push", "-q", remote, "feature")
	return seed{project: project, repo: "seeded", head: head, feature: "feature", file: "file0.txt", content: content}
}

func TestClients(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a node and runs third-party clients")
	}
	s := &suite{node: testbed.NewNode(t, testbed.NodeOptions{}), other: "reviewer"}
	s.node.CreateUser(t, s.other, "reviewer-password")

	t.Run("python", func(t *testing.T) {
		python := pythonClients(t)
		for _, c := range []struct{ name, script, prefix string }{
			{"atlassian-python-api", "atlassian_client.py", "ATL"},
			{"stashy", "stashy_client.py", "STA"},
		} {
			for _, v := range apiVersions {
				t.Run(c.name+"/"+v.version, func(t *testing.T) {
					sd := s.seed(t, c.prefix+v.key)
					s.runPython(t, python, c.script, v.version, c.prefix+v.key+"N", sd)
				})
			}
		}
	})
	t.Run("go-bitbucket-v1", func(t *testing.T) {
		for _, v := range apiVersions {
			t.Run(v.version, func(t *testing.T) {
				s.goBitbucket(t, v.version, s.seed(t, "GO"+v.key), "GO"+v.key+"N")
			})
		}
	})
	t.Run("renovate", s.renovate)
}

func (s *suite) runPython(t *testing.T, python, script, api, newProject string, sd seed) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(python, filepath.Join("testdata", script))
	cmd.Env = append(os.Environ(),
		"SLUICE_URL="+s.node.URL,
		"SLUICE_USER=admin",
		"SLUICE_PASSWORD="+s.node.AdminPassword,
		"SLUICE_API="+api,
		"SLUICE_NEW_PROJECT="+newProject,
		"SEED_PROJECT="+sd.project,
		"SEED_REPO="+sd.repo,
		"SEED_HEAD="+sd.head,
		"SEED_COMMITS="+strconv.Itoa(seedCommits),
		"SEED_FEATURE="+sd.feature,
		"SEED_FILE="+sd.file,
		"SEED_FILE_CONTENT="+sd.content,
		"SEED_OTHER_USER="+s.other,
		// Nothing but the node: a proxy setting of the machine must not
		// route 127.0.0.1 elsewhere.
		"NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1",
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s against /rest/api/%s (%s):\n%s", script, api, time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("%s: %v (the failed steps above name the request, what the client expected and what Sluice answered)", script, err)
	}
}
