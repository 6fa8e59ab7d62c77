package app

import (
	"net/http"
	"net/http/pprof"

	"github.com/sluice-scm/sluice/internal/auth"
)

// debugRoutes serves Go's profiler under /debug/pprof/ to system
// administrators only: a CPU profile names where a node's time goes under
// load (sluice e3 run --pprof fetches one), but profiles reveal internals
// and cost CPU, so nobody else may ask for them.
func (a *App) debugRoutes(mux *http.ServeMux) {
	guard := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := a.Auth.AuthenticateHTTP(r)
			if err != nil || p.IsAnonymous() {
				w.Header().Set("WWW-Authenticate", `Basic realm="Sluice"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			if err := a.Auth.Authorize(r.Context(), p, auth.Resource{}, auth.Admin); err != nil {
				http.Error(w, "administrators only", http.StatusForbidden)
				return
			}
			h(w, r)
		})
	}
	mux.Handle("GET /debug/pprof/", guard(pprof.Index))
	mux.Handle("GET /debug/pprof/cmdline", guard(pprof.Cmdline))
	mux.Handle("GET /debug/pprof/profile", guard(pprof.Profile))
	mux.Handle("GET /debug/pprof/symbol", guard(pprof.Symbol))
	mux.Handle("GET /debug/pprof/trace", guard(pprof.Trace))
}
