package api

// accountRoutes gathers the routes of accounts for automation (issue 15
// item 7): project and repository access tokens, the user and group
// directory, personal projects and avatars. api.New registers them.
func (s *server) accountRoutes() []route {
	return append(append(s.resourceTokenRoutes(), s.directoryRoutes()...), s.avatarRoutes()...)
}
