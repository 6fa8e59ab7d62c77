package accounts

import (
	"context"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// An SSH user key acts as its user with no scope limit, and so does a
// token of admin scope: neither may be minted by a caller authenticated
// with an access token, whatever its scope, or a leaked read token would be
// a way to a full-power credential. An access key is capped at its
// repository and read or write, and managing them needs REPO_ADMIN there.

// maxTokenLifetime caps a token's life at ten years: longer is "never" in
// practice, and the arithmetic stays far from overflowing a time.Time.
const maxTokenLifetime = 3650 * 24 * time.Hour

// ownerOrAdmin lets a caller manage owner's keys and tokens when they are
// owner or, with admins, a server administrator. what names the thing for
// the refusal.
func (s *Service) ownerOrAdmin(ctx context.Context, a Actor, owner *store.User, admins bool, what string) error {
	if err := s.signedIn(ctx, a); err != nil {
		return err
	}
	if a.IsSystem() || owner.ID == a.userID() {
		return nil
	}
	if admins && s.isAdmin(ctx, a) {
		return nil
	}
	return problem.New(problem.Forbidden, "you can only manage your own %s", what)
}

// fullSession refuses callers authenticated with an access token.
func fullSession(a Actor, what string) error {
	if a.viaToken() {
		return problem.New(problem.Forbidden, "access tokens cannot %s; sign in with your password", what)
	}
	return nil
}

// parseKey parses a pasted public key by auth's key policy; label ""
// takes the key's comment.
func parseKey(text, label string) (*store.SSHKey, error) {
	pub, comment, err := auth.ParseAuthorizedKey(text)
	if err != nil {
		return nil, err
	}
	label = strings.TrimSpace(label)
	if label == "" {
		label = strings.TrimSpace(comment)
	}
	if err := checkText("SSH key label", label, maxNameText); err != nil {
		return nil, err
	}
	return &store.SSHKey{
		Label:       label,
		PublicKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))),
		Fingerprint: ssh.FingerprintSHA256(pub),
	}, nil
}

// AddSSHKey adds a public key (authorized_keys format) that authenticates
// owner: by owner themselves or an administrator, signed in with a
// password.
func (s *Service) AddSSHKey(ctx context.Context, a Actor, owner *store.User, text, label string) (*store.SSHKey, error) {
	if err := s.ownerOrAdmin(ctx, a, owner, true, "SSH keys"); err != nil {
		return nil, err
	}
	if err := fullSession(a, "add SSH keys"); err != nil {
		return nil, err
	}
	k, err := parseKey(text, label)
	if err != nil {
		return nil, err
	}
	k.UserID = owner.ID
	if err := s.st.AddSSHKey(ctx, k); err != nil {
		return nil, err
	}
	s.logger.Info("ssh key added", "user", owner.Name, "key_id", k.ID, "fingerprint", k.Fingerprint, "actor", a.String())
	return k, nil
}

// DeleteSSHKey deletes owner's key id; another owner's key is NotFound,
// like a missing one.
func (s *Service) DeleteSSHKey(ctx context.Context, a Actor, owner *store.User, id int64) error {
	if err := s.ownerOrAdmin(ctx, a, owner, true, "SSH keys"); err != nil {
		return err
	}
	if err := fullSession(a, "delete SSH keys"); err != nil {
		return err
	}
	keys, err := s.st.ListSSHKeys(ctx, owner.ID)
	if err != nil {
		return err
	}
	return s.deleteKeyIn(ctx, a, keys, id)
}

// AddAccessKey adds a key that reaches repository r only, with scope read
// or write; REPO_ADMIN on r.
func (s *Service) AddAccessKey(ctx context.Context, a Actor, r *store.Repository, text, label string, scope store.Scope) (*store.SSHKey, error) {
	if err := s.authorize(ctx, a, auth.Resource{Repo: r}, auth.Admin); err != nil {
		return nil, err
	}
	if scope != store.ScopeRead && scope != store.ScopeWrite {
		return nil, problem.New(problem.Invalid, "an access key's permission must be read (REPO_READ) or write (REPO_WRITE)")
	}
	k, err := parseKey(text, label)
	if err != nil {
		return nil, err
	}
	k.RepoID, k.Scope = r.ID, scope
	if err := s.st.AddSSHKey(ctx, k); err != nil {
		return nil, err
	}
	s.logger.Info("access key added", "repo_id", r.ID, "key_id", k.ID, "scope", string(scope), "fingerprint", k.Fingerprint, "actor", a.String())
	return k, nil
}

// DeleteAccessKey deletes r's access key id; REPO_ADMIN on r.
func (s *Service) DeleteAccessKey(ctx context.Context, a Actor, r *store.Repository, id int64) error {
	if err := s.authorize(ctx, a, auth.Resource{Repo: r}, auth.Admin); err != nil {
		return err
	}
	keys, err := s.st.ListAccessKeys(ctx, r.ID)
	if err != nil {
		return err
	}
	return s.deleteKeyIn(ctx, a, keys, id)
}

// deleteKeyIn deletes key id if it is among keys: the store deletes by id
// alone, so ownership is checked here.
func (s *Service) deleteKeyIn(ctx context.Context, a Actor, keys []store.SSHKey, id int64) error {
	for _, k := range keys {
		if k.ID == id {
			if err := s.st.DeleteSSHKey(ctx, id); err != nil {
				return err
			}
			s.logger.Info("ssh key deleted", "key_id", id, "fingerprint", k.Fingerprint, "actor", a.String())
			return nil
		}
	}
	return problem.New(problem.NotFound, "SSH key not found")
}

// NewToken is an access token to create. Lifetime 0 never expires.
type NewToken struct {
	Name     string
	Scope    store.Scope
	Lifetime time.Duration
}

// CreateToken creates an access token for owner and returns its secret,
// shown once and stored only as a hash. Users create their own tokens,
// signed in with a password; the System creates anyone's.
func (s *Service) CreateToken(ctx context.Context, a Actor, owner *store.User, in NewToken) (string, *store.Token, error) {
	if err := s.ownerOrAdmin(ctx, a, owner, false, "access tokens"); err != nil {
		return "", nil, err
	}
	if err := fullSession(a, "create access tokens"); err != nil {
		return "", nil, err
	}
	if in.Lifetime < 0 || in.Lifetime > maxTokenLifetime {
		return "", nil, problem.New(problem.Invalid, "a token's lifetime must be at most %d days", int(maxTokenLifetime/(24*time.Hour)))
	}
	var expires *time.Time
	if in.Lifetime > 0 {
		t := s.now().Add(in.Lifetime).UTC()
		expires = &t
	}
	secret, tok, err := s.auth.CreateToken(ctx, owner.ID, in.Name, in.Scope, expires)
	if err != nil {
		return "", nil, err
	}
	s.logger.Info("token created", "user", owner.Name, "token_id", tok.ID, "scope", string(tok.Scope), "actor", a.String())
	return secret, tok, nil
}

// RevokeToken revokes owner's token id: by owner or an administrator.
func (s *Service) RevokeToken(ctx context.Context, a Actor, owner *store.User, id int64) error {
	if err := s.ownerOrAdmin(ctx, a, owner, true, "access tokens"); err != nil {
		return err
	}
	if err := s.st.RevokeToken(ctx, owner.ID, id); err != nil {
		return err
	}
	s.logger.Info("token revoked", "user", owner.Name, "token_id", id, "actor", a.String())
	return nil
}
