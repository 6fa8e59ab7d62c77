package api

import (
	"net/http"
	"regexp"
	"strings"
)

// Two spellings of every path that Bitbucket accepts and that clients use:
//
//   - /rest/{family}/latest/… for /rest/{family}/1.0/… (any numbered
//     version: branch-permissions is 2.0). Clients generated from
//     Atlassian's published OpenAPI document call latest everywhere, while
//     hand-written scripts pin 1.0. The alias is made here, once, for every
//     route any file registers, so no family can forget it; the route table
//     and the OpenAPI document keep one entry per route, the numbered one.
//   - a trailing slash (…/repos/ for …/repos), which Bitbucket's JAX-RS
//     stack ignores and which some clients build by joining a base that
//     ends with '/'.

// versioned matches the family and version segments of a route pattern.
var versioned = regexp.MustCompile(`^/rest/([a-z0-9-]+)/(latest|[0-9]+\.[0-9]+)(/|$)`)

// latestPattern is pattern with its version segment replaced by latest;
// ok is false for patterns without one (/rest/capabilities).
func latestPattern(pattern string) (string, bool) {
	m := versioned.FindStringSubmatchIndex(pattern)
	if m == nil || pattern[m[4]:m[5]] == "latest" {
		return "", false
	}
	return pattern[:m[4]] + "latest" + pattern[m[5]:], true
}

// canonicalRoutes drops routes a file registered under latest itself when
// the numbered twin exists (the alias serves them), keeps a latest-only
// route as it is, and drops exact duplicates, so registering the result
// and its aliases cannot panic on a pattern seen twice.
func canonicalRoutes(rs []route) []route {
	numbered := map[string]bool{}
	for _, rt := range rs {
		if alias, ok := latestPattern(rt.Pattern); ok {
			numbered[rt.Method+" "+alias] = true
		}
	}
	seen := map[string]bool{}
	out := rs[:0:0]
	for _, rt := range rs {
		key := rt.Method + " " + rt.Pattern
		if seen[key] || numbered[key] {
			continue
		}
		seen[key] = true
		out = append(out, rt)
	}
	return out
}

// patterns is every pattern rt answers on: its own and, for a numbered
// family, the latest alias.
func patterns(rt route) []string {
	if alias, ok := latestPattern(rt.Pattern); ok {
		return []string{rt.Pattern, alias}
	}
	return []string{rt.Pattern}
}

// stripTrailingSlash serves /rest/…/x/ as /rest/…/x. The wildcard
// {path...} of browse and raw never needs the slash: a directory is the
// same without it.
func stripTrailingSlash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if trimmed := strings.TrimRight(r.URL.Path, "/"); trimmed != r.URL.Path && len(trimmed) > len("/rest/") {
			r2 := r.Clone(r.Context())
			r2.URL.Path = trimmed
			if r2.URL.RawPath != "" {
				r2.URL.RawPath = strings.TrimRight(r2.URL.RawPath, "/")
			}
			r = r2
		}
		next.ServeHTTP(w, r)
	})
}
