package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newServeCmd) }

func newServeCmd() *cobra.Command {
	var bf busFlags
	var id, logLevel, metricsAddr string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the seat against a NATS server or cluster (a real deployment)",
		Long: `serve runs the provisioner's seat against the NATS server at --nats, connected with --creds. Only one
instance holds the seat at a time; a second one waits and takes over when the holder's lease lapses. Every
instance answers the read-only verb mesh-provisioner.provisioning; the holder keeps the registry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			bf.log = log
			nc, js, err := bf.connect("mesh-provisioner-seat")
			if err != nil {
				return err
			}
			defer nc.Close()
			p := &seatProcess{nc: nc, js: js, id: id, ttl: ttl, log: log}
			if metricsAddr != "" {
				if err := p.serveMetrics(cmd.Context(), metricsAddr, cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			return p.run(cmd.Context())
		},
	}
	bf.add(cmd)
	cmd.Flags().StringVar(&id, "id", "", "this instance's name in the seat's lease (default: host, pid and start time)")
	cmd.Flags().DurationVar(&ttl, "lease", 10*time.Second, "how long the seat's lease outlives a holder that stopped")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics (/metrics) and a health check (/healthz) on this address, e.g. 127.0.0.1:9464")
	return cmd
}
