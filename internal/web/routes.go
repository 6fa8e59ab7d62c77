package web

import "net/http"

// routes registers every page. Patterns use Go's method and wildcard
// syntax; a path that matches nothing gets the 404 page.
func (s *server) routes() {
	m := s.mux
	get := func(pattern string, h handler) { m.Handle("GET "+pattern, s.page(h)) }
	post := func(pattern string, h handler) { m.Handle("POST "+pattern, s.page(h)) }

	m.HandleFunc("GET /static/{name}", s.serveStatic)
	get("/{$}", (*call).home)
	get("/help", (*call).help)

	get("/login", (*call).loginForm)
	post("/login", (*call).login)
	post("/logout", (*call).logout)

	get("/account", (*call).account)
	post("/account/password", (*call).changePassword)
	post("/account/tokens", (*call).createToken)
	post("/account/tokens/{id}/revoke", (*call).revokeToken)
	post("/account/keys", (*call).addKey)
	post("/account/keys/{id}/delete", (*call).deleteKey)

	get("/projects", (*call).projects)
	post("/projects", (*call).createProject)
	get("/projects/{key}", (*call).projectPage)
	post("/projects/{key}/repos", (*call).createRepo)

	const r = "/projects/{key}/repos/{slug}"
	get(r, (*call).repoHome)
	get(r+"/browse", (*call).browse)
	get(r+"/browse/{path...}", (*call).browse)
	get(r+"/raw/{path...}", (*call).raw)
	get(r+"/commits", (*call).commits)
	get(r+"/commits/{id}", (*call).commit)
	get(r+"/branches", (*call).branches)
	get(r+"/tags", (*call).tags)
	get(r+"/settings", (*call).repoSettings)
	post(r+"/settings", (*call).updateRepo)
	post(r+"/settings/default-branch", (*call).setDefaultBranch)
	post(r+"/settings/permissions", (*call).setRepoPermission)
	post(r+"/settings/permissions/revoke", (*call).revokeRepoPermission)
	post(r+"/settings/delete", (*call).deleteRepo)
	post(r+"/settings/pull-requests", (*call).updatePullSettings)

	get("/admin", (*call).adminSystem)
	post("/admin/cache/clear", (*call).adminClearCache)
	get("/admin/users", (*call).adminUsers)
	post("/admin/users", (*call).adminCreateUser)
	post("/admin/users/{id}/active", (*call).adminSetActive)
	get("/admin/groups", (*call).adminGroups)
	post("/admin/groups", (*call).adminCreateGroup)
	get("/admin/groups/{name}", (*call).adminGroup)
	post("/admin/groups/{name}/members", (*call).adminAddMember)
	post("/admin/groups/{name}/members/remove", (*call).adminRemoveMember)
	post("/admin/groups/{name}/delete", (*call).adminDeleteGroup)
	get("/admin/permissions", (*call).adminPermissions)
	post("/admin/permissions", (*call).adminSetPermission)
	post("/admin/permissions/revoke", (*call).adminRevokePermission)

	s.pullRoutes(get, post)

	// Anything else: the 404 page (or 405 for a known path).
	m.Handle("/", s.page(func(c *call) error {
		if c.r.Method != http.MethodGet && c.r.Method != http.MethodHead && c.r.Method != http.MethodPost {
			c.w.Header().Set("Allow", "GET, POST")
			c.wrote = true
			http.Error(c.w, "method not allowed", http.StatusMethodNotAllowed)
			return nil
		}
		return notFound()
	}))
}
