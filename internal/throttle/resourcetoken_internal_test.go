package throttle

import (
	"testing"

	"github.com/sluice-scm/sluice/internal/auth"
)

// Project and repository tokens have no user and no access key: each must
// still get a bucket and a queue of its own, not one shared by them all.
func TestResourceTokensKeyedApart(t *testing.T) {
	a := &auth.Principal{Name: "ci", ResourceToken: &auth.ResourceTokenGrant{ID: 1, ProjectID: 1}}
	b := &auth.Principal{Name: "ci", ResourceToken: &auth.ResourceTokenGrant{ID: 2, RepoID: 1}}
	key := &auth.Principal{AccessKeyID: 1, AccessKeyRepoID: 1}
	r := &rateLimiter{}
	ka, _, class := r.identify(a, "10.0.0.1:1")
	kb, _, _ := r.identify(b, "10.0.0.1:1")
	kk, _, _ := r.identify(key, "10.0.0.1:1")
	if ka == kb || ka == kk || class != classToken {
		t.Errorf("rate limit keys %q %q %q, class %q", ka, kb, kk, class)
	}
	if qa, qb, qk := principalKey(a, ""), principalKey(b, ""), principalKey(key, ""); qa == qb || qa == qk {
		t.Errorf("queue keys %q %q %q", qa, qb, qk)
	}
}
