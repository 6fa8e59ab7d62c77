package e3

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Workload is a weighted list of scripts. Weights sum to 1 and split a
// stage's clients between the scripts.
type Workload struct {
	Name    string   `json:"name,omitempty"`
	Scripts []Script `json:"scripts"`
}

// Script is one entry of a workload.
type Script struct {
	// Script names what each of its clients repeats; see Scripts.
	Script string  `json:"script"`
	Weight float64 `json:"weight"`
	// Protocol is "v2" (default) or "v0" for git scripts.
	Protocol string `json:"protocol,omitempty"`
	// Client is "loadgen" (default: the protocol-level client, which
	// verifies packs without storing them) or "git" (the real git client,
	// for realism checks: it unpacks and indexes on this machine).
	Client string `json:"client,omitempty"`
	// Transport is "http" (default) or "ssh" for git scripts. SSH
	// operations authenticate with the load users' keys (datagen
	// --load-keys) and open one connection each, handshake included, as
	// git does.
	Transport string `json:"transport,omitempty"`
	// Think is a pause after each iteration (default none: closed loop).
	Think Duration `json:"think,omitempty"`
}

// NeedsSSH says whether any script runs over SSH.
func (w Workload) NeedsSSH() bool {
	for _, s := range w.Scripts {
		if s.Transport == "ssh" {
			return true
		}
	}
	return false
}

// Scripts are the script names a workload may use, with what they do.
var Scripts = map[string]string{
	"clone":        "full clone (all branches and tags), pack verified",
	"fetch":        "fetch with haves: the tips this client saw last time, so it downloads what was pushed since",
	"ls-remote":    "list refs",
	"push":         "push one generated commit to a branch of the client's own",
	"browse":       "REST persona: list projects, a project's repositories, a repository's root, its commits",
	"view-pr":      "REST persona: a pull request's commits and diff (topic branch against main)",
	"pr-workflow":  "REST persona: list branches, create a branch, compare it, delete it",
	"list-users":   "REST persona: list and filter users",
	"build-agent":  "persona: ls-remote every 5 s, clone every 30 s",
	"shallow-view": "REST persona: browse a file's lines and raw content",
}

// gitScripts are the scripts counted as git operations.
var gitScripts = map[string]bool{"clone": true, "fetch": true, "ls-remote": true, "push": true, "build-agent": true}

// ParseWorkload parses and validates a workload.
func ParseWorkload(b []byte) (Workload, error) {
	var w Workload
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return w, fmt.Errorf("parse workload: %w", err)
	}
	return w, w.Validate()
}

// weightTolerance absorbs decimal fractions that do not add up exactly in
// binary (0.1 + 0.2).
const weightTolerance = 1e-6

// Validate checks script names, options and that the weights sum to 1.
func (w Workload) Validate() error {
	var errs []error
	if len(w.Scripts) == 0 {
		return errors.New("workload: no scripts")
	}
	sum := 0.0
	for i, s := range w.Scripts {
		where := fmt.Sprintf("workload.scripts[%d] (%s)", i, s.Script)
		if _, ok := Scripts[s.Script]; !ok {
			names := make([]string, 0, len(Scripts))
			for n := range Scripts {
				names = append(names, n)
			}
			sort.Strings(names)
			errs = append(errs, fmt.Errorf("%s: unknown script; known: %v", where, names))
		}
		if s.Weight <= 0 || math.IsNaN(s.Weight) {
			errs = append(errs, fmt.Errorf("%s: weight %g must be positive", where, s.Weight))
		}
		sum += s.Weight
		switch s.Protocol {
		case "", "v2", "v0":
		default:
			errs = append(errs, fmt.Errorf("%s: protocol %q: want v0 or v2", where, s.Protocol))
		}
		switch s.Transport {
		case "", "http":
		case "ssh":
			if !gitScripts[s.Script] {
				errs = append(errs, fmt.Errorf("%s: transport ssh is for git scripts", where))
			}
			if s.Client == "git" {
				errs = append(errs, fmt.Errorf("%s: transport ssh runs the load client only", where))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: transport %q: want http or ssh", where, s.Transport))
		}
		switch s.Client {
		case "", "loadgen":
		case "git":
			if !slices.Contains([]string{"clone", "fetch", "ls-remote"}, s.Script) {
				errs = append(errs, fmt.Errorf("%s: the real git client runs clone, fetch and ls-remote only", where))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: client %q: want loadgen or git", where, s.Client))
		}
	}
	if math.Abs(sum-1) > weightTolerance {
		errs = append(errs, fmt.Errorf("workload: weights sum to %g, want 1 (they split the clients)", sum))
	}
	return errors.Join(errs...)
}

// Split divides clients between the scripts in proportion to their
// weights, by largest remainder, so the counts add up to clients exactly.
func (w Workload) Split(clients int) []int {
	n := make([]int, len(w.Scripts))
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, len(w.Scripts))
	given := 0
	for i, s := range w.Scripts {
		exact := s.Weight * float64(clients)
		n[i] = int(math.Floor(exact))
		given += n[i]
		rems[i] = rem{i, exact - float64(n[i])}
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < clients; k++ {
		n[rems[k%len(rems)].i]++
		given++
	}
	return n
}
