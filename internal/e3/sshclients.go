package e3

import (
	"bytes"
	"errors"
	"net"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// pinnedHostKey accepts the first host key it sees and then only that
// one, like OpenSSH's StrictHostKeyChecking=accept-new. Every node of a
// Sluice cluster serves the one host key kept in the database, so a
// change in the middle of a run means the clients reached something else.
type pinnedHostKey struct {
	mu  sync.Mutex
	key []byte
}

func (p *pinnedHostKey) check(_ string, _ net.Addr, key ssh.PublicKey) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.key == nil {
		p.key = key.Marshal()
		return nil
	}
	if !bytes.Equal(p.key, key.Marshal()) {
		return errors.New("ssh host key changed during the run")
	}
	return nil
}

// sshClients builds one SSH client per user with a key: each user
// authenticates with its own key, so the per-user rate limit and the
// server's key lookup see as many users over SSH as over HTTP.
func sshClients(addr string, keys map[string]ssh.Signer) (map[string]*loadgen.SSHClient, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if addr == "" {
		return nil, errors.New("the workload runs scripts over SSH but the instance has no SSH address")
	}
	pin := &pinnedHostKey{}
	out := make(map[string]*loadgen.SSHClient, len(keys))
	for user, signer := range keys {
		c, err := loadgen.NewSSHClient(loadgen.SSHOptions{Addr: addr, Signer: signer, HostKeyCallback: pin.check, Agent: "sluice-e3/1"})
		if err != nil {
			return nil, err
		}
		out[user] = c
	}
	return out, nil
}
