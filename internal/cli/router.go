package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/metrics"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newRouterCmd) }

// newRouterCmd returns "router": the ask router on its own.
func newRouterCmd() *cobra.Command {
	var bf busFlags
	var logLevel, metricsAddr string
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Run the ask router (mesh-asks) against a NATS server: records asks, answers, expiry",
		Long: `router runs the ask router (module mesh-asks) on its own bus connection until Ctrl-C or SIGTERM. It
records every ask published on asks.<module> in ` + mesh.RecordsBucket + ` (making the bucket when it is
missing), takes operators' answers on mesh-asks.answer.<user>, withdrawals on mesh-asks.withdraw.<asker>,
and marks an ask expired when its time is up. Several routers may run: they share the subjects as one
queue group.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			r, err := bf.assembly(log).StartRouter(cmd.Context())
			if err != nil {
				return bf.explain(err)
			}
			log.Info("router: running", "nats", bf.url)
			if metricsAddr != "" {
				at, err := metrics.Serve(cmd.Context(), metricsAddr, metrics.New().Handler(r.Health()), log)
				if err != nil {
					return err
				}
				log.Info("router: health served", "url", "http://"+at.String()+"/healthz")
			}
			<-r.Done()
			log.Info("router: stopped", "err", r.Err())
			return r.Err()
		},
	}
	bf.add(cmd)
	bf.addReplicas(cmd)
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve a health check (/healthz: 200 while connected and JetStream answers for "+mesh.RecordsBucket+", else 503 saying why) on this address, e.g. 127.0.0.1:9465")
	return cmd
}
