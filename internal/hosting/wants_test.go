package hosting_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/repo"
	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

// client runs the real git client as one user, over HTTP with a password
// or over SSH with a key of the user's.
type client struct {
	t    *testing.T
	home string
	key  string
}

func newClient(t *testing.T, n *testbed.Node, u *store.User) *client {
	t.Helper()
	c := &client{t: t, home: t.TempDir()}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test")
	if err != nil {
		t.Fatal(err)
	}
	c.key = filepath.Join(c.home, "id_ed25519")
	if err := os.WriteFile(c.key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	k := &store.SSHKey{UserID: u.ID, Label: "test", Fingerprint: ssh.FingerprintSHA256(signer.PublicKey()),
		PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))}
	if err := n.Store().AddSSHKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return c
}

// git runs git in dir and returns its output and error (stderr included).
func (c *client) git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	ssh := "ssh -F /dev/null -i " + c.key + " -o IdentitiesOnly=yes -o UserKnownHostsFile=" +
		filepath.Join(c.home, "known_hosts") + " -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR"
	cmd.Env = append(testbed.GitEnv(c.home), "GIT_SSH_COMMAND="+ssh)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *client) must(dir string, args ...string) string {
	c.t.Helper()
	out, err := c.git(dir, args...)
	if err != nil {
		c.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// TestV2FetchServesOnlyVisibleObjects is the protocol v2 object leak: git
// 2.39's v2 upload-pack serves any object id the repository or its
// alternates hold. A reader of a fork must not get, by id, a commit pushed
// to the private parent after the fork, a commit of a deleted branch, or
// what only a hidden ref reaches — over HTTP and SSH, with git's own
// "not our ref" — while partial clones and fetches of reachable ids work.
func TestV2FetchServesOnlyVisibleObjects(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{SSH: true})
	ctx := context.Background()
	admin, err := n.Store().UserByName(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	fran := n.CreateUser(t, "fran", "fran-pw")
	parent := n.CreateRepo(t, "SEC", "parent")
	proj := n.CreateProject(t, "FORKS")
	fork := &store.Repository{ProjectID: proj.ID, ProjectKey: proj.Key, Name: "fork", ForkOf: parent.ID}
	if err := repo.Provision(ctx, n.Store(), n.App.Repos, fork); err != nil {
		t.Fatal(err)
	}
	// fran reads the fork only; the parent is private to her.
	n.Grant(t, fork, fran.ID, store.PermRepoRead)

	ad := newClient(t, n, admin)
	fr := newClient(t, n, fran)
	work := testbed.WorkTree(t, 4)
	parentURL := n.CloneURL("SEC", "parent", "admin", n.AdminPassword)
	forkAdminURL := n.CloneURL("FORKS", "fork", "admin", n.AdminPassword)
	ad.must(work, "push", "-q", parentURL, "main")
	old := ad.must(work, "rev-parse", "main~2")
	oldBlobPath := strings.Fields(ad.must(work, "ls-tree", "--name-only", "main~2"))[0]
	oldBlob := ad.must(work, "rev-parse", "main~2:"+oldBlobPath)
	// Provisioned before the push: give the fork the history now.
	ad.must(work, "push", "-q", forkAdminURL, "main")

	// After the fork: a commit on the private parent only.
	if err := os.WriteFile(filepath.Join(work, "secret.txt"), []byte("parent only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ad.must(work, "add", "secret.txt")
	ad.must(work, "commit", "-q", "-m", "secret")
	parentOnly := ad.must(work, "rev-parse", "HEAD")
	parentOnlyBlob := ad.must(work, "rev-parse", "HEAD:secret.txt")
	ad.must(work, "push", "-q", parentURL, "main")

	// In the fork: a branch pushed and deleted, and a commit only a pull
	// request ref holds (served to readers, as Bitbucket does).
	ad.must(work, "checkout", "-q", "-b", "doomed", "main~1")
	if err := os.WriteFile(filepath.Join(work, "doomed.txt"), []byte("doomed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ad.must(work, "add", "doomed.txt")
	ad.must(work, "commit", "-q", "-m", "doomed")
	doomed := ad.must(work, "rev-parse", "HEAD")
	ad.must(work, "push", "-q", forkAdminURL, "doomed")
	ad.must(work, "push", "-q", forkAdminURL, "--delete", "doomed")
	ad.must(work, "checkout", "-q", "-b", "pr", "main~1")
	if err := os.WriteFile(filepath.Join(work, "pr.txt"), []byte("pull request only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ad.must(work, "add", "pr.txt")
	ad.must(work, "commit", "-q", "-m", "pr")
	hidden := ad.must(work, "rev-parse", "HEAD")
	ad.must(work, "push", "-q", forkAdminURL, "pr")
	forkDir := n.App.Repos.Path(fork.ID)
	plain := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir=" + forkDir}, args...)...)
		cmd.Env = testbed.GitEnv(t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	plain("update-ref", "refs/pull-requests/1/from", hidden)
	plain("update-ref", "-d", "refs/heads/pr")

	urls := map[string]string{
		"http": n.CloneURL("FORKS", "fork", "fran", "fran-pw"),
		"ssh":  n.SSHURL("FORKS", "fork"),
	}
	missing := strings.Repeat("5a", 20)
	for transport, url := range urls {
		t.Run(transport, func(t *testing.T) {
			dst := t.TempDir()
			fr.must(dst, "init", "-q", "--bare")
			for name, oid := range map[string]string{
				"parent's later commit": parentOnly,
				"parent's later blob":   parentOnlyBlob,
				"deleted branch":        doomed,
				"missing object":        missing,
			} {
				for _, v := range []string{"2", "0"} {
					out, err := fr.git(dst, "-c", "protocol.version="+v, "fetch", "-q", url, oid)
					if err == nil {
						t.Errorf("v%s fetch of %s %s succeeded", v, name, oid)
						continue
					}
					// A v0 client knows from the advertisement that the
					// server allows no unadvertised wants and stops
					// itself; v2 has no such capability to read.
					if v == "2" && !strings.Contains(out, "remote error: upload-pack: not our ref "+oid) ||
						v == "0" && !strings.Contains(out, "unadvertised object "+oid) {
						t.Errorf("v%s fetch of %s: no refusal naming %s in:\n%s", v, name, oid, out)
					}
					if strings.Contains(out, "hung up") && v == "2" {
						t.Errorf("v2 fetch of %s ended with a cut stream:\n%s", name, out)
					}
				}
			}

			// What the fork's refs reach is served: a partial clone
			// backfills old blobs on checkout, and a reachable commit
			// that is no tip can be fetched by id.
			clone := filepath.Join(t.TempDir(), "c")
			fr.must("", "-c", "protocol.version=2", "clone", "-q", "--filter=blob:none", url, clone)
			fr.must(clone, "checkout", "-q", old)
			if got := fr.must(clone, "cat-file", "-t", oldBlob); got != "blob" {
				t.Errorf("backfilled blob type %q", got)
			}
			fr.must(dst, "-c", "protocol.version=2", "fetch", "-q", url, old)

			// Pull request refs are advertised and served, by name (as
			// Jenkins fetches them) and by id, on every protocol.
			for _, v := range []string{"0", "2"} {
				fr.must(dst, "-c", "protocol.version="+v, "fetch", "-q", url, "+refs/pull-requests/1/from:refs/remotes/pr/1")
				if got := fr.must(dst, "rev-parse", "refs/remotes/pr/1"); got != hidden {
					t.Errorf("v%s: fetched pull request ref %s, want %s", v, got, hidden)
				}
			}
			fr.must(dst, "-c", "protocol.version=2", "fetch", "-q", url, hidden)
		})
	}
}
