package app_test

import (
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// The shape of DESIGN.md as a test: transports → hosting (the one git
// service runner) → services → foundations, with app alone knowing
// everything. Each internal package is in exactly one layer; a package
// added without a layer fails here until someone decides where it goes.
var layers = map[string]string{
	// Foundations: no service, transport, runner or wiring above them.
	"problem": "foundation", "gitref": "foundation", "pktline": "foundation",
	"gitcmd": "foundation", "store": "foundation", "store/storetest": "foundation",
	"hookclient": "foundation", "config": "foundation", "entity": "foundation",
	"markup": "foundation",

	// Services.
	"auth": "service", "accounts": "service", "repo": "service", "hooks": "service",
	"pull": "service", "packcache": "service", "throttle": "service", "jobs": "service",
	"cluster": "service", "webhook": "service", "bulkimport": "service",
	"branchperm": "service", "notify": "service", "mirror": "service", "backup": "service",
	"identity": "service", "audit": "service",

	"hosting": "runner",

	"githttp": "transport", "sshd": "transport", "api": "transport", "web": "transport",
	"cli": "transport",

	"app": "wiring",

	// The lab drives a node from outside.
	"e3": "lab", "loadgen": "lab", "datagen": "lab", "bench": "lab",

	// Test harness: starts real components and whole nodes.
	"testbed": "harness", "testbed/pgtest": "harness", "testbed/wait": "harness", "pgserver": "harness", "haproxy": "harness",
}

// allowed says which layers a layer may import.
var allowed = map[string][]string{
	"foundation": {"foundation"},
	"service":    {"foundation", "service"},
	"runner":     {"foundation", "service"},
	"transport":  {"foundation", "service", "runner", "transport", "wiring", "lab"},
	"wiring":     {"foundation", "service", "runner", "transport"},
	"lab":        {"lab", "harness", "foundation"},
	"harness":    {"harness", "wiring", "foundation", "service"},
}

// Further rules no layer table expresses.
var forbidden = []struct {
	from, to, why string
}{
	// Settings arrive as constructor arguments.
	{"*service", "config", "settings are passed, not imported"},
	{"*runner", "config", "settings are passed, not imported"},
	{"githttp", "config", "settings are passed, not imported"},
	{"sshd", "config", "settings are passed, not imported"},
	{"api", "config", "settings are passed, not imported"},
	{"web", "config", "settings are passed, not imported"},
	// Transports other than the CLI never import each other or the
	// wiring: the CLI alone starts the app and the lab.
	{"githttp", "*transport", "a transport imports no other transport"},
	{"sshd", "*transport", "a transport imports no other transport"},
	{"api", "*transport", "a transport imports no other transport"},
	{"web", "*transport", "a transport imports no other transport"},
	{"githttp", "*wiring", "nothing but the CLI and the harness imports app"},
	{"sshd", "*wiring", "nothing but the CLI and the harness imports app"},
	{"api", "*wiring", "nothing but the CLI and the harness imports app"},
	{"web", "*wiring", "nothing but the CLI and the harness imports app"},
	{"githttp", "*lab", "only the CLI runs the lab"},
	{"sshd", "*lab", "only the CLI runs the lab"},
	{"api", "*lab", "only the CLI runs the lab"},
	{"web", "*lab", "only the CLI runs the lab"},
	// The lab measures from outside: foundations it may use are the
	// wire formats, not the server's store.
	{"*lab", "store", "the lab drives a node through its public interfaces"},
}

// known are violations that exist today, each with the issue item that
// removes it. The test fails when one disappears too, so the list only
// shrinks.
var known = map[string]string{}

const module = "github.com/sluice-scm/sluice/internal/"

func TestImportDirection(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "github.com/sluice-scm/sluice/internal/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var problems []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		fromLayer, ok := layers[from]
		if !ok {
			problems = append(problems, from+": no layer (add it to layers in this test)")
			continue
		}
		for _, imp := range fields[1:] {
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			toLayer := layers[to]
			var why string
			if !contains(allowed[fromLayer], toLayer) {
				why = fromLayer + " may not import " + toLayer
			}
			for _, f := range forbidden {
				if match(f.from, from, fromLayer) && match(f.to, to, toLayer) {
					why = f.why
				}
			}
			if why == "" {
				continue
			}
			edge := from + " -> " + to
			if _, ok := known[edge]; ok {
				seen[edge] = true
				continue
			}
			problems = append(problems, edge+": "+why)
		}
	}
	for edge, item := range known {
		if !seen[edge] {
			problems = append(problems, edge+": gone ("+item+"); remove it from known")
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

func match(pattern, pkg, layer string) bool {
	if l, ok := strings.CutPrefix(pattern, "*"); ok {
		return l == layer
	}
	return pattern == pkg
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
