package api

import (
	"strconv"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// SSH keys at Bitbucket's paths: a user's own keys under /rest/ssh/1.0/keys
// (administrators reach another user's with ?user=NAME), and repository
// access keys under /rest/keys/1.0/projects/{key}/repos/{slug}/ssh.
//
// An SSH user key acts as its user with no scope limit, so adding one needs
// a password session: an access token, whatever its scope, must not be a
// way to a full-power credential (the same rule as creating tokens). An
// access key is capped at its repository and REPO_READ or REPO_WRITE, and
// managing them needs REPO_ADMIN on that repository.

const (
	sshKeysBase    = "/rest/ssh/1.0/keys"
	accessKeysBase = "/rest/keys/1.0/projects/{key}/repos/{slug}/ssh"
)

func (s *server) sshKeyRoutes() []route {
	user := q("user", "another user's keys (ADMIN)")
	return []route{
		{Method: "GET", Pattern: sshKeysBase, Summary: "List your SSH keys (or, for ADMIN, a user's)", Paged: true,
			Query: []param{user}, handle: (*call).listSSHKeys},
		{Method: "POST", Pattern: sshKeysBase, Summary: "Add an SSH public key (signed in with a password)", Success: 201,
			Query: []param{user}, Body: "{text, label}", handle: (*call).addSSHKey},
		{Method: "DELETE", Pattern: sshKeysBase + "/{keyId}", Summary: "Delete one of your SSH keys (or, for ADMIN, a user's)", Success: 204,
			Query: []param{user}, handle: (*call).deleteSSHKey},
		{Method: "GET", Pattern: accessKeysBase, Summary: "List a repository's access keys (REPO_ADMIN)", Paged: true,
			handle: (*call).listAccessKeys},
		{Method: "POST", Pattern: accessKeysBase, Summary: "Add an access key to a repository (REPO_ADMIN)", Success: 201,
			Body: "{key: {text, label}, permission: REPO_READ|REPO_WRITE}", handle: (*call).addAccessKey},
		{Method: "DELETE", Pattern: accessKeysBase + "/{keyId}", Summary: "Delete a repository's access key (REPO_ADMIN)", Success: 204,
			handle: (*call).deleteAccessKey},
	}
}

type sshKeyJSON struct {
	ID                int64  `json:"id"`
	Text              string `json:"text"`
	Label             string `json:"label"`
	Fingerprint       string `json:"fingerprint"`
	CreatedDate       int64  `json:"createdDate"`
	LastAuthenticated int64  `json:"lastAuthenticated,omitempty"`
}

type accessKeyJSON struct {
	Key        sshKeyJSON `json:"key"`
	Repository repoJSON   `json:"repository"`
	Permission string     `json:"permission"`
}

type sshKeyBody struct {
	Text  string `json:"text"`
	Label string `json:"label"`
}

type accessKeyBody struct {
	Key        sshKeyBody `json:"key"`
	Permission string     `json:"permission"`
}

func toSSHKeyJSON(k *store.SSHKey) sshKeyJSON {
	out := sshKeyJSON{ID: k.ID, Text: k.PublicKey, Label: k.Label, Fingerprint: k.Fingerprint, CreatedDate: millis(k.CreatedAt)}
	if k.LastUsedAt != nil {
		out.LastAuthenticated = millis(*k.LastUsedAt)
	}
	return out
}

// sshKeyOwner is the user whose keys the call manages: the caller, or with
// ?user=NAME another user when the caller is an administrator.
func (c *call) sshKeyOwner() (*store.User, error) {
	if err := c.signedIn(); err != nil {
		return nil, err
	}
	name := c.query("user")
	if name == "" {
		return c.s.Store.UserByID(c.ctx, c.p.UserID)
	}
	u, err := c.s.Store.UserByName(c.ctx, name)
	if err != nil && !problem.Is(err, problem.NotFound) {
		return nil, err
	}
	if err == nil && u.ID == c.p.UserID {
		return u, nil
	}
	// Non-administrators learn nothing about whether the user exists.
	if err := c.global(auth.Admin); err != nil {
		return nil, problem.New(problem.Forbidden, "you can only manage your own SSH keys")
	}
	if u == nil {
		return nil, problem.New(problem.NotFound, "user %s not found", quoteShort(name))
	}
	return u, nil
}

func (c *call) listSSHKeys() error {
	u, err := c.sshKeyOwner()
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	keys, err := c.s.Store.ListSSHKeys(c.ctx, u.ID)
	if err != nil {
		return err
	}
	return c.json(mapPage(slicePage(keys, pg), func(k store.SSHKey) sshKeyJSON { return toSSHKeyJSON(&k) }))
}

func (c *call) addSSHKey() error {
	u, err := c.sshKeyOwner()
	if err != nil {
		return err
	}
	var b sshKeyBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	k, err := c.s.Accounts.AddSSHKey(c.ctx, c.actor(), u, b.Text, b.Label)
	if err != nil {
		return err
	}
	return c.jsonStatus(201, toSSHKeyJSON(k))
}

func (c *call) keyID() (int64, error) {
	id, err := strconv.ParseInt(c.path("keyId"), 10, 64)
	if err != nil || id <= 0 {
		return 0, problem.New(problem.NotFound, "SSH key not found")
	}
	return id, nil
}

func (c *call) deleteSSHKey() error {
	u, err := c.sshKeyOwner()
	if err != nil {
		return err
	}
	id, err := c.keyID()
	if err != nil {
		return err
	}
	if err := c.s.Accounts.DeleteSSHKey(c.ctx, c.actor(), u, id); err != nil {
		return err
	}
	return c.noContent()
}

func accessPermission(s store.Scope) string {
	if s == store.ScopeWrite {
		return string(store.PermRepoWrite)
	}
	return string(store.PermRepoRead)
}

func (c *call) listAccessKeys() error {
	proj, r, err := c.repoFor(auth.Admin)
	if err != nil {
		return err
	}
	pg, err := c.page()
	if err != nil {
		return err
	}
	keys, err := c.s.Store.ListAccessKeys(c.ctx, r.ID)
	if err != nil {
		return err
	}
	rj := c.s.repoJSON(r, proj)
	return c.json(mapPage(slicePage(keys, pg), func(k store.SSHKey) accessKeyJSON {
		return accessKeyJSON{Key: toSSHKeyJSON(&k), Repository: rj, Permission: accessPermission(k.Scope)}
	}))
}

func (c *call) addAccessKey() error {
	proj, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	var b accessKeyBody
	if err := c.decode(&b, false); err != nil {
		return err
	}
	var scope store.Scope
	switch store.Permission(b.Permission) {
	case store.PermRepoRead:
		scope = store.ScopeRead
	case store.PermRepoWrite:
		scope = store.ScopeWrite
	default:
		return problem.New(problem.Invalid, "permission must be REPO_READ or REPO_WRITE")
	}
	k, err := c.s.Accounts.AddAccessKey(c.ctx, c.actor(), r, b.Key.Text, b.Key.Label, scope)
	if err != nil {
		return err
	}
	return c.jsonStatus(201, accessKeyJSON{Key: toSSHKeyJSON(k), Repository: c.s.repoJSON(r, proj), Permission: accessPermission(scope)})
}

func (c *call) deleteAccessKey() error {
	_, r, err := c.repoFor(auth.Read)
	if err != nil {
		return err
	}
	id, err := c.keyID()
	if err != nil {
		return err
	}
	if err := c.s.Accounts.DeleteAccessKey(c.ctx, c.actor(), r, id); err != nil {
		return err
	}
	return c.noContent()
}
