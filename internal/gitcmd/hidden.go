package gitcmd

// ServerRefs are the ref namespaces only the server writes: pull request
// refs (refs/pull-requests/{id}/from and /merge). Clients may not push to
// them (receive.hideRefs), and the REST read helpers do not count them as
// a repository's history (repo.IsReachable): a pull request's commits are
// served through the pull request, by git (CI fetches
// +refs/pull-requests/{id}/from, as from Bitbucket) and by its own REST
// endpoints.
var ServerRefs = []string{"refs/pull-requests"}

// HiddenRefs are the ref namespaces clients are never shown: upload-pack
// does not advertise them (uploadpack.hideRefs), and the server's own want
// check (repo.CheckWants) does not count them as visible history. One
// list, so the two cannot disagree. Empty today: every ref of a
// repository, pull request refs included, is served to its readers.
var HiddenRefs []string
