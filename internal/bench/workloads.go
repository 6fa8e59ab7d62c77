package bench

import (
	"context"
	"fmt"

	"github.com/sluice-scm/sluice/internal/loadgen"
)

// CloneOp is a full clone of every branch and tag, verified but not stored.
func CloneOp(c *loadgen.Client, url string, proto loadgen.Protocol) loadgen.Op {
	return func(ctx context.Context, _ int) (int64, error) {
		res, err := c.Clone(ctx, url, loadgen.CloneOptions{Protocol: proto})
		return res.Bytes, err
	}
}

// LsRemoteOp lists the repository's refs.
func LsRemoteOp(c *loadgen.Client, url string, proto loadgen.Protocol) loadgen.Op {
	return func(ctx context.Context, _ int) (int64, error) {
		refs, err := c.LsRemote(ctx, url, proto)
		if err == nil && len(refs) == 0 {
			err = fmt.Errorf("ls-remote: no refs")
		}
		return 0, err
	}
}

// PushOp pushes one new commit per operation to a branch of the worker's
// own (prefix + worker number): pushes to one branch would serialise on
// its ref lock and measure lock contention and retries rather than the
// server's push path.
func PushOp(c *loadgen.Client, url, prefix string) loadgen.Op {
	return func(ctx context.Context, worker int) (int64, error) {
		res, err := c.Push(ctx, url, fmt.Sprintf("%s%d", prefix, worker), loadgen.PushOptions{})
		return res.PackBytes + res.Bytes, err
	}
}

// SSHCloneOp is CloneOp over SSH; path is "/KEY/slug.git".
func SSHCloneOp(c *loadgen.SSHClient, path string, proto loadgen.Protocol) loadgen.Op {
	return func(ctx context.Context, _ int) (int64, error) {
		res, err := c.Clone(ctx, path, loadgen.CloneOptions{Protocol: proto})
		return res.Bytes, err
	}
}

// SSHPushOp is PushOp over SSH.
func SSHPushOp(c *loadgen.SSHClient, path, prefix string) loadgen.Op {
	return func(ctx context.Context, worker int) (int64, error) {
		res, err := c.Push(ctx, path, fmt.Sprintf("%s%d", prefix, worker), loadgen.PushOptions{})
		return res.PackBytes + res.Bytes, err
	}
}
