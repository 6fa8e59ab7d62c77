package api

import (
	"context"
	"time"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/store"
)

// ClusterStatus lists the cluster's nodes for the admin endpoint; the app
// implements it over the node registry (internal/cluster).
type ClusterStatus interface {
	// ClusterNodes returns every registered node, live or gone, and the
	// id of the node answering ("" when it has not registered).
	ClusterNodes(ctx context.Context) (nodes []store.Node, self string, err error)
}

// clusterRoutes are the cluster admin endpoints; none without a registry.
func (s *server) clusterRoutes() []route {
	if s.Cluster == nil {
		return nil
	}
	return []route{
		{Method: "GET", Pattern: sluiceAdminBase + "/cluster", Summary: "The cluster's nodes and their state, live or gone (ADMIN)",
			handle: (*call).clusterStatus},
	}
}

// clusterNode is one node in the cluster status document. Times are the
// database's, like the liveness judgement.
type clusterNode struct {
	ID                  string    `json:"id"`
	Address             string    `json:"address"`
	SSHAddress          string    `json:"sshAddress,omitempty"`
	Version             string    `json:"version"`
	State               string    `json:"state"` // live or gone
	StartedAt           time.Time `json:"startedAt"`
	HeartbeatAt         time.Time `json:"heartbeatAt"`
	HeartbeatAgeSeconds float64   `json:"heartbeatAgeSeconds"`
	Self                bool      `json:"self"`
}

func (c *call) clusterStatus() error {
	if err := c.global(auth.Admin); err != nil {
		return err
	}
	nodes, self, err := c.s.Cluster.ClusterNodes(c.ctx)
	if err != nil {
		return err
	}
	out := struct {
		Self  string        `json:"self"`
		Live  int           `json:"live"`
		Nodes []clusterNode `json:"nodes"`
	}{Self: self, Nodes: []clusterNode{}}
	for _, n := range nodes {
		state := "gone"
		if n.Live {
			state = "live"
			out.Live++
		}
		out.Nodes = append(out.Nodes, clusterNode{
			ID: n.ID, Address: n.Address, SSHAddress: n.SSHAddress, Version: n.Version, State: state,
			StartedAt: n.StartedAt, HeartbeatAt: n.HeartbeatAt,
			HeartbeatAgeSeconds: float64(n.HeartbeatAge.Milliseconds()) / 1000, Self: n.ID == self,
		})
	}
	return c.json(out)
}
