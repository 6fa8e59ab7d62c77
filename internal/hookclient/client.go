// Package hookclient is the program git runs as a hook: it forwards the
// call to the Sluice node that started git and relays the node's answer.
//
// It is its own package, importing nothing beyond the standard library's
// JSON and system calls, because a push runs it three times (pre-receive,
// then reference-transaction prepared and committed). Linked into the full
// sluice binary, every one of those processes pays for the initialisation
// of the whole server — syntax lexers, HTML sanitiser tables, metrics —
// about 17 ms of CPU, which was two thirds of a small push's cost. Linked
// alone into cmd/sluice-hook a call costs about 1.3 ms of CPU. Both run
// exactly this code: `sluice hook NAME` is the fallback when sluice-hook
// is not installed next to sluice.
//
// The wire protocol is one JSON Request per connection on the node's unix
// socket, answered by one JSON Response; internal/hooks is the server.
package hookclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
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
//
// It speaks to the socket with plain system calls on a blocking socket,
// bounded by SO_SNDTIMEO and SO_RCVTIMEO: the net package's poller, its
// goroutines and timers cost a hook process about a millisecond of CPU,
// a third of all it costs, for what is one blocking exchange.
func Call(socket string, req *Request, timeout time.Duration) (*Response, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	body = append(body, '\n')
	deadline := time.Now().Add(timeout)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	if err := setTimeout(fd, syscall.SO_SNDTIMEO, deadline); err != nil {
		return nil, err
	}
	if err := retry(func() error { return syscall.Connect(fd, &syscall.SockaddrUnix{Name: socket}) }); err != nil {
		return nil, fmt.Errorf("connect %s: %w", socket, err)
	}
	for len(body) > 0 {
		var n int
		err := retry(func() (err error) { n, err = syscall.Write(fd, body); return err })
		if err != nil {
			return nil, fmt.Errorf("send: %w", timedOut(err, timeout))
		}
		body = body[n:]
	}
	// The answer is one JSON document and a newline.
	var answer []byte
	buf := make([]byte, 4096)
	for !bytes.HasSuffix(answer, []byte{'\n'}) {
		if err := setTimeout(fd, syscall.SO_RCVTIMEO, deadline); err != nil {
			return nil, err
		}
		var n int
		err := retry(func() (err error) { n, err = syscall.Read(fd, buf); return err })
		if err != nil {
			return nil, fmt.Errorf("receive: %w", timedOut(err, timeout))
		}
		if n == 0 {
			if len(answer) == 0 {
				return nil, errors.New("connection closed without an answer")
			}
			break
		}
		if answer = append(answer, buf[:n]...); len(answer) > 1<<20 {
			return nil, errors.New("receive: answer larger than 1 MiB")
		}
	}
	var resp Response
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	return &resp, nil
}

// setTimeout bounds the socket's next blocking call by what is left until
// deadline.
func setTimeout(fd, opt int, deadline time.Time) error {
	left := time.Until(deadline)
	if left <= 0 {
		return errors.New("timed out")
	}
	tv := syscall.NsecToTimeval(left.Nanoseconds())
	if tv.Sec == 0 && tv.Usec == 0 {
		tv.Usec = 1 // zero would mean no timeout at all
	}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
		return fmt.Errorf("set socket timeout: %w", err)
	}
	return nil
}

// retry repeats a system call that a signal interrupted.
func retry(call func() error) error {
	for {
		if err := call(); err != syscall.EINTR {
			return err
		}
	}
}

// timedOut names what EAGAIN means on a socket with a timeout.
func timedOut(err error, timeout time.Duration) error {
	if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
		return fmt.Errorf("no answer within %v", timeout)
	}
	return err
}
