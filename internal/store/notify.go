package store

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// NotificationStore is each user's inbox of pull request events (review
// requested, a comment on their pull request, merged, declined) and the
// record of which were emailed. *DB implements it; internal/pull writes
// it from a job, the API and the dashboard read it.
type NotificationStore interface {
	// AddNotification inserts n unless the user already has a
	// notification with n.Dedupe; created reports which.
	AddNotification(ctx context.Context, n *Notification) (created bool, err error)
	// ListNotifications pages through a user's notifications, newest first.
	ListNotifications(ctx context.Context, userID int64, unreadOnly bool, p Page) ([]Notification, error)
	// UnreadNotifications counts a user's unread notifications.
	UnreadNotifications(ctx context.Context, userID int64) (int, error)
	// MarkNotificationsRead marks the user's notifications ids read (all of
	// them when ids is empty) and returns how many changed. Ids of other
	// users' notifications are ignored.
	MarkNotificationsRead(ctx context.Context, userID int64, ids []int64) (int64, error)
	// UnsentNotifications lists the notifications of one event (dedupe)
	// not yet emailed, oldest first.
	UnsentNotifications(ctx context.Context, dedupe string) ([]Notification, error)
	// MarkNotificationEmailed records that a notification was emailed.
	MarkNotificationEmailed(ctx context.Context, id int64) error
}

// Notification kinds.
const (
	NotifyReviewRequested = "REVIEW_REQUESTED"
	NotifyComment         = "COMMENT"
	NotifyMerged          = "MERGED"
	NotifyDeclined        = "DECLINED"
)

// Notification is one entry of a user's inbox.
type Notification struct {
	ID        int64
	UserID    int64
	Dedupe    string // the event it comes from, unique per user
	Kind      string
	RepoID    int64
	PRID      int64
	ActorID   int64
	Title     string
	Body      string
	Link      string // path below the base URL, e.g. /projects/P/repos/r/pull-requests/3
	CreatedAt time.Time
	ReadAt    *time.Time
	EmailedAt *time.Time
}

var _ NotificationStore = (*DB)(nil)

const notificationCols = `id, user_id, dedupe, kind, repo_id, pr_id, actor_id, title, body, link, created_at, read_at, emailed_at`

func scanNotification(sc interface{ Scan(...any) error }, n *Notification) error {
	var pr, actor sql.NullInt64
	var read, emailed sql.NullTime
	if err := sc.Scan(&n.ID, &n.UserID, &n.Dedupe, &n.Kind, &n.RepoID, &pr, &actor, &n.Title, &n.Body, &n.Link,
		&n.CreatedAt, &read, &emailed); err != nil {
		return err
	}
	n.PRID, n.ActorID = pr.Int64, actor.Int64
	n.CreatedAt, n.ReadAt, n.EmailedAt = n.CreatedAt.UTC(), timePtr(read), timePtr(emailed)
	return nil
}

func (d *DB) AddNotification(ctx context.Context, n *Notification) (bool, error) {
	n.CreatedAt = now()
	err := d.queryRow(ctx, `INSERT INTO notifications (user_id, dedupe, kind, repo_id, pr_id, actor_id, title, body, link, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, dedupe) DO NOTHING RETURNING id`,
		n.UserID, n.Dedupe, n.Kind, n.RepoID, nullID(n.PRID), nullID(n.ActorID), n.Title, n.Body, n.Link, n.CreatedAt).Scan(&n.ID)
	if err == sql.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, d.fail(err, "add notification")
	}
	return true, nil
}

func (d *DB) ListNotifications(ctx context.Context, userID int64, unreadOnly bool, p Page) ([]Notification, error) {
	limit, offset := p.Bounds()
	where := "user_id = ?"
	if unreadOnly {
		where += " AND read_at IS NULL"
	}
	rows, err := d.query(ctx, "SELECT "+notificationCols+" FROM notifications WHERE "+where+" ORDER BY id DESC LIMIT ? OFFSET ?",
		userID, limit, offset)
	if err != nil {
		return nil, d.fail(err, "list notifications")
	}
	return collect(rows, d, "list notifications", scanNotification)
}

func (d *DB) UnreadNotifications(ctx context.Context, userID int64) (int, error) {
	var n int
	err := d.queryRow(ctx, "SELECT COUNT(*) FROM notifications WHERE user_id = ? AND read_at IS NULL", userID).Scan(&n)
	return n, d.fail(err, "count notifications")
}

func (d *DB) MarkNotificationsRead(ctx context.Context, userID int64, ids []int64) (int64, error) {
	q := "UPDATE notifications SET read_at = ? WHERE user_id = ? AND read_at IS NULL"
	args := []any{now(), userID}
	if len(ids) > 0 {
		q += " AND id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
		for _, id := range ids {
			args = append(args, id)
		}
	}
	res, err := d.execDynamic(ctx, q, args...)
	if err != nil {
		return 0, d.fail(err, "mark notifications read")
	}
	n, err := res.RowsAffected()
	return n, d.fail(err, "mark notifications read")
}

func (d *DB) UnsentNotifications(ctx context.Context, dedupe string) ([]Notification, error) {
	rows, err := d.query(ctx, "SELECT "+notificationCols+" FROM notifications WHERE dedupe = ? AND emailed_at IS NULL ORDER BY id", dedupe)
	if err != nil {
		return nil, d.fail(err, "unsent notifications")
	}
	return collect(rows, d, "unsent notifications", scanNotification)
}

func (d *DB) MarkNotificationEmailed(ctx context.Context, id int64) error {
	res, err := d.exec(ctx, "UPDATE notifications SET emailed_at = ? WHERE id = ?", now(), id)
	return d.mustAffect(res, err, "mark notification emailed", "notification not found")
}
