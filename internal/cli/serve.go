package cli

import (
	"errors"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/seat"
)

func init() { commands = append(commands, newServeCmd) }

func newServeCmd() *cobra.Command {
	var bf busFlags
	var id, logLevel string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the seat against a NATS server or cluster (a real deployment)",
		Long: `serve runs the provisioner's seat against the NATS server at --nats, connected with --creds. Only one
instance holds the seat at a time; a second one waits and takes over when the holder's lease lapses.`,
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
			for {
				err := seat.New(js, seat.Config{ID: id, LeaseTTL: ttl, Log: log}).Run(cmd.Context())
				if !errors.Is(err, seat.ErrLeaseLost) {
					return err
				}
				log.Warn("serve: the seat's lease was lost; waiting to take it again", "err", err)
			}
		},
	}
	bf.add(cmd)
	cmd.Flags().StringVar(&id, "id", "", "this instance's name in the seat's lease (default: host, pid and start time)")
	cmd.Flags().DurationVar(&ttl, "lease", 10*time.Second, "how long the seat's lease outlives a holder that stopped")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
