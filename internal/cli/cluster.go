package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-scm/sluice/internal/app"
	"github.com/sluice-scm/sluice/internal/cluster"
)

// adminCluster is `sluice admin cluster …`. Like every admin command it
// reads the database directly, so it works while no node is up.
func adminCluster(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster"}
	cmd.AddCommand(adminClusterStatus(g, stdout, stderr))
	return cmd
}

func adminClusterStatus(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the registered nodes: live, or gone (no heartbeat for 30s by the database's clock)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, g, stderr, func(ctx context.Context, a *app.App) error {
				nodes, err := a.ClusterNodes(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					type node struct {
						ID                  string    `json:"id"`
						Address             string    `json:"address"`
						SSHAddress          string    `json:"sshAddress,omitempty"`
						Version             string    `json:"version"`
						State               string    `json:"state"`
						StartedAt           time.Time `json:"startedAt"`
						HeartbeatAt         time.Time `json:"heartbeatAt"`
						HeartbeatAgeSeconds float64   `json:"heartbeatAgeSeconds"`
					}
					out := []node{}
					for _, n := range nodes {
						out = append(out, node{n.ID, n.Address, n.SSHAddress, n.Version, cluster.State(n),
							n.StartedAt, n.HeartbeatAt, float64(n.HeartbeatAge.Milliseconds()) / 1000})
					}
					enc := json.NewEncoder(stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(out)
				}
				if len(nodes) == 0 {
					fmt.Fprintln(stdout, "no nodes registered (no server has started against this database)")
					return nil
				}
				tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NODE\tSTATE\tADDRESS\tSSH\tVERSION\tSTARTED\tLAST HEARTBEAT")
				for _, n := range nodes {
					ssh := n.SSHAddress
					if ssh == "" {
						ssh = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago\n", n.ID, cluster.State(n), n.Address, ssh, n.Version,
						n.StartedAt.Format(time.RFC3339), n.HeartbeatAge.Round(100*time.Millisecond))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
