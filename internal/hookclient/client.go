// Package hookclient is the program git runs as a hook: it forwards the
// call to the Sluice node that started git and relays the node's answer.
//
// It is its own package, importing nothing beyond the standard library's
// networking and JSON, because a push runs it three times (pre-receive,
// then reference-transaction prepared and committed). Linked into the full
// sluice binary, every one of those processes pays for the initialisation
// of the whole server — syntax lexers, HTML sanitiser tables, metrics —
// about 17 ms of CPU, which was two thirds of a small push's cost. Linked
// alone into cmd/sluice-hook it starts in about a millisecond. Both run
// exactly this code: `sluice hook NAME` is the fallback when sluice-hook
// is not installed next to sluice.
//
// The wire protocol is one JSON Request per connection on the node's unix
// socket, answered by one JSON Response; internal/hooks is the server.
package hookclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Environment variables that carry a request's hook channel into git.
const (
	// EnvSocket is the node's hook socket, EnvToken the request's secret.
	EnvSocket = "SLUICE_HOOK_SOCKET"
	EnvToken  = "SLUICE_HOOK_TOKEN"
)

const (
	// MaxInput bounds what a hook reads from git. A push of 16 MiB of
	// "old new ref" lines is about 130 000 refs with SHA-1 names, beyond any
	// push Sluice is meant to accept in one go.
	MaxInput = 16 << 20
	// MaxWireRequest bounds what the server decodes from one connection:
	// MaxInput base64-encoded plus headroom for the other fields.
	MaxWireRequest = MaxInput*4/3 + 1<<20
	// ClientTimeout is how long a hook waits for the server. The server
	// gives up earlier, so its own, clearer, error wins.
	ClientTimeout = 60 * time.Second
	// maxClientPushOptions caps how many push options the client forwards
	// whatever GIT_PUSH_OPTION_COUNT claims; the server compares the count
	// itself with the configured limit.
	maxClientPushOptions = 1000
)

// Request is the one JSON document a hook sends to the server.
type Request struct {
	Token           string   `json:"token"`
	Hook            string   `json:"hook"`
	Args            []string `json:"args,omitempty"`
	Stdin           []byte   `json:"stdin,omitempty"`
	PushOptionCount int      `json:"push_option_count"`
	PushOptions     []string `json:"push_options,omitempty"`
	// Quarantine holds GIT_QUARANTINE_PATH, GIT_OBJECT_DIRECTORY and
	// GIT_ALTERNATE_OBJECT_DIRECTORIES as KEY=VALUE, so a policy can read
	// the pushed objects before they are migrated into the repository.
	Quarantine []string `json:"quarantine,omitempty"`
}

// Response is the server's answer: the hook's exit code and what git
// should show the pushing user.
type Response struct {
	Code    int    `json:"code"`
	Message string `json:"message,omitempty"`
}

// QuarantineVars are the variables through which receive-pack tells a hook
// where the pushed objects wait.
var QuarantineVars = []string{"GIT_QUARANTINE_PATH", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"}

// Run is the hook program: cmd/sluice-hook (named after the hook by its
// symlink) and `sluice hook NAME ARGS…` run it with the process's stdin,
// stdout, stderr and environment, and exit with what it returns. It forwards the call to the server that registered the request
// and prints the server's message on stderr, which git relays to the pushing
// client as "remote: …" lines.
func Run(name string, args []string, stdin io.Reader, stdout, stderr io.Writer, environ []string) int {
	// Git ignores the exit status of the committed and aborted phases, but
	// an aborted transaction must in particular never be held up: whatever
	// goes wrong here, it reports and exits 0.
	mustNotBlock := name == "reference-transaction" && len(args) > 0 && args[0] == "aborted"
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice: "+format+"\n", a...)
		if mustNotBlock {
			return 0
		}
		return 1
	}

	env := envMap(environ)
	socket, token := env[EnvSocket], env[EnvToken]
	if socket == "" || token == "" {
		return fail("hook called outside a sluice request")
	}

	in, err := io.ReadAll(io.LimitReader(stdin, MaxInput+1))
	if err != nil {
		return fail("read hook input: %v", err)
	}
	if len(in) > MaxInput {
		return fail("hook input larger than %d bytes", MaxInput)
	}

	req := Request{Token: token, Hook: name, Args: args, Stdin: in}
	if c := env["GIT_PUSH_OPTION_COUNT"]; c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			return fail("bad GIT_PUSH_OPTION_COUNT %q", c)
		}
		req.PushOptionCount = n
		for i := 0; i < n && i < maxClientPushOptions; i++ {
			req.PushOptions = append(req.PushOptions, env["GIT_PUSH_OPTION_"+strconv.Itoa(i)])
		}
	}
	for _, k := range QuarantineVars {
		if v, ok := env[k]; ok {
			req.Quarantine = append(req.Quarantine, k+"="+v)
		}
	}

	resp, err := Call(socket, &req, ClientTimeout)
	if err != nil {
		return fail("hook server unreachable: %v", err)
	}
	if resp.Message != "" {
		msg := resp.Message
		if !strings.HasSuffix(msg, "\n") {
			msg += "\n"
		}
		io.WriteString(stderr, msg)
	}
	if mustNotBlock {
		return 0
	}
	return resp.Code
}

// envMap turns KEY=VALUE pairs into a map; a later duplicate wins, as with
// os.Getenv.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// Call sends req to the server listening on socket and waits at most
// timeout for its answer.
func Call(socket string, req *Request, timeout time.Duration) (*Response, error) {
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	var resp Response
	if err := json.NewDecoder(io.LimitReader(conn, 1<<20)).Decode(&resp); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("connection closed without an answer")
		}
		return nil, fmt.Errorf("receive: %w", err)
	}
	return &resp, nil
}
