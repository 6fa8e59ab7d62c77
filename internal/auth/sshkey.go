package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// RSA key size bounds. 2048 bits is the floor NIST SP 800-57 accepts and
// what OpenSSH's ssh-keygen generates at minimum; 16384 is OpenSSH's own
// ceiling, and refusing larger keys bounds signature verification work.
const (
	minRSABits = 2048
	maxRSABits = 16384
)

// maxAuthorizedKeyLen bounds one authorized_keys line: a 16384-bit RSA key
// is about 2.8 KiB encoded, so 16 KiB leaves room for a comment.
const maxAuthorizedKeyLen = 16 << 10

// ParseAuthorizedKey parses one public key in authorized_keys format
// ("ssh-ed25519 AAAA… comment"), as users paste it, and applies the key
// policy: ed25519, ECDSA on P-256/P-384/P-521, or RSA of at least 2048
// bits. Options (command=…, from=…) and certificates are refused: a key
// uploaded to Sluice identifies a user or a deploy key, nothing more.
func ParseAuthorizedKey(line string) (ssh.PublicKey, string, error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, "", problem.New(problem.Invalid, "public key is empty")
	}
	if len(line) > maxAuthorizedKeyLen {
		return nil, "", problem.New(problem.Invalid, "public key is longer than %d bytes", maxAuthorizedKeyLen)
	}
	if strings.ContainsAny(line, "\r\n") {
		return nil, "", problem.New(problem.Invalid, "give one public key, on one line")
	}
	key, comment, options, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, "", problem.Wrap(problem.Invalid, err, "not a public key in authorized_keys format (like \"ssh-ed25519 AAAA… comment\")")
	}
	if len(options) > 0 {
		return nil, "", problem.New(problem.Invalid, "public key options (like %q) are not allowed", options[0])
	}
	if err := checkKeyPolicy(key); err != nil {
		return nil, "", err
	}
	if strings.ContainsFunc(comment, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, "", problem.New(problem.Invalid, "public key comment contains control characters")
	}
	return key, comment, nil
}

// checkKeyPolicy accepts the key types Sluice trusts.
func checkKeyPolicy(key ssh.PublicKey) error {
	switch key.Type() {
	case ssh.KeyAlgoED25519:
		return nil
	case ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		ck, ok := key.(ssh.CryptoPublicKey)
		if !ok {
			return problem.New(problem.Invalid, "unsupported ecdsa key")
		}
		ek, ok := ck.CryptoPublicKey().(*ecdsa.PublicKey)
		if !ok {
			return problem.New(problem.Invalid, "unsupported ecdsa key")
		}
		switch ek.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return problem.New(problem.Invalid, "unsupported ecdsa curve")
	case ssh.KeyAlgoRSA:
		ck, ok := key.(ssh.CryptoPublicKey)
		if !ok {
			return problem.New(problem.Invalid, "unsupported rsa key")
		}
		rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey)
		if !ok {
			return problem.New(problem.Invalid, "unsupported rsa key")
		}
		if bits := rk.N.BitLen(); bits < minRSABits || bits > maxRSABits {
			return problem.New(problem.Invalid, "rsa key has %d bits; use %d to %d bits, or better an ed25519 key", bits, minRSABits, maxRSABits)
		}
		return nil
	default:
		return problem.New(problem.Invalid, "key type %q is not accepted; use ed25519, ecdsa (P-256, P-384, P-521) or rsa (at least %d bits)", key.Type(), minRSABits)
	}
}

// PublicKey authenticates an SSH public key. A user's key gives that user's
// full principal; an access key gives a principal bound to its repository
// with its scope. Unknown keys, keys of disabled users and keys the policy
// no longer accepts give Unauthenticated.
//
// The SSH server must only trust the principal for a key the client has
// proven it holds: x/crypto/ssh may call the public-key callback for keys
// offered but never signed with (CVE-2024-45337), so sshd keeps the result
// in ssh.Permissions of the successful callback rather than remembering the
// last key it was asked about.
func (s *Service) PublicKey(ctx context.Context, key ssh.PublicKey) (*Principal, error) {
	p, err := s.publicKey(ctx, key)
	if key != nil {
		p, err = s.withGrace(methodPublicKey, s.grace.credential(methodPublicKey, key.Marshal()), p, err)
	}
	s.count(methodPublicKey, err)
	return p, err
}

func (s *Service) publicKey(ctx context.Context, key ssh.PublicKey) (*Principal, error) {
	fail := problem.New(problem.Unauthenticated, "public key not recognised")
	if key == nil {
		return nil, fail
	}
	fp := ssh.FingerprintSHA256(key)
	if err := checkKeyPolicy(key); err != nil {
		s.logger.Info("public key login failed", "fingerprint", fp, "reason", problem.Message(err))
		return nil, fail
	}
	k, err := s.st.SSHKeyByFingerprint(ctx, fp)
	if problem.Is(err, problem.NotFound) {
		s.logger.Info("public key login failed", "fingerprint", fp, "reason", "unknown key")
		return nil, fail
	}
	if err != nil {
		return nil, fmt.Errorf("public key login: read key: %w", err)
	}
	// The fingerprint is a SHA-256 of the key, so this only fails on a
	// damaged row; checking costs a parse and keeps the row honest.
	if stored, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.PublicKey)); err != nil || !bytes.Equal(stored.Marshal(), key.Marshal()) {
		s.logger.Warn("public key login failed", "fingerprint", fp, "key_id", k.ID, "reason", "stored key does not match its fingerprint")
		return nil, fail
	}
	var p *Principal
	switch {
	case k.RepoID != 0:
		scope := k.Scope
		if scope != store.ScopeWrite {
			// Access keys read or write; anything else reads only.
			scope = store.ScopeRead
		}
		p = &Principal{AccessKeyID: k.ID, AccessKeyRepoID: k.RepoID, Scope: scope}
	case k.UserID != 0:
		u, err := s.st.UserByID(ctx, k.UserID)
		if problem.Is(err, problem.NotFound) {
			s.logger.Info("public key login failed", "fingerprint", fp, "reason", "user deleted")
			return nil, fail
		}
		if err != nil {
			return nil, fmt.Errorf("public key login: read user: %w", err)
		}
		if !u.Active {
			s.logger.Info("public key login failed", "fingerprint", fp, "user", u.Name, "reason", "user disabled")
			return nil, fail
		}
		p = &Principal{UserID: u.ID, Name: u.Name}
	default:
		s.logger.Warn("public key login failed", "fingerprint", fp, "key_id", k.ID, "reason", "key has neither user nor repository")
		return nil, fail
	}
	now := s.now()
	if s.shouldTouch(touchKey{key: true, id: k.ID}, now) {
		if err := s.st.TouchSSHKey(ctx, k.ID, now); err != nil {
			s.logger.Warn("record key use", "key_id", k.ID, "err", err)
		}
	}
	return p, nil
}
