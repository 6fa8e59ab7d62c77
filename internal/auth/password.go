package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"

	"github.com/sluice-scm/sluice/internal/problem"
)

// Password hashing parameters. OWASP's Password Storage Cheat Sheet lists
// argon2id with m=19456 KiB (19 MiB), t=2, p=1 as its minimum
// configuration; it costs tens of milliseconds, where the RFC 9106 default
// of 2 GiB (or even 64 MiB) would make every login and every test slow on a
// small server. The parameters are written into each hash, so raising them
// later only affects new hashes.
const (
	argonMemory  = 19456 // KiB
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

// Password lengths. A password longer than 1024 bytes is not a password a
// person types; refusing it bounds the hashing work an attacker can ask for.
const (
	minPasswordLen = 1
	maxPasswordLen = 1024
)

// Bounds on parameters read back from a stored hash, so a damaged or hostile
// row cannot make one verification take gigabytes or minutes.
const (
	maxArgonMemory  = 1 << 20 // KiB, 1 GiB
	maxArgonTime    = 32
	maxArgonThreads = 64
)

// HashPassword hashes pw with argon2id and returns a PHC string:
// $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash> (unpadded standard base64).
func HashPassword(pw string) (string, error) {
	if err := checkPasswordLength(pw); err != nil {
		return "", err
	}
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt),
		base64.RawStdEncoding.EncodeToString(key)), nil
}

func checkPasswordLength(pw string) error {
	if len(pw) < minPasswordLen || len(pw) > maxPasswordLen {
		return problem.New(problem.Invalid, "password must be %d to %d bytes long", minPasswordLen, maxPasswordLen)
	}
	return nil
}

// VerifyPassword reports whether pw matches hash, a PHC string from
// HashPassword. The comparison is constant-time; a malformed hash or a
// password outside the length limits never matches.
func VerifyPassword(hash, pw string) bool {
	if checkPasswordLength(pw) != nil {
		return false
	}
	ph, ok := parsePHC(hash)
	if !ok {
		return false
	}
	got := argon2.IDKey([]byte(pw), ph.salt, ph.time, ph.memory, ph.threads, uint32(len(ph.key)))
	return subtle.ConstantTimeCompare(got, ph.key) == 1
}

type phc struct {
	memory, time uint32
	threads      uint8
	salt, key    []byte
}

// parsePHC parses "$argon2id$v=19$m=…,t=…,p=…$salt$key".
func parsePHC(s string) (phc, bool) {
	var ph phc
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return ph, false
	}
	var seen [3]bool
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return ph, false
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return ph, false
		}
		switch k {
		case "m":
			ph.memory, seen[0] = uint32(n), true
		case "t":
			ph.time, seen[1] = uint32(n), true
		case "p":
			if n > 255 {
				return ph, false
			}
			ph.threads, seen[2] = uint8(n), true
		default:
			return ph, false
		}
	}
	if !seen[0] || !seen[1] || !seen[2] ||
		ph.time < 1 || ph.time > maxArgonTime ||
		ph.threads < 1 || ph.threads > maxArgonThreads ||
		ph.memory < 8*uint32(ph.threads) || ph.memory > maxArgonMemory {
		return ph, false
	}
	var err error
	if ph.salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[4]); err != nil || len(ph.salt) < 8 || len(ph.salt) > 64 {
		return ph, false
	}
	if ph.key, err = base64.RawStdEncoding.Strict().DecodeString(parts[5]); err != nil || len(ph.key) < 16 || len(ph.key) > 128 {
		return ph, false
	}
	return ph, true
}

// dummyHash is verified against when a login names no usable account, so
// that an unknown user name costs the same time as a wrong password and the
// response time does not tell which names exist.
var dummyHash = sync.OnceValue(func() string {
	pw := make([]byte, 32)
	_, _ = rand.Read(pw)
	h, err := HashPassword(base64.RawURLEncoding.EncodeToString(pw))
	if err != nil {
		panic(fmt.Sprintf("hash dummy password: %v", err))
	}
	return h
})

const msgBadPassword = "invalid username or password"

// maxUserNameLen bounds a login name before it reaches the store; real
// names are validated by store.ValidateUserName when accounts are created.
const maxUserNameLen = 255

// Password authenticates a user name and password. Every failure (unknown
// user, wrong password, disabled account, account without a password) gives
// the same Unauthenticated error after the same amount of hashing work.
func (s *Service) Password(ctx context.Context, name, pw string) (*Principal, error) {
	p, err := s.password(ctx, name, pw)
	p, err = s.withGrace(methodPassword, s.grace.credential(methodPassword, []byte(name), []byte(pw)), p, err)
	s.count(methodPassword, err)
	return p, err
}

func (s *Service) password(ctx context.Context, name, pw string) (*Principal, error) {
	fail := problem.New(problem.Unauthenticated, msgBadPassword)
	if name == "" || len(name) > maxUserNameLen || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\r\n") {
		s.verify(dummyHash(), pw)
		return nil, fail
	}
	u, err := s.st.UserByName(ctx, name)
	if err != nil && !problem.Is(err, problem.NotFound) {
		return nil, fmt.Errorf("password login: read user: %w", err)
	}
	if u == nil || err != nil || u.PasswordHash == "" {
		s.verify(dummyHash(), pw)
		s.logger.Info("password login failed", "user", name, "reason", "no such user or no password")
		return nil, fail
	}
	now := s.now()
	if !s.verified.hit(u.Name, pw, u.PasswordHash, now) {
		if !s.verify(u.PasswordHash, pw) {
			s.logger.Info("password login failed", "user", u.Name, "reason", "wrong password")
			return nil, fail
		}
		s.verified.add(u.Name, pw, u.PasswordHash, now)
	}
	if !u.Active {
		s.logger.Info("password login failed", "user", u.Name, "reason", "user disabled")
		return nil, fail
	}
	return &Principal{UserID: u.ID, Name: u.Name}, nil
}
