package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/web"
)

func init() { commands = append(commands, newWebCmd) }

// defaultWeb is where up and web serve the operator's page unless told.
const defaultWeb = "127.0.0.1:4280"

func newWebCmd() *cobra.Command {
	var bf busFlags
	var listen, user, logLevel, login string
	cmd := &cobra.Command{
		Use:   "web",
		Short: "Serve the operator's page: the mesh's summary, nodes, keys and their whys, open asks, live",
		Long: `web serves a page on --listen (loopback by default): the mesh's summary (the seat's lease, every node with
its plans, counts per state, what it provides, held modules and open asks, 50 rows a page), drill-down to a
node, a module or a key (its why walk), search by key, node, module or state, and the open asks with a
button per option. The page updates itself as the mesh changes, with only what changed. A click answers through the ask router as --user, the NATS user of --creds.

Every route of the page answers only a browser that opened its login URL, printed at the start
(http://ADDR/?login=SECRET): the secret lives in --login (default: web-login beside --creds, mode 0600, made
when missing), so only the Unix user who may read the credentials may log in; the browser is then given a
session cookie (HttpOnly, SameSite=Strict) and sent to the page without the secret. Beyond loopback the page
still asks for the login, but over plain HTTP: the URL and the cookie cross the network readable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logger(logLevel, os.Stderr)
			if err != nil {
				return err
			}
			bf.log = log
			user = bf.user(user)
			// The page is a component: started before its server
			// answers, it waits for it as the others do.
			var snc, nc *nats.Conn
			var js jetstream.JetStream
			err = bus.Retry(cmd.Context(), componentWait, bf.sayer(), "connect the page", func() (err error) {
				if snc, js, err = bf.connect("operator-web"); err != nil {
					return err
				}
				if nc, err = bf.connectAsk("operator-web"); err != nil {
					snc.Close()
				}
				return err
			})
			if err != nil {
				return err
			}
			defer snc.Close()
			defer nc.Close()
			if login == "" {
				login = webLogin(bf.credsOrDefault())
			}
			if err := serveWeb(cmd.Context(), listen, login, nc, js, user, cmd.OutOrStdout(), log); err != nil {
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
	cmd.Flags().StringVar(&login, "login", "", "the file of the page's login secret, made (0600) when missing (default: "+web.LoginFile+" beside the credentials file, else in the state directory)")
	return cmd
}

// loginError is a page's login file that cannot be used ([web.ReadLogin]).
type loginError struct{ error }

func (e loginError) Unwrap() error { return e.error }

// webLogin is where the web command keeps its page's login secret:
// web-login beside creds (the operator's credentials file, whose
// directory only the operator reads), else in the default data directory.
func webLogin(creds string) string {
	if creds != "" {
		return filepath.Join(filepath.Dir(creds), web.LoginFile)
	}
	return filepath.Join(defaultDataDir(), web.LoginFile)
}

// serveWeb serves the operator's page on listen until ctx is done: its
// copies follow through js, its answers go through nc (the operator's
// user in the requests account) as user; it lets in only a browser that
// opened its login URL, whose secret is kept in the file login
// ([web.ReadLogin]: made 0600 when missing, refused when others may read
// it). It prints the login URL and where the secret lives, and a warning
// when listen is not a loopback address.
func serveWeb(ctx context.Context, listen, login string, nc *nats.Conn, js jetstream.JetStream, user string, out io.Writer, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen %q: %w", listen, err)}
	}
	var hosts []string
	if ip := net.ParseIP(host); ip == nil && host != "" && host != "localhost" {
		hosts = append(hosts, host)
	}
	secret, err := web.ReadLogin(login)
	if err != nil {
		return loginError{err}
	}
	page := web.New(ctx, web.Config{JS: js, NC: nc, User: user, Log: log, Hosts: hosts, Login: secret, LoginFile: login})
	at, err := web.Serve(ctx, listen, page, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "web page on %s (answers as %s; open this URL to log in: its secret is in %s, for your Unix user only)\n",
		web.LoginURL(at, secret), user, login)
	if ip := net.ParseIP(host); host == "" || (ip != nil && !ip.IsLoopback()) || (ip == nil && host != "localhost") {
		fmt.Fprintf(out, "warning: the page listens on %s, beyond this machine: it still lets in only the login URL's browser, "+
			"but over plain HTTP the URL and its session cookie cross the network readable, and whoever reads them answers asks as %s\n", listen, user)
	}
	return nil
}
