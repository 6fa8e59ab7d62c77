package notify

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-scm/sluice/internal/store"
)

func TestMailMessage(t *testing.T) {
	c := &SMTPConfig{Host: "mail.example.com", From: "Sluice <sluice@example.com>", BaseURL: "https://git.example.com/"}
	for _, tc := range []struct {
		name, title, body string
		want, not         []string
	}{
		{name: "plain", title: "ann merged PRJ/app#1: Fix", body: "line one\nline two",
			want: []string{"Subject: ann merged PRJ/app#1: Fix\r\n", "\r\n\r\nann merged PRJ/app#1: Fix\r\n\r\nline one\r\nline two\r\n\r\nhttps://git.example.com/projects/PRJ/repos/app/pull-requests/1\r\n"}},
		{name: "header injection in the title", title: "x\r\nBcc: victim@example.com",
			want: []string{"Subject: x  Bcc: victim@example.com\r\n"}, not: []string{"\r\nBcc:"}},
		{name: "non-ASCII title is encoded", title: "Größe",
			want: []string{"Subject: =?utf-8?q?Gr=C3=B6=C3=9Fe?=\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &store.Notification{ID: 3, Title: tc.title, Body: tc.body, Link: "/projects/PRJ/repos/app/pull-requests/1", CreatedAt: time.Unix(0, 0).UTC()}
			msg := string(c.message("bob@example.com", n))
			head, _, _ := strings.Cut(msg, "\r\n\r\n")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(head, w) {
					t.Errorf("headers contain %q:\n%s", w, head)
				}
			}
			if !strings.Contains(head, "\r\nTo: bob@example.com\r\n") || strings.Count(head, "Subject:") != 1 {
				t.Errorf("headers:\n%s", head)
			}
		})
	}
}
