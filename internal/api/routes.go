package api

// route is one entry of the route table: what New registers and what the
// OpenAPI document describes.
type route struct {
	Method  string
	Pattern string // net/http pattern path, full (/rest/…)
	Summary string
	Query   []param
	// Body describes the JSON request body; "" for none.
	Body string
	// Paged routes take start and limit and answer a page.
	Paged bool
	// Success is the status of a successful answer (200 when 0).
	Success int
	handle  func(*call) error
}

// param is a query parameter.
type param struct {
	Name     string
	Type     string // "string" or "integer"
	Required bool
	Desc     string
}

func q(name, desc string) param { return param{Name: name, Type: "string", Desc: desc} }
func qreq(name, desc string) param {
	return param{Name: name, Type: "string", Required: true, Desc: desc}
}

const (
	apiBase    = "/rest/api/1.0"
	project    = apiBase + "/projects/{key}"
	repository = project + "/repos/{slug}"
	adminBase  = apiBase + "/admin"
	tokensBase = "/rest/access-tokens/1.0/users/{userSlug}"
	branchUtil = "/rest/branch-utils/1.0/projects/{key}/repos/{slug}"
	gitBase    = "/rest/git/1.0/projects/{key}/repos/{slug}"
)

// routeTable lists every endpoint. Order matters only for the OpenAPI
// document's readability.
func (s *server) routeTable() []route {
	repoUsersList, repoUsersSet, repoUsersDel := permHandlers((*call).repoTarget, false)
	repoGroupsList, repoGroupsSet, repoGroupsDel := permHandlers((*call).repoTarget, true)
	projUsersList, projUsersSet, projUsersDel := permHandlers((*call).projectTarget, false)
	projGroupsList, projGroupsSet, projGroupsDel := permHandlers((*call).projectTarget, true)
	globUsersList, globUsersSet, globUsersDel := permHandlers((*call).globalTarget, false)
	globGroupsList, globGroupsSet, globGroupsDel := permHandlers((*call).globalTarget, true)

	name := qreq("name", "user or group name; may be repeated")
	perm := qreq("permission", "permission to grant")
	filter := q("filter", "only names containing this text")
	at := q("at", "commit id or ref; default: the default branch")

	return append([]route{
		{Method: "GET", Pattern: apiBase + "/openapi.json", Summary: "This API's OpenAPI 3 document", handle: (*call).openAPIDoc},

		// Projects.
		{Method: "GET", Pattern: apiBase + "/projects", Summary: "List projects visible to the caller", Paged: true,
			Query: []param{q("name", "only projects whose name or key contains this text"),
				q("permission", "only projects the caller holds this on: PROJECT_READ, PROJECT_WRITE or PROJECT_ADMIN")},
			handle: (*call).listProjects},
		{Method: "POST", Pattern: apiBase + "/projects", Summary: "Create a project (PROJECT_CREATE)", Success: 201,
			Body: "{key, name, description, public}", handle: (*call).createProject},
		{Method: "GET", Pattern: project, Summary: "Get a project", handle: (*call).getProject},
		{Method: "PUT", Pattern: project, Summary: "Update a project (PROJECT_ADMIN)",
			Body: "{key, name, description, public}", handle: (*call).updateProject},
		{Method: "DELETE", Pattern: project, Summary: "Delete an empty project (PROJECT_ADMIN)", Success: 204, handle: (*call).deleteProject},

		// Repositories.
		{Method: "GET", Pattern: apiBase + "/repos", Summary: "List repositories visible to the caller", Paged: true,
			Query: []param{q("name", "only repositories whose name contains this text"), q("projectkey", "only repositories of this project"),
				q("permission", "only repositories the caller holds this on: REPO_READ, REPO_WRITE or REPO_ADMIN")},
			handle: (*call).listAllRepos},
		{Method: "GET", Pattern: project + "/repos", Summary: "List a project's repositories", Paged: true, handle: (*call).listProjectRepos},
		{Method: "POST", Pattern: project + "/repos", Summary: "Create a repository (PROJECT_WRITE)", Success: 201,
			Body: "{name, scmId, description, public, defaultBranch}", handle: (*call).createRepo},
		{Method: "GET", Pattern: repository, Summary: "Get a repository", handle: (*call).getRepo},
		{Method: "POST", Pattern: repository, Summary: "Fork a repository", Success: 201,
			Body: "{name, description, public, project: {key}}", handle: (*call).forkRepo},
		{Method: "PUT", Pattern: repository, Summary: "Rename, move or change a repository (REPO_ADMIN)",
			Body: "{name, description, public, project: {key}}", handle: (*call).updateRepo},
		{Method: "DELETE", Pattern: repository, Summary: "Delete a repository (REPO_ADMIN)", Success: 202, handle: (*call).deleteRepo},

		// Branches and tags.
		{Method: "GET", Pattern: repository + "/branches", Summary: "List branches", Paged: true,
			Query:  append(refListParams("branches"), q("details", "true: add ahead/behind the default branch and the latest commit as metadata")),
			handle: (*call).listBranches},
		{Method: "POST", Pattern: repository + "/branches", Summary: "Create a branch (REPO_WRITE)",
			Body: "{name, startPoint}", handle: (*call).createBranch},
		{Method: "POST", Pattern: branchUtil + "/branches", Summary: "Create a branch (REPO_WRITE)",
			Body: "{name, startPoint}", handle: (*call).createBranch},
		{Method: "DELETE", Pattern: branchUtil + "/branches", Summary: "Delete a branch (REPO_WRITE)", Success: 204,
			Body: "{name, endPoint, dryRun}", handle: (*call).deleteBranch},
		{Method: "GET", Pattern: repository + "/default-branch", Summary: "Get the default branch", handle: (*call).getDefaultBranch},
		{Method: "PUT", Pattern: repository + "/default-branch", Summary: "Set the default branch (REPO_ADMIN)", Success: 204,
			Body: "{id}", handle: (*call).setDefaultBranch},
		{Method: "GET", Pattern: repository + "/tags", Summary: "List tags", Paged: true,
			Query: refListParams("tags"), handle: (*call).listTags},
		{Method: "POST", Pattern: repository + "/tags", Summary: "Create a tag, annotated when a message is given (REPO_WRITE)",
			Body: "{name, startPoint, message}", handle: (*call).createTag},
		{Method: "POST", Pattern: gitBase + "/tags", Summary: "Create a tag, annotated when a message is given (REPO_WRITE)",
			Body: "{name, startPoint, message}", handle: (*call).createTag},
		{Method: "DELETE", Pattern: repository + "/tags/{name...}", Summary: "Delete a tag (REPO_WRITE)", Success: 204, handle: (*call).deleteTag},
		{Method: "DELETE", Pattern: gitBase + "/tags/{name...}", Summary: "Delete a tag (REPO_WRITE)", Success: 204, handle: (*call).deleteTag},

		// History and content.
		{Method: "GET", Pattern: repository + "/commits", Summary: "List commits", Paged: true,
			Query: []param{q("until", "commit id or ref to start from; default: the default branch"),
				q("since", "leave out commits reachable from this commit id or ref"),
				q("path", "only commits touching this path")},
			handle: (*call).listCommits},
		{Method: "GET", Pattern: repository + "/commits/{commitId}", Summary: "Get a commit", handle: (*call).getCommit},
		{Method: "GET", Pattern: repository + "/commits/{commitId}/diff", Summary: "The diff a commit introduces",
			Query:  []param{q("since", "diff against this commit instead of the first parent"), q("path", "only this path")},
			handle: (*call).commitDiff},
		{Method: "GET", Pattern: repository + "/compare/commits", Summary: "Commits reachable from 'from' but not from 'to'", Paged: true,
			Query: []param{qreq("from", "commit id or ref"), qreq("to", "commit id or ref")}, handle: (*call).compareCommits},
		{Method: "GET", Pattern: repository + "/compare/diff", Summary: "Diff from 'to' to 'from' (bounded)",
			Query:  []param{qreq("from", "commit id or ref"), qreq("to", "commit id or ref"), q("path", "only this path")},
			handle: (*call).compareDiff},
		{Method: "GET", Pattern: repository + "/compare/diff/{path...}", Summary: "Diff of one path from 'to' to 'from' (bounded)",
			Query: []param{qreq("from", "commit id or ref"), qreq("to", "commit id or ref")}, handle: (*call).compareDiff},
		{Method: "GET", Pattern: repository + "/browse", Summary: "List the root directory", Paged: true,
			Query: []param{at}, handle: (*call).browse},
		{Method: "GET", Pattern: repository + "/browse/{path...}", Summary: "List a directory or page through a file's lines", Paged: true,
			Query: []param{at}, handle: (*call).browse},
		{Method: "GET", Pattern: repository + "/raw/{path...}", Summary: "A file's raw bytes (text as text/plain, anything else as a download)",
			Query: []param{at}, handle: (*call).raw},
		{Method: "GET", Pattern: repository + "/archive", Summary: "Download a revision as an archive",
			Query:  []param{at, q("format", "zip (default), tar, tar.gz or tgz"), q("prefix", "directory to put every entry under")},
			handle: (*call).archive},

		// Repository, project and global permissions.
		{Method: "GET", Pattern: repository + "/permissions/users", Summary: "List users with a repository permission", Paged: true,
			Query: []param{filter}, handle: repoUsersList},
		{Method: "PUT", Pattern: repository + "/permissions/users", Summary: "Grant users a repository permission (REPO_ADMIN)", Success: 204,
			Query: []param{name, perm}, handle: repoUsersSet},
		{Method: "DELETE", Pattern: repository + "/permissions/users", Summary: "Revoke users' repository permission (REPO_ADMIN)", Success: 204,
			Query: []param{name}, handle: repoUsersDel},
		{Method: "GET", Pattern: repository + "/permissions/groups", Summary: "List groups with a repository permission", Paged: true,
			Query: []param{filter}, handle: repoGroupsList},
		{Method: "PUT", Pattern: repository + "/permissions/groups", Summary: "Grant groups a repository permission (REPO_ADMIN)", Success: 204,
			Query: []param{name, perm}, handle: repoGroupsSet},
		{Method: "DELETE", Pattern: repository + "/permissions/groups", Summary: "Revoke groups' repository permission (REPO_ADMIN)", Success: 204,
			Query: []param{name}, handle: repoGroupsDel},
		{Method: "GET", Pattern: project + "/permissions/users", Summary: "List users with a project permission", Paged: true,
			Query: []param{filter}, handle: projUsersList},
		{Method: "PUT", Pattern: project + "/permissions/users", Summary: "Grant users a project permission (PROJECT_ADMIN)", Success: 204,
			Query: []param{name, perm}, handle: projUsersSet},
		{Method: "DELETE", Pattern: project + "/permissions/users", Summary: "Revoke users' project permission (PROJECT_ADMIN)", Success: 204,
			Query: []param{name}, handle: projUsersDel},
		{Method: "GET", Pattern: project + "/permissions/groups", Summary: "List groups with a project permission", Paged: true,
			Query: []param{filter}, handle: projGroupsList},
		{Method: "PUT", Pattern: project + "/permissions/groups", Summary: "Grant groups a project permission (PROJECT_ADMIN)", Success: 204,
			Query: []param{name, perm}, handle: projGroupsSet},
		{Method: "DELETE", Pattern: project + "/permissions/groups", Summary: "Revoke groups' project permission (PROJECT_ADMIN)", Success: 204,
			Query: []param{name}, handle: projGroupsDel},
		{Method: "GET", Pattern: adminBase + "/permissions/users", Summary: "List users with a global permission (ADMIN)", Paged: true,
			Query: []param{filter}, handle: globUsersList},
		{Method: "PUT", Pattern: adminBase + "/permissions/users", Summary: "Grant users a global permission (ADMIN)", Success: 204,
			Query: []param{name, perm}, handle: globUsersSet},
		{Method: "DELETE", Pattern: adminBase + "/permissions/users", Summary: "Revoke users' global permission (ADMIN)", Success: 204,
			Query: []param{name}, handle: globUsersDel},
		{Method: "GET", Pattern: adminBase + "/permissions/groups", Summary: "List groups with a global permission (ADMIN)", Paged: true,
			Query: []param{filter}, handle: globGroupsList},
		{Method: "PUT", Pattern: adminBase + "/permissions/groups", Summary: "Grant groups a global permission (ADMIN)", Success: 204,
			Query: []param{name, perm}, handle: globGroupsSet},
		{Method: "DELETE", Pattern: adminBase + "/permissions/groups", Summary: "Revoke groups' global permission (ADMIN)", Success: 204,
			Query: []param{name}, handle: globGroupsDel},

		// Users and groups.
		{Method: "GET", Pattern: apiBase + "/users", Summary: "List users", Paged: true, Query: []param{filter}, handle: (*call).listUsers},
		{Method: "GET", Pattern: apiBase + "/users/{userSlug}", Summary: "Get a user", handle: (*call).getUser},
		{Method: "GET", Pattern: apiBase + "/users/{userSlug}/repos", Summary: "List a user's personal repositories", Paged: true, handle: (*call).listUserRepos},
		{Method: "GET", Pattern: apiBase + "/users/{userSlug}/repos/{slug}", Summary: "Get a personal repository", handle: (*call).getUserRepo},
		{Method: "POST", Pattern: adminBase + "/users", Summary: "Create a user (ADMIN)", Success: 204,
			Query: []param{qreq("name", "login"), q("password", "initial password"), q("displayName", "display name"),
				q("emailAddress", "e-mail address")},
			handle: (*call).createUser},
		{Method: "PUT", Pattern: adminBase + "/users", Summary: "Update a user's details (ADMIN)",
			Body: "{name, displayName, email, active}", handle: (*call).updateUser},
		{Method: "PUT", Pattern: adminBase + "/users/credentials", Summary: "Set a user's password (ADMIN)", Success: 204,
			Body: "{name, password, passwordConfirm}", handle: (*call).setPassword},
		{Method: "DELETE", Pattern: adminBase + "/users", Summary: "Delete a user (ADMIN)",
			Query: []param{qreq("name", "login")}, handle: (*call).deleteUser},
		{Method: "GET", Pattern: adminBase + "/groups", Summary: "List groups (ADMIN)", Paged: true, Query: []param{filter}, handle: (*call).listGroups},
		{Method: "POST", Pattern: adminBase + "/groups", Summary: "Create a group (ADMIN)",
			Query: []param{qreq("name", "group name")}, handle: (*call).createGroup},
		{Method: "DELETE", Pattern: adminBase + "/groups", Summary: "Delete a group (ADMIN)",
			Query: []param{qreq("name", "group name")}, handle: (*call).deleteGroup},
		{Method: "GET", Pattern: adminBase + "/groups/more-members", Summary: "List a group's members (ADMIN)", Paged: true,
			Query: []param{qreq("context", "group name"), filter}, handle: (*call).groupMembers},
		{Method: "POST", Pattern: adminBase + "/groups/add-user", Summary: "Add users to a group (ADMIN)", Success: 204,
			Body: "{group, users} or {context, itemName}", handle: (*call).addMembers},
		{Method: "POST", Pattern: adminBase + "/groups/add-users", Summary: "Add users to a group (ADMIN)", Success: 204,
			Body: "{group, users}", handle: (*call).addMembers},
		{Method: "POST", Pattern: adminBase + "/groups/remove-user", Summary: "Remove users from a group (ADMIN)", Success: 204,
			Body: "{group, users} or {context, itemName}", handle: (*call).removeMembers},

		// Access tokens.
		{Method: "GET", Pattern: tokensBase, Summary: "List a user's access tokens (the user or ADMIN)", Paged: true, handle: (*call).listTokens},
		{Method: "PUT", Pattern: tokensBase, Summary: "Create an access token; the secret is shown once (the user, signed in with a password)",
			Body:   "{name, permissions: [REPO_READ|REPO_WRITE|REPO_ADMIN|PROJECT_*] or scope: read|write|admin, expiryDays}",
			handle: (*call).createToken},
		{Method: "DELETE", Pattern: tokensBase + "/{tokenId}", Summary: "Revoke an access token (the user or ADMIN)", Success: 204,
			handle: (*call).deleteToken},
	}, s.reviewRoutes()...) // review.go
}
