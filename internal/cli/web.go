package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
)

func init() { commands = append(commands, newWebCmd) }

// defaultWeb is where up and web serve the operator's page unless told.
const defaultWeb = "127.0.0.1:4280"

func newWebCmd() *cobra.Command {
	var bf busFlags
	var listen, user, logLevel string
	cmd := &cobra.Command{
		Use:   "web",
		Short: "Serve the operator's page: the mesh's summary, nodes, keys and their whys, open asks, live",
		Long: `web serves a page on --listen (loopback by default): the mesh's summary (the seat's lease, every node with
its plans, counts per state, what it provides, held modules and open asks, 50 rows a page), drill-down to a
node, a module or a key (its why walk), search by key, node, module or state, and the open asks with a
button per option. The page updates itself as the mesh changes, with only what changed. A click answers through the ask router as --user, the NATS user of --creds: anyone who
can open the page answers as that user, so keep it on loopback or behind your own access control.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			bf.log = log
			user = bf.user(user)
			snc, js, err := bf.connect("operator-web")
			if err != nil {
				return err
			}
			defer snc.Close()
			nc, err := bf.connectAsk("operator-web")
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := serveWeb(cmd.Context(), listen, nc, js, user, cmd.OutOrStdout(), log); err != nil {
				return err
			}
			<-cmd.Context().Done()
			log.Info("web: stopped", "listen", listen)
			return nil
		},
	}
	bf.add(cmd)
	cmd.Flags().StringVar(&listen, "listen", defaultWeb, "address the page listens on (port 0 picks a free one)")
	cmd.Flags().StringVar(&user, "user", "", "the NATS user --creds connects as: answers go as this user (default: the user of the credentials, else operator)")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	return cmd
}

// serveWeb serves the operator's page on listen until ctx is done: its
// copies follow through js, its answers go through nc (the operator's
// user in the requests account) as user. It prints
// the page's URL, and a warning when listen is not a loopback address.
func serveWeb(ctx context.Context, listen string, nc *nats.Conn, js jetstream.JetStream, user string, out io.Writer, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen %q: %w", listen, err)}
	}
	var hosts []string
	if ip := net.ParseIP(host); ip == nil && host != "" && host != "localhost" {
		hosts = append(hosts, host)
	}
	page := web.New(ctx, web.Config{JS: js, NC: nc, User: user, Log: log, Hosts: hosts})
	at, err := web.Serve(ctx, listen, page, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "web page on http://%s/ (answers as %s)\n", at, user)
	if ip := net.ParseIP(host); host == "" || (ip != nil && !ip.IsLoopback()) || (ip == nil && host != "localhost") {
		fmt.Fprintf(out, "warning: the page listens on %s, beyond this machine: whoever reaches it answers asks as %s\n", listen, user)
	}
	return nil
}
