package app

import (
	"net/http"
	"strings"

	"github.com/sluice-scm/sluice/internal/web"
)

// web builds the browser UI, mounted at "/" behind every more specific
// route. If it cannot start (its embedded templates are broken, which
// its tests catch), git and the REST API still serve and the UI answers
// 500 with the reason logged.
func (a *App) web() http.Handler {
	d := web.Deps{
		Store:      a.Store,
		Sessions:   a.DB,
		Auth:       a.Auth,
		Repos:      a.Repos,
		Logger:     a.Logger,
		BaseURL:    strings.TrimRight(a.Config.Server.BaseURL, "/"),
		SSHBaseURL: strings.TrimRight(a.Config.Server.SSHBaseURL, "/"),
		Version:    Version,
		Pulls:      a.Pulls,
	}
	// Interfaces stay nil (section "not enabled") when a service is off:
	// a typed nil pointer would look enabled.
	if a.Cache != nil {
		d.Cache = a.Cache
	}
	if a.Throttle != nil {
		d.Throttle = a.Throttle
	}
	h, err := web.New(d)
	if err != nil {
		a.Logger.Error("web UI disabled", "component", "app", "err", err)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "the web interface failed to start; see the server log", http.StatusInternalServerError)
		})
	}
	return h
}
