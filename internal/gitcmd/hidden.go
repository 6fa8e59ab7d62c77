package gitcmd

// HiddenRefs are the ref namespaces clients are never shown: upload-pack
// does not advertise them (uploadpack.hideRefs), receive-pack refuses
// pushes to them (receive.hideRefs), and the server's own want check
// (repo.CheckWants) does not count them as visible history. One list, so
// the three cannot disagree.
var HiddenRefs = []string{"refs/pull-requests"}
