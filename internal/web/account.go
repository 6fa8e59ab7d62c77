package web

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/accounts"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// Signing in and out, and the account page: password, access tokens, SSH
// keys. Every change goes through the accounts service, as the REST API's
// do.

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
	if err := c.s.Accounts.ChangePassword(c.ctx, c.actor(), current, pw, confirm); err != nil {
		return err
	}
	// Other browsers signed in with the old password are signed out.
	if err := c.s.Sessions.DeleteUserSessions(c.ctx, c.user.ID, c.sess.Hash); err != nil {
		return err
	}
	return c.flash("/account", "password")
}

func (c *call) createToken() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	var lifetime time.Duration
	if d := c.form("days"); d != "" && d != "0" {
		// The service bounds the lifetime; this only reads the number,
		// kept small enough not to overflow a Duration.
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 100000 {
			return problem.New(problem.Invalid, "expiry must be a number of days")
		}
		lifetime = time.Duration(n) * 24 * time.Hour
	}
	secret, _, err := c.s.Accounts.CreateToken(c.ctx, c.actor(), c.user,
		accounts.NewToken{Name: c.form("name"), Scope: store.Scope(c.form("scope")), Lifetime: lifetime})
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
	if err := c.s.Accounts.RevokeToken(c.ctx, c.actor(), c.user, id); err != nil {
		return err
	}
	return c.flash("/account", "token-revoked")
}

func (c *call) addKey() error {
	if err := c.requireUser(); err != nil {
		return err
	}
	if _, err := c.s.Accounts.AddSSHKey(c.ctx, c.actor(), c.user, c.r.PostFormValue("key"), c.form("label")); err != nil {
		return err
	}
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
	if err := c.s.Accounts.DeleteSSHKey(c.ctx, c.actor(), c.user, id); err != nil {
		if problem.Is(err, problem.NotFound) {
			return notFound()
		}
		return err
	}
	return c.flash("/account", "key-deleted")
}
