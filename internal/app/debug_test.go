package app_test

import (
	"net/http"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/testbed"
)

func TestPprofAdminOnly(t *testing.T) {
	n := testbed.NewNode(t, testbed.NodeOptions{})
	u := n.CreateUser(t, "dev", "dev-password")
	userTok := n.Token(t, u.ID, store.ScopeAdmin)
	admin, err := n.Store().UserByName(t.Context(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	adminTok := n.Token(t, admin.ID, store.ScopeAdmin)
	readTok := n.Token(t, admin.ID, store.ScopeRead)
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"anonymous", "", http.StatusUnauthorized},
		{"ordinary user", userTok, http.StatusForbidden},
		{"admin with a read token", readTok, http.StatusForbidden},
		{"admin", adminTok, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, n.URL+"/debug/pprof/cmdline", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}
