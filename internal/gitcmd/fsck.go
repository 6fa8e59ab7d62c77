package gitcmd

// fsckTreeErrors are the fsck message ids (git 2.39's fsck.h) of the
// malformed-tree classes, each raised to an error. transfer.fsckObjects
// makes receive-pack check objects strictly, which turns git's warnings
// into errors but leaves its "info" classes as warnings: a tree with mode
// 100666 or 123456 (badFilemode) got in with "warning: badFilemode", and
// every clone then carried it to clients and tools that may act on it.
// The classes git already refuses (a ".git" or ".." entry writes outside
// the work tree, a name holding '/' or a duplicate confuses checkout) are
// pinned too, so no git version or strictness setting can lower them. Git
// 2.39 skips an id it does not know with only a warning, so the tests
// push one bad tree per id and watch for that warning.
var fsckTreeErrors = []struct{ id, what string }{
	{"badFilemode", "a mode git does not create (100666, 123456)"},
	{"zeroPaddedFilemode", "a zero-padded mode (0100644): one tree, two ids"},
	{"emptyName", "an entry without a name"},
	{"fullPathname", "a name holding '/'"},
	{"hasDot", "an entry named '.'"},
	{"hasDotdot", "an entry named '..', which climbs out of the work tree"},
	{"hasDotgit", "an entry named '.git', which writes into the clone's repository"},
	{"nullSha1", "an entry pointing at the all-zero object id"},
	{"duplicateEntries", "two entries of the same name"},
	{"treeNotSorted", "entries out of git's order"},
	{"badTree", "a tree that does not parse"},
	{"badTreeSha1", "a tree whose id in a commit does not parse"},
}

// fsckConfig raises every malformed-tree class to an error for pushes
// (receive.fsck) and for the server's own fetches between repositories
// (fetch.fsck, fork sync).
func fsckConfig() []configEntry {
	var e []configEntry
	for _, m := range fsckTreeErrors {
		e = append(e,
			configEntry{`receive "fsck"`, m.id, "error", "a push with " + m.what + " is refused, not warned about"},
			configEntry{`fetch "fsck"`, m.id, "error", "same for fetches between repositories"})
	}
	return e
}
