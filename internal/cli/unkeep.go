package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newUnkeepCmd) }

func newUnkeepCmd() *cobra.Command {
	var bf busFlags
	var user string
	cmd := &cobra.Command{
		Use:   "unkeep KEY",
		Short: "Clear an operator's no from a retiring key, so that the key is asked again",
		Long: `unkeep asks the seat, on the verb ` + mesh.UnkeepSubject + `, to clear the kept answer (the warrant
with option no) of the retiring provision KEY. The seat alone writes provisions: it clears the key's
warrant and ask, composes its node again, and raises a new ask, which "asks" then lists. Only an
operator's bus user may publish on the verb. A key that is not retiring with a no is refused, saying so.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("unkeep: want one provision KEY, got %d arguments", len(args))}
			}
			if _, err := mesh.ParseProvisionKey(args[0]); err != nil {
				return usageError{fmt.Errorf("unkeep: %w", err)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			user = bf.user(user)
			nc, err := bf.connectAsk("cli-unkeep")
			if err != nil {
				return fmt.Errorf("unkeep: %w", err)
			}
			defer nc.Close()
			body, _ := json.Marshal(mesh.UnkeepRequest{Key: args[0], By: user})
			// Asked again only while no seat takes it (a seat taking
			// over): one that timed out may have been done.
			var msg *nats.Msg
			err = bf.retryUntaken(cmd.Context(), "unkeep "+args[0], func(ctx context.Context) (err error) {
				ctx, cancel := context.WithTimeout(ctx, requestTimeout)
				defer cancel()
				msg, err = nc.RequestWithContext(ctx, mesh.UnkeepSubject, body)
				return err
			})
			if errors.Is(err, nats.ErrNoResponders) {
				return fmt.Errorf("unkeep %s: no seat answers %s (is the seat running?)", args[0], mesh.UnkeepSubject)
			}
			if err != nil {
				return fmt.Errorf("unkeep %s: %w", args[0], err)
			}
			var rep mesh.UnkeepReply
			if err := json.Unmarshal(msg.Data, &rep); err != nil {
				return fmt.Errorf("unkeep %s: the seat's answer does not decode: %w", args[0], err)
			}
			if rep.Error != "" {
				return fmt.Errorf("unkeep %s: the seat says: %s", args[0], rep.Error)
			}
			w := rep.Cleared
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s unkept: the %s of %s at %s is cleared; the key is asked again (see asks)\n",
				args[0], w.Option, w.By.Who, w.At.UTC().Format(time.RFC3339))
			return err
		},
	}
	bf.add(cmd)
	bf.addTimeout(cmd)
	cmd.Flags().StringVar(&user, "user", "", "the operator you unkeep as, said in the seat's log (default: the user of the credentials, else operator)")
	return cmd
}
