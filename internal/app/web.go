package app

import (
	"context"
	"net/http"
	"sync"

	"github.com/sluice-scm/sluice/internal/store"
	"github.com/sluice-scm/sluice/internal/web"
)

// web builds the browser UI, mounted at "/" behind every more specific
// route. It is built at the first request, after Listen, so its clone
// URLs carry the bound address (BaseURL). If it cannot start (its embedded
// templates are broken, which its tests catch), git and the REST API
// still serve and the UI answers 500 with the reason logged.
func (a *App) web() http.Handler {
	return lazyHandler(func() http.Handler {
		d := web.Deps{
			Store:       a.Store,
			Sessions:    a.DB,
			Auth:        a.Auth,
			Accounts:    a.Accounts,
			Repos:       a.Repos,
			Logger:      a.Logger,
			BaseURL:     a.BaseURL(),
			SSHBaseURL:  a.SSHBaseURL(),
			Version:     Version,
			Pulls:       a.Pulls,
			BranchPerms: a.BranchPerms,
			Notify:      a.Notify,
		}
		// Interfaces stay nil (section "not enabled") when a service is
		// off: a typed nil pointer would look enabled.
		if a.Cache != nil {
			d.Cache = a.Cache
		}
		if a.Throttle != nil {
			d.Throttle = a.Throttle
		}
		if a.Jobs != nil {
			d.Jobs = a.Jobs
		}
		if a.cluster != nil {
			d.Cluster = webCluster{a}
		}
		h, err := web.New(d)
		if err != nil {
			a.Logger.Error("web UI disabled", "component", "app", "err", err)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "the web interface failed to start; see the server log", http.StatusInternalServerError)
			})
		}
		return h
	})
}

// webCluster is the cluster registry as the admin page sees it.
type webCluster struct{ a *App }

func (c webCluster) Nodes(ctx context.Context) ([]store.Node, error) { return c.a.ClusterNodes(ctx) }

// Self is this node's registered id, "" until startCluster registered it
// (or for a node given no id of its own and not yet bound).
func (c webCluster) Self() string {
	cl := c.a.cluster
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.registry == nil {
		return ""
	}
	return cl.registry.NodeID()
}

var _ web.Cluster = webCluster{}

// lazyHandler builds its handler at the first request; building it once
// is safe under concurrent first requests.
func lazyHandler(build func() http.Handler) http.Handler {
	h := sync.OnceValue(build)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h().ServeHTTP(w, r) })
}
