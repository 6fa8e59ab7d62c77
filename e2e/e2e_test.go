// Package e2e runs end-to-end scenarios against the built sluice binary
// with the real git client. Each scenario in testdata/*.txtar is a readable
// script: start a server, create things with the admin CLI, clone, push,
// and expect failures with `!`.
//
// Extra commands:
//
//	serve [flags]        start `sluice serve` on random ports; sets $URL and $HOSTPORT
//	                     for HTTP, and $SSHURL (ssh://git@HOST:PORT) and
//	                     $SSHHOSTPORT for SSH unless --ssh-addr '' turns it off
//	stop                 stop the server serve started
//	envstdout NAME       set $NAME to the trimmed stdout of the previous command
//	httpget URL [status] GET URL, expect status (default 200); body becomes stdout
package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sluice-scm/sluice/internal/testbed"
)

func TestScenarios(t *testing.T) {
	bin := testbed.Binary(t)
	// $LONE_SLUICE is the same binary in a directory of its own, without
	// sluice-hook beside it, for the hook fallback scenario.
	alone := filepath.Join(t.TempDir(), "sluice")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Setup: func(env *testscript.Env) error {
			env.Setenv("SLUICE", bin)
			env.Setenv("LONE_SLUICE", alone)
			env.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			for _, kv := range testbed.GitEnv(filepath.Join(env.WorkDir, "home")) {
				k, v, _ := strings.Cut(kv, "=")
				if k != "PATH" {
					env.Setenv(k, v)
				}
			}
			env.Setenv("SLUICE_ADMIN_PASSWORD", "admin-pass-e2e")
			return os.MkdirAll(filepath.Join(env.WorkDir, "home"), 0o755)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"serve":     cmdServe,
			"stop":      cmdStop,
			"envstdout": cmdEnvStdout,
			"httpget":   cmdHTTPGet,
		},
	})
}

var (
	listening    = regexp.MustCompile(`listening on http://(127\.0\.0\.1:\d+)`)
	listeningSSH = regexp.MustCompile(`Git over SSH on ssh://git@(127\.0\.0\.1:\d+)`)
)

func cmdServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! serve")
	}
	argv := append([]string{"serve", "--data", ts.MkAbs("data"), "--http-addr", "127.0.0.1:0", "--ssh-addr", "127.0.0.1:0"}, args...)
	// serve prints the SSH address on the line after the HTTP one, unless
	// the scenario turned SSH off.
	wantSSH := true
	for i, a := range args {
		if a == "--ssh-addr=" || (a == "--ssh-addr" && i+1 < len(args) && args[i+1] == "") {
			wantSSH = false
		}
	}
	cmd := exec.Command(ts.Getenv("SLUICE"), argv...)
	cmd.Dir = ts.MkAbs(".")
	var env []string
	for _, k := range []string{"PATH", "HOME", "SLUICE_ADMIN_PASSWORD"} {
		env = append(env, k+"="+ts.Getenv(k))
	}
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	ts.Check(err)
	logf, err := os.Create(ts.MkAbs("server.log"))
	ts.Check(err)
	cmd.Stderr = logf
	ts.Check(cmd.Start())
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
	}
	ts.Defer(stop)
	servers.Store(ts, stop)
	type addrs struct{ http, ssh string }
	found := make(chan addrs, 1)
	go func() {
		var a addrs
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				a.http = m[1]
			}
			if m := listeningSSH.FindStringSubmatch(sc.Text()); m != nil {
				a.ssh = m[1]
			}
			if a.http != "" && (a.ssh != "" || !wantSSH) {
				found <- a
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-found:
		ts.Setenv("HOSTPORT", a.http)
		ts.Setenv("URL", "http://"+a.http)
		if a.ssh != "" {
			ts.Setenv("SSHHOSTPORT", a.ssh)
			ts.Setenv("SSHURL", "ssh://git@"+a.ssh)
		}
	case <-time.After(30 * time.Second):
		log, _ := os.ReadFile(ts.MkAbs("server.log"))
		ts.Fatalf("server did not start; log:\n%s", log)
	}
}

// servers holds each script's stop function for the stop command.
var servers sync.Map

func cmdStop(ts *testscript.TestScript, neg bool, args []string) {
	stop, ok := servers.LoadAndDelete(ts)
	if neg || len(args) != 0 || !ok {
		ts.Fatalf("usage: stop, after serve")
	}
	stop.(func())()
}

func cmdEnvStdout(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: envstdout NAME")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
}

func cmdHTTPGet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: httpget URL [status]")
	}
	want := 200
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		want = n
	}
	resp, err := http.Get(args[0])
	ts.Check(err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	ts.Stdout().Write(body)
	if (resp.StatusCode == want) == neg {
		ts.Fatalf("GET %s: status %d (want %s%d)", args[0], resp.StatusCode, map[bool]string{true: "not ", false: ""}[neg], want)
	}
	fmt.Fprintln(ts.Stdout())
}
