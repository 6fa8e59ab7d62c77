// Package notify is Sluice's notifications: an inbox row per user and
// event (review requested, a comment on one's pull request, merged,
// declined), and e-mail through net/smtp when SMTP is configured. The
// events come from package pull, which says what happened through
// Notify; who hears of it, what they are told and how it is delivered
// are this package's business.
//
// The request that causes an event only enqueues a notify job; the job
// works out who to tell, writes each one's inbox row, and emails those
// rows when SMTP is configured. Rows are unique per (user, event), so a
// job River retries after a failed email neither doubles the inbox nor
// re-sends the mails that went out: it sends only the rows not yet marked
// emailed.
//
// A recipient who can no longer read the target repository is skipped: a
// notification carries the pull request's title.
//
// Inbox, UnreadCount and MarkRead feed the dashboard and the inbox REST
// routes. Store side: store.NotificationStore.
package notify

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/jobs"
	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// JobNotify is the notify job kind. Its name is older than this package
// (queued jobs carry it), so it stays.
const JobNotify = "pull-notify" // {kind, pr_id, actor_id, users, comment_id, version}

// SMTPConfig is the mail server notifications go through. An empty Host
// means no email.
type SMTPConfig struct {
	Host     string
	Port     int
	From     string
	Username string
	Password string
	// BaseURL prefixes the links in mail (config server.base_url).
	BaseURL string
	// Timeout bounds one delivery (default 30 s).
	Timeout time.Duration
}

