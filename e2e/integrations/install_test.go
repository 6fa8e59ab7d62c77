package integrations_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-scm/sluice/internal/testbed"
)

// renovateVersion is the Renovate release the suite runs: the 39.x line is
// the last whose engines accept Node 20 (^20.15.1), the Node CI has.
const renovateVersion = "39.264.1"

// cacheRoot is where installed clients live between runs.
func cacheRoot(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SLUICE_TEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "sluice-test")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatalf("no cache directory: set SLUICE_TEST_CACHE: %v", err)
	}
	return filepath.Join(home, ".cache", "sluice-test")
}

// installed returns dir/<name>-<key>, running install into a fresh
// directory first unless an earlier run completed it. An exclusive file
// lock makes concurrent test processes (go test -p 2, two checkouts) wait
// for one install instead of racing; the finished directory is renamed
// into place, so a killed install leaves nothing that looks complete.
func installed(t testing.TB, name, key string, install func(dir string) error) (string, error) {
	t.Helper()
	root := cacheRoot(t)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	sum := sha256.Sum256([]byte(key))
	final := filepath.Join(root, name+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(final, ".complete")); err == nil {
		return final, nil
	}
	tmp := final + ".partial"
	os.RemoveAll(tmp)
	os.RemoveAll(final)
	if err := install(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(key), 0o644); err != nil {
		return "", err
	}
	return final, os.Rename(tmp, final)
}

func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// pythonClients returns the python of a virtual environment holding the
// pinned Python clients. A venv is not relocatable, so it is built at its
// final path and only marked complete there.
func pythonClients(t testing.TB) string {
	t.Helper()
	const how = "python3 with venv and pip, and PyPI reachable once (pip install -r e2e/integrations/testdata/requirements.txt)"
	if _, err := exec.LookPath("python3"); err != nil {
		testbed.Missing(t, "python3", how)
	}
	reqs, err := filepath.Abs(filepath.Join("testdata", "requirements.txt"))
	if err != nil {
		t.Fatal(err)
	}
	pins, err := os.ReadFile(reqs)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := installed(t, "python", string(pins), func(tmp string) error {
		venv := strings.TrimSuffix(tmp, ".partial")
		os.RemoveAll(venv)
		if err := run("", nil, "python3", "-m", "venv", venv); err != nil {
			return err
		}
		if err := run("", nil, filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
			"--no-deps", "-r", reqs); err != nil {
			os.RemoveAll(venv)
			return err
		}
		// installed renames tmp into place: hand it the finished venv.
		return os.Rename(venv, tmp)
	})
	if err != nil {
		t.Logf("install: %v", err)
		testbed.Missing(t, "atlassian-python-api and stashy", how)
	}
	return filepath.Join(dir, "bin", "python")
}

// renovate returns the path of the pinned Renovate's entry point, run as
// `node <path>`.
func renovate(t testing.TB) string {
	t.Helper()
	const how = "node >= 20.15 and npm, and the npm registry reachable once (npm install renovate@" + renovateVersion + ")"
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		testbed.Missing(t, "node", how)
	}
	var major, minor int
	fmt.Sscanf(strings.TrimSpace(string(out)), "v%d.%d", &major, &minor)
	if major < 20 || major == 20 && minor < 15 {
		testbed.Missing(t, "node >= 20.15 (have "+strings.TrimSpace(string(out))+")", how)
	}
	dir, err := installed(t, "renovate", renovateVersion, func(tmp string) error {
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return err
		}
		return run(tmp, nil, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund", "--omit=dev",
			// re2 builds a native module from a GitHub download; Renovate
			// falls back to JavaScript regular expressions without it.
			"--ignore-scripts", "--loglevel=error", "renovate@"+renovateVersion)
	})
	if err != nil {
		t.Logf("install: %v", err)
		testbed.Missing(t, "renovate "+renovateVersion, how)
	}
	return filepath.Join(dir, "node_modules", "renovate", "dist", "renovate.js")
}
