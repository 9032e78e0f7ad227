package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func init() { commands = append(commands, newAnswerCmd) }

func newAnswerCmd() *cobra.Command {
	var bf busFlags
	var user string
	cmd := &cobra.Command{
		Use:   "answer ASK-ID yes|no",
		Short: "Answer an open ask: yes removes, no keeps",
		Long: "answer decides one open ask through the ask router (mesh-asks.answer.<user>). The router writes\n" +
			"the warrant: the option, the digest of the act it binds, who answered (--user, the NATS user you\n" +
			"connect as; the bus lets each user answer only under its own name) and when. With credentials (a\n" +
			"mesh with accounts) the answer is signed: your user JWT and your key's signature of the option's\n" +
			"digest go with it, and the seat takes no warrant without them. An unknown ask, an ask no longer\n" +
			"open or an option the ask does not offer is refused with the router's why.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError{fmt.Errorf("want ASK-ID and an option (yes or no), got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			user = bf.user(user)
			nc, err := bf.connectAsk("cli-answer")
			if err != nil {
				return err
			}
			defer nc.Close()
			// Asked again only while no router takes it: an answer whose
			// request timed out may have been recorded.
			var rec mesh.Record
			err = bf.retryUntaken(cmd.Context(), "answer "+args[0], func(ctx context.Context) (err error) {
				ctx, cancel := context.WithTimeout(ctx, requestTimeout)
				defer cancel()
				rec, err = asks.Answer(ctx, nc, user, args[0], args[1])
				return err
			})
			if err != nil {
				return err
			}
			w := rec.Warrant
			label := ""
			if o, ok := rec.Ask.Option(w.Option); ok && o.Label != "" {
				label = " (" + o.Label + ")"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ask %s answered %s%s by %s at %s\n%s\nwarrant binds %s\n",
				rec.Ask.ID, w.Option, label, w.By.Who, w.At.UTC().Format(time.RFC3339), rec.Ask.Headline, w.Binds)
			return nil
		},
	}
	bf.add(cmd)
	bf.addTimeout(cmd)
	cmd.Flags().StringVar(&user, "user", "", "the NATS user you answer as, named in the warrant (default: the user of the credentials, else operator)")
	return cmd
}