func (c *SMTPConfig) defaults() {
	if c.Port <= 0 {
		c.Port = 25
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
}

// Deps is what the service needs from the node.
type Deps struct {
	Store store.Store
	// Pulls reads the pull request, comment and participants of an event.
	Pulls store.PullStore
	// Notifications is the inbox store; nil turns notifications off.
	Notifications store.NotificationStore
	// Auth, when set, keeps notifications from users who can no longer
	// read the repository.
	Auth   *auth.Service
	Jobs   *jobs.Queue
	Logger *slog.Logger
	// SMTP sends notification email; an empty Host sends none.
	SMTP SMTPConfig
}

// Service is the notifications of one node. A nil *Service notifies
// nobody and has an empty inbox.
type Service struct {
	st     store.Store
	ps     store.PullStore
	notes  store.NotificationStore
	auth   *auth.Service
	jobs   *jobs.Queue
	logger *slog.Logger
	smtp   SMTPConfig
}

// New builds the service and registers the notify job's handler. Call
// it before the job queue starts.
func New(d Deps) *Service {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	d.SMTP.defaults()
	s := &Service{st: d.Store, ps: d.Pulls, notes: d.Notifications, auth: d.Auth, jobs: d.Jobs,
		logger: d.Logger.With("component", "notify"), smtp: d.SMTP}
	if s.jobs != nil {
		s.jobs.Handle(JobNotify, s.runNotify)
	}
	return s
}

// Event is one thing that happened to a pull request that people hear of.
type Event struct {
	Kind      string  `json:"kind"` // store.Notify*
	PRID      int64   `json:"pr_id"`
	ActorID   int64   `json:"actor_id,omitempty"`
	Users     []int64 `json:"users,omitempty"` // new reviewers, for REVIEW_REQUESTED
	CommentID int64   `json:"comment_id,omitempty"`
	Version   int64   `json:"version,omitempty"` // tells a second decline from the first
}

// Notify enqueues the notify job of one event, logging instead of failing:
// the event has happened either way.
func (s *Service) Notify(ev Event) {
	if s == nil || s.jobs == nil {
		return
	}
	if ev.Kind == store.NotifyReviewRequested && len(ev.Users) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.jobs.Enqueue(ctx, JobNotify, ev); err != nil {
		s.logger.Warn("enqueue job", "kind", JobNotify, "err", err)
	}
}

func (a Event) dedupe() string {
	switch a.Kind {
	case store.NotifyComment:
		return fmt.Sprintf("pr:%d:comment:%d", a.PRID, a.CommentID)
	case store.NotifyDeclined:
		return fmt.Sprintf("pr:%d:declined:%d", a.PRID, a.Version)
	case store.NotifyMerged:
		return fmt.Sprintf("pr:%d:merged", a.PRID)
	}
	return fmt.Sprintf("pr:%d:review", a.PRID)
}

func (s *Service) runNotify(ctx context.Context, payload json.RawMessage) error {
	var args Event
	if err := json.Unmarshal(payload, &args); err != nil {
		return fmt.Errorf("decode notify args: %w", err)
	}
	if s.notes == nil {
		return nil
	}
	pr, err := s.ps.PullRequestByID(ctx, args.PRID)
	if problem.Is(err, problem.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	target, err := s.st.RepoByID(ctx, pr.RepoID)
	if problem.Is(err, problem.NotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	recipients, title, body, err := s.recipients(ctx, args, pr, target)
	if err != nil {
		return err
	}
	dedupe := args.dedupe()
	link := fmt.Sprintf("/projects/%s/repos/%s/pull-requests/%d", url.PathEscape(target.ProjectKey), url.PathEscape(target.Slug), pr.Number)
	for _, uid := range recipients {
		if uid == 0 || uid == args.ActorID || !s.canRead(ctx, uid, target) {
			continue
		}
		n := &store.Notification{UserID: uid, Dedupe: dedupe, Kind: args.Kind, RepoID: pr.RepoID, PRID: pr.ID,
			ActorID: args.ActorID, Title: title, Body: body, Link: link}
		if _, err := s.notes.AddNotification(ctx, n); err != nil {
			return err
		}
	}
	if s.smtp.Host == "" {
		return nil
	}
	return s.mailUnsent(ctx, dedupe)
}

// recipients works out who hears of an event, and what they are told.
func (s *Service) recipients(ctx context.Context, a Event, pr *store.PullRequest, target *store.Repository) ([]int64, string, string, error) {
	actor := "Someone"
	if a.ActorID != 0 {
		if u, err := s.st.UserByID(ctx, a.ActorID); err == nil {
			actor = u.DisplayName
			if actor == "" {
				actor = u.Name
			}
		}
	}
	ref := fmt.Sprintf("%s/%s#%d", target.ProjectKey, target.Slug, pr.Number)
	switch a.Kind {
	case store.NotifyReviewRequested:
		return a.Users, fmt.Sprintf("%s asked you to review %s: %s", actor, ref, pr.Title), pr.Description, nil
	case store.NotifyComment:
		c, err := s.ps.CommentByID(ctx, pr.ID, a.CommentID)
		if problem.Is(err, problem.NotFound) {
			return nil, "", "", nil // deleted before the job ran
		}
		if err != nil {
			return nil, "", "", err
		}
		users := []int64{pr.AuthorID}
		if c.ParentID != 0 {
			if parent, err := s.ps.CommentByID(ctx, pr.ID, c.ParentID); err == nil && !contains(users, parent.AuthorID) {
				users = append(users, parent.AuthorID)
			}
		}
		users, err = s.withWatchers(ctx, pr.ID, users)
		if err != nil {
			return nil, "", "", err
		}
		return users, fmt.Sprintf("%s commented on %s: %s", actor, ref, pr.Title), c.Text, nil
	case store.NotifyMerged, store.NotifyDeclined:
		parts, err := s.ps.Participants(ctx, pr.ID)
		if err != nil {
			return nil, "", "", err
		}
		users := []int64{pr.AuthorID}
		for _, p := range parts {
			if p.Role == store.RoleReviewer && !contains(users, p.UserID) {
				users = append(users, p.UserID)
			}
		}
		users, err = s.withWatchers(ctx, pr.ID, users)
		if err != nil {
			return nil, "", "", err
		}
		verb := "merged"
		if a.Kind == store.NotifyDeclined {
			verb = "declined"
		}
		return users, fmt.Sprintf("%s %s %s: %s", actor, verb, ref, pr.Title), "", nil
	}
	return nil, "", "", fmt.Errorf("unknown notification kind %q", a.Kind)
}

// withWatchers adds the pull request's watchers to users (once each):
// watching is asking for its comments, merge and decline.
func (s *Service) withWatchers(ctx context.Context, prID int64, users []int64) ([]int64, error) {
	watchers, err := s.ps.Watchers(ctx, prID)
	if err != nil {
		return nil, err
	}
	for _, id := range watchers {
		if !contains(users, id) {
			users = append(users, id)
		}
	}
	return users, nil
}

// canRead asks auth, when the service has it, whether the user may still
// read the repository.
func (s *Service) canRead(ctx context.Context, userID int64, r *store.Repository) bool {
	u, err := s.st.UserByID(ctx, userID)
	if err != nil || !u.Active {
		return false
	}
	if s.auth == nil {
		return true
	}
	res := auth.Resource{Repo: r}
	if proj, err := s.st.ProjectByID(ctx, r.ProjectID); err == nil {
		res.Project = proj
	}
	return s.auth.Authorize(ctx, &auth.Principal{UserID: u.ID, Name: u.Name}, res, auth.Read) == nil
}

// mailUnsent emails every notification of an event not yet emailed to a
// user with an address, marking each once the server took it.
func (s *Service) mailUnsent(ctx context.Context, dedupe string) error {
	rows, err := s.notes.UnsentNotifications(ctx, dedupe)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range rows {
		u, err := s.st.UserByID(ctx, n.UserID)
		if err != nil || u.Email == "" {
			continue
		}
		if err := s.sendMail(ctx, u, &n); err != nil {
			s.logger.Warn("send notification email", "notification_id", n.ID, "user_id", u.ID, "err", err)
			errs = append(errs, err)
			continue
		}
		if err := s.notes.MarkNotificationEmailed(ctx, n.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// headerSafe keeps a value on one header line.
func headerSafe(v string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r == 0 {
			return ' '
		}
		return r
	}, v)
}

// message renders one notification as an RFC 5322 message.
func (c *SMTPConfig) message(to string, n *store.Notification) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\n", headerSafe(c.From))
	fmt.Fprintf(&b, "To: %s\r\n", headerSafe(to))
	fmt.Fprintf(&b, "Subject: %s\r\n", mime.QEncoding.Encode("utf-8", headerSafe(n.Title)))
	fmt.Fprintf(&b, "Date: %s\r\n", n.CreatedAt.Format(time.RFC1123Z))
	fmt.Fprintf(&b, "Message-ID: <sluice-notification-%d@%s>\r\n", n.ID, headerSafe(c.Host))
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n")
	b.WriteString("Auto-Submitted: auto-generated\r\n\r\n")
	body := n.Title + "\n\n"
	if n.Body != "" {
		body += n.Body + "\n\n"
	}
	body += strings.TrimRight(c.BaseURL, "/") + n.Link + "\n"
	// SMTP lines end in CRLF and a line holding only "." ends the data;
	// textproto's DotWriter (under smtp.Client.Data) escapes the dots.
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\n", "\r\n"))
	return []byte(b.String())
}

// sendMail delivers one message with net/smtp: STARTTLS when the server
// offers it, PLAIN authentication when configured, bounded by a deadline
// on the connection (net/smtp itself has no timeouts).
func (s *Service) sendMail(ctx context.Context, u *store.User, n *store.Notification) error {
	c := &s.smtp
	to, err := mail.ParseAddress(u.Email)
	if err != nil {
		return fmt.Errorf("user %d has an invalid email address", u.ID)
	}
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial smtp: %w", err)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	cl, err := smtp.NewClient(conn, c.Host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer cl.Close()
	if ok, _ := cl.Extension("STARTTLS"); ok {
		if err := cl.StartTLS(&tls.Config{ServerName: c.Host, MinVersion: tls.VersionTLS12}); err != nil {
			return fmt.Errorf("smtp starttls: %w", err)
		}
	}
	if c.Username != "" {
		if err := cl.Auth(smtp.PlainAuth("", c.Username, c.Password, c.Host)); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
	from, err := mail.ParseAddress(c.From)
	if err != nil {
		return fmt.Errorf("smtp from address: %w", err)
	}
	if err := cl.Mail(from.Address); err != nil {
		return fmt.Errorf("smtp mail from: %w", err)
	}
	if err := cl.Rcpt(to.Address); err != nil {
		return fmt.Errorf("smtp rcpt: %w", err)
	}
	w, err := cl.Data()
	if err != nil {
		return fmt.Errorf("smtp data: %w", err)
	}
	if _, err := w.Write(c.message(to.Address, n)); err != nil {
		return fmt.Errorf("smtp data: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp data: %w", err)
	}
	return cl.Quit()
}

// Inbox lists a user's notifications, newest first (the dashboard's
// inbox); unreadOnly leaves out those already read.
func (s *Service) Inbox(ctx context.Context, userID int64, unreadOnly bool, pg store.Page) ([]store.Notification, error) {
	if s == nil || s.notes == nil || userID == 0 {
		return []store.Notification{}, nil
	}
	return s.notes.ListNotifications(ctx, userID, unreadOnly, pg)
}

// UnreadCount is the number of a user's unread notifications.
func (s *Service) UnreadCount(ctx context.Context, userID int64) (int, error) {
	if s == nil || s.notes == nil || userID == 0 {
		return 0, nil
	}
	return s.notes.UnreadNotifications(ctx, userID)
}

// MarkRead marks a user's notifications read: ids, or all when ids is
// empty. It returns how many changed.
func (s *Service) MarkRead(ctx context.Context, userID int64, ids []int64) (int64, error) {
	if s == nil || s.notes == nil || userID == 0 {
		return 0, nil
	}
	if len(ids) > 1000 {
		return 0, problem.New(problem.Invalid, "at most 1000 ids at once")
	}
	return s.notes.MarkNotificationsRead(ctx, userID, ids)
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
