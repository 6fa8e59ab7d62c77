package web

import (
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Signing in and out, and the account page: password, access tokens, SSH
// keys. Every change goes through auth (passwords, tokens, key policy) and
// the store, as the REST API's do.

type loginData struct {
	Next  string
	Name  string
	Error string
}

// safeNext keeps a post-sign-in redirect on this site: a local absolute
// path, not "//host" or "/\host", which browsers treat as another origin.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsAny(next, "\r\n") || len(next) > 2048 {
		return "/"
	}
	return next
}

func (c *call) loginForm() error {
	if c.signedIn() {
		return c.redirect(safeNext(c.query("next")))
	}
	return c.ok("login", "Sign in", loginData{Next: safeNext(c.query("next"))})
}

func (c *call) login() error {
	name, pw, next := c.form("username"), c.r.PostFormValue("password"), safeNext(c.form("next"))
	p, err := c.s.Auth.Password(c.ctx, name, pw)
	if problem.Is(err, problem.Unauthenticated) {
		c.s.logger.Info("web sign-in failed", "user", name)
		return c.s.render(c, 401, "login", "Sign in", loginData{Next: next, Name: name, Error: problem.Message(err)})
	}
	if err != nil {
		return err
	}
	u, err := c.s.Store.UserByID(c.ctx, p.UserID)
	if err != nil {
		return err
	}
	if err := c.s.startSession(c, u); err != nil {
		return err
	}
	c.s.logger.Info("web sign-in", "user", u.Name)
	return c.redirect(next)
}

func (c *call) logout() error {
	if err := c.s.endSession(c); err != nil {
		return err
	}
	return c.redirect("/")
}

type accountData struct {
	Tokens   []store.Token
	Keys     []store.SSHKey
	NewToken string // shown once, right after creation
	Now      time.Time
}

func (c *call) account() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	return c.renderAccount("")
}

func (c *call) renderAccount(newToken string) error {
	tokens, err := c.s.Store.ListTokens(c.ctx, c.user.ID)
	if err != nil {
		return err
	}
	keys, err := c.s.Store.ListSSHKeys(c.ctx, c.user.ID)
	if err != nil {
		return err
	}
	if newToken != "" {
		// The secret must not linger in caches or history.
		c.w.Header().Set("Cache-Control", "no-store")
	}
	return c.ok("account", "Account settings", accountData{Tokens: tokens, Keys: keys, NewToken: newToken, Now: c.s.Now()})
}

func (c *call) changePassword() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	current, pw, confirm := c.r.PostFormValue("current"), c.r.PostFormValue("password"), c.r.PostFormValue("confirm")
	if _, err := c.s.Auth.Password(c.ctx, c.user.Name, current); err != nil {
		if problem.Is(err, problem.Unauthenticated) {
			return problem.New(problem.Invalid, "the current password is not right")
		}
		return err
	}
	if pw != confirm {
		return problem.New(problem.Invalid, "the new password and its confirmation differ")
	}
	hash, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	u := *c.user
	u.PasswordHash = hash
	if err := c.s.Store.UpdateUser(c.ctx, &u); err != nil {
		return err
	}
	// Other browsers signed in with the old password are signed out.
	if err := c.s.Sessions.DeleteUserSessions(c.ctx, u.ID, c.sess.Hash); err != nil {
		return err
	}
	c.s.logger.Info("password changed", "user", u.Name)
	return c.flash("/account", "password")
}

func (c *call) createToken() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	var expires *time.Time
	if d := c.form("days"); d != "" && d != "0" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 3650 {
			return problem.New(problem.Invalid, "expiry must be a number of days up to 3650")
		}
		t := c.s.Now().Add(time.Duration(n) * 24 * time.Hour)
		expires = &t
	}
	secret, _, err := c.s.Auth.CreateToken(c.ctx, c.user.ID, c.form("name"), store.Scope(c.form("scope")), expires)
	if err != nil {
		return err
	}
	// Rendered directly, not redirected: the secret is shown once and
	// must never travel in a URL.
	return c.renderAccount(secret)
}

func (c *call) pathID() (int64, error) {
	id, err := strconv.ParseInt(c.r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, notFound()
	}
	return id, nil
}

func (c *call) revokeToken() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	id, err := c.pathID()
	if err != nil {
		return err
	}
	// The store only revokes the caller's own token.
	if err := c.s.Store.RevokeToken(c.ctx, c.user.ID, id); err != nil {
		return err
	}
	c.s.logger.Info("token revoked", "user", c.user.Name, "token_id", id)
	return c.flash("/account", "token-revoked")
}

func (c *call) addKey() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	key, comment, err := auth.ParseAuthorizedKey(c.r.PostFormValue("key"))
	if err != nil {
		return err
	}
	label := c.form("label")
	if label == "" {
		label = comment
	}
	k := &store.SSHKey{
		UserID:      c.user.ID,
		Label:       label,
		PublicKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))),
		Fingerprint: ssh.FingerprintSHA256(key),
	}
	if err := c.s.Store.AddSSHKey(c.ctx, k); err != nil {
		return err
	}
	c.s.logger.Info("ssh key added", "user", c.user.Name, "fingerprint", k.Fingerprint)
	return c.flash("/account", "key-added")
}

func (c *call) deleteKey() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	id, err := c.pathID()
	if err != nil {
		return err
	}
	keys, err := c.s.Store.ListSSHKeys(c.ctx, c.user.ID)
	if err != nil {
		return err
	}
	// Only one's own key: the store deletes by id alone.
	for _, k := range keys {
		if k.ID == id {
			if err := c.s.Store.DeleteSSHKey(c.ctx, id); err != nil {
				return err
			}
			c.s.logger.Info("ssh key deleted", "user", c.user.Name, "fingerprint", k.Fingerprint)
			return c.flash("/account", "key-deleted")
		}
	}
	return notFound()
}
