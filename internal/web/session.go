package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

const (
	// sessionCookie holds the session id. The __Host- prefix is not used
	// because it requires Secure, and plain-HTTP test and intranet setups
	// must work; Path=/ and no Domain give the same host-only scope.
	sessionCookie = "sluice_session"
	// preCookie holds the double-submit CSRF token of a visitor who is not
	// signed in (the sign-in form).
	preCookie = "sluice_csrf"
	// sessionIDBytes: 32 random bytes (256 bits) cannot be guessed.
	sessionIDBytes = 32
	// touchEvery limits session writes to one per interval per session,
	// so browsing does not turn every page view into a database write.
	touchEvery = 5 * time.Minute
	// maxFormBytes caps a posted form; the largest legitimate one (an SSH
	// key of 16 KiB, a comment) fits easily.
	maxFormBytes = 256 << 10
	csrfField    = "csrf"
)

func randomToken() (string, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func hashID(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// isHTTPS reports whether the browser reached us over TLS, directly or
// through a trusted proxy (the app's request log sets URL.Scheme then).
func isHTTPS(r *http.Request) bool { return r.TLS != nil || r.URL.Scheme == "https" }

func (c *call) setCookie(name, value string, maxAge int) {
	http.SetCookie(c.w, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: isHTTPS(c.r), SameSite: http.SameSiteLaxMode,
	})
}

// loadSession finds the caller's session and user. A missing, expired or
// unknown cookie just means anonymous; the database failing is an error.
func (s *server) loadSession(c *call) error {
	ck, err := c.r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return s.anonymousCSRF(c)
	}
	hash := hashID(ck.Value)
	now := s.Now().UTC()
	sess, err := s.Sessions.SessionByHash(c.ctx, hash, now)
	if problem.Is(err, problem.NotFound) {
		c.setCookie(sessionCookie, "", -1)
		return s.anonymousCSRF(c)
	}
	if err != nil {
		return err
	}
	u, err := s.Store.UserByID(c.ctx, sess.UserID)
	if problem.Is(err, problem.NotFound) || (err == nil && !u.Active) {
		// A disabled account's sessions end at once.
		if derr := s.Sessions.DeleteSession(c.ctx, hash); derr != nil {
			return derr
		}
		c.setCookie(sessionCookie, "", -1)
		return s.anonymousCSRF(c)
	}
	if err != nil {
		return err
	}
	if now.Sub(sess.LastSeenAt) > touchEvery {
		if err := s.Sessions.TouchSession(c.ctx, hash, now, now.Add(s.SessionTTL)); err != nil && !problem.Is(err, problem.NotFound) {
			s.logger.Warn("touch session", "user_id", u.ID, "err", err)
		}
	}
	c.sess, c.user, c.csrf = sess, u, sess.CSRF
	c.p = &auth.Principal{UserID: u.ID, Name: u.Name}
	return nil
}

// anonymousCSRF gives a visitor without a session a double-submit token,
// so that even the sign-in form cannot be posted from another site.
func (s *server) anonymousCSRF(c *call) error {
	if ck, err := c.r.Cookie(preCookie); err == nil && len(ck.Value) >= 40 && len(ck.Value) <= 100 {
		c.csrf = ck.Value
		return nil
	}
	tok, err := randomToken()
	if err != nil {
		return err
	}
	c.csrf = tok
	// Only pages that show a form need it, but any GET may precede one;
	// it is a random value and changes nothing on the server.
	c.setCookie(preCookie, tok, 0)
	return nil
}

// errCSRF is the refusal of a POST without a valid token.
var errCSRF = problem.New(problem.Forbidden, "the form expired or did not come from this site; reload the page and try again")

// checkCSRF verifies a POST: the body is capped, the browser's own
// cross-origin signals must not say "another site", and the form's token
// must equal the session's (or, before sign-in, the cookie's).
func (s *server) checkCSRF(c *call) error {
	c.r.Body = http.MaxBytesReader(c.w, c.r.Body, maxFormBytes)
	if site := c.r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return errCSRF
	}
	if origin := c.r.Header.Get("Origin"); origin != "" && origin != "null" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, c.r.Host) {
			return errCSRF
		}
	}
	if err := c.r.ParseForm(); err != nil {
		return problem.Wrap(problem.Invalid, err, "the form could not be read")
	}
	got := c.r.PostFormValue(csrfField)
	if got == "" || c.csrf == "" || subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf)) != 1 {
		s.logger.Info("csrf check failed", "path", c.r.URL.Path, "signed_in", c.signedIn())
		return errCSRF
	}
	return nil
}

// startSession signs u in: a new session (never a reused id, so a token
// planted before sign-in is worthless) and its cookie.
func (s *server) startSession(c *call, u *store.User) error {
	id, err := randomToken()
	if err != nil {
		return err
	}
	csrf, err := randomToken()
	if err != nil {
		return err
	}
	now := s.Now().UTC()
	sess := &store.Session{Hash: hashID(id), UserID: u.ID, CSRF: csrf, CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(s.SessionTTL)}
	if err := s.Sessions.CreateSession(c.ctx, sess); err != nil {
		return err
	}
	// A session cookie without Max-Age ends with the browser; the server
	// side still expires after SessionTTL of inactivity.
	c.setCookie(sessionCookie, id, 0)
	c.setCookie(preCookie, "", -1)
	c.sess, c.user, c.csrf = sess, u, csrf
	c.p = &auth.Principal{UserID: u.ID, Name: u.Name}
	return nil
}

// endSession signs the caller out.
func (s *server) endSession(c *call) error {
	if c.sess != nil {
		if err := s.Sessions.DeleteSession(c.ctx, c.sess.Hash); err != nil {
			return err
		}
	}
	c.setCookie(sessionCookie, "", -1)
	c.sess, c.user, c.p = nil, nil, auth.Anonymous()
	return nil
}

// securityHeaders are set on every response of the web UI.
func securityHeaders(h http.Header) {
	// No inline script or style anywhere: the one script and stylesheet
	// are files under /static/. Images may be data: URIs (none of ours
	// are remote); README images from other hosts stay blocked, which
	// also keeps readers from being tracked.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// secure sets the security headers and refuses methods the UI does not
// use before any handler runs.
func (s *server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		next.ServeHTTP(w, r)
	})
}
