package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

func init() { commands = append(commands, newServeCmd) }

func newServeCmd() *cobra.Command {
	var bf busFlags
	var id, logLevel, metricsAddr string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the seat against a NATS server or cluster (a real deployment)",
		Long: `serve runs the provisioner's seat against the NATS server at --nats, connected with --creds, until
Ctrl-C or SIGTERM. Only one instance holds the seat at a time; a second one waits and takes over when the
holder's lease lapses. Every instance answers the read-only verb mesh-provisioner.provisioning; the holder
keeps the registry. The seat makes the buckets it keeps; a mesh also needs the ask router ("router"), the
vault ("vault --node N"), its providers and a client per node ("client --node N") for its credentials to be
provided and its asks to be recorded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("lease") {
				ttl = 0 // the seat's default: 10 s, or 30 s with replicated buckets
			} else if err := seat.CheckLease(ttl); err != nil {
				return usageError{fmt.Errorf("serve --lease %v: %w", ttl, err)}
			}
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			sr, err := bf.assembly(log).StartSeat(cmd.Context(), assemble.SeatConfig{ID: id, LeaseTTL: ttl, Metrics: metricsAddr})
			var refused *refusedError
			if err != nil && cmd.Context().Err() != nil && !errors.As(context.Cause(cmd.Context()), &refused) {
				// Stopped (Ctrl-C, SIGTERM) while it waited for the bus
				// to make its buckets.
				log.Info("serve: the seat stopped before it started", "err", err)
				return nil
			}
			if err != nil {
				return bf.explain(err)
			}
			if sr.MetricsAt != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "metrics on http://%s/metrics, health on http://%s/healthz\n", sr.MetricsAt, sr.MetricsAt)
			}
			log.Info("serve: the seat runs; waiting for its lease", "nats", bf.url)
			<-sr.Done()
			log.Info("serve: the seat stopped", "err", sr.Err())
			return sr.Err()
		},
	}
	bf.add(cmd)
	bf.addReplicas(cmd)
	cmd.Flags().StringVar(&id, "id", "", "this instance's name in the seat's lease (default: host, pid and start time)")
	cmd.Flags().DurationVar(&ttl, "lease", 10*time.Second, "how long the seat's lease outlives a holder that stopped (at least 100ms; default 12s with --replicas over 1, so that a leader election of the lease bucket does not lose it; a standby takes over within a second of its lapse)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics (/metrics) and a health check (/healthz) on this address, e.g. 127.0.0.1:9464")
	return cmd
}
