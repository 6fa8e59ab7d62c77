// Package integrations is the conformance suite of issue 15: it drives the
// real third-party Bitbucket Data Center clients against one in-process
// Sluice node on 127.0.0.1, so that "speaks Bitbucket's REST API" is proven
// by the tools people actually point at Bitbucket, not by our reading of
// its documentation.
//
// The clients, each pinned:
//
//   - atlassian-python-api and stashy (PyPI, testdata/requirements.txt,
//     every transitive package pinned too), as subprocesses running the
//     scripts in testdata/;
//   - github.com/gfleury/go-bitbucket-v1 (generated from Atlassian's
//     Swagger document; pinned in go.mod), in process;
//   - Renovate (npm, the 39.x line, the last that runs on Node 20) with
//     platform=bitbucket-server, end to end: discover a repository, push a
//     branch, open a pull request with default reviewers, see a SUCCESSFUL
//     build through the stats endpoint and automerge.
//
// The REST clients each run twice: once against /rest/api/1.0 and once
// against /rest/api/latest.
//
// The Python and npm clients are installed once into a cache directory
// ($SLUICE_TEST_CACHE, else $XDG_CACHE_HOME/sluice-test or
// ~/.cache/sluice-test) under a file lock, keyed on the pins, so a second
// run installs nothing. Installing is the only step that reaches a
// registry; during the tests every client talks to 127.0.0.1 only, and
// Renovate runs behind a recording proxy that fails the test if it tries
// to reach anything else. Under CI=true a client that cannot be installed
// fails the test; elsewhere the test skips and says what to install.
package integrations
