package cli

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/assemble"
	"github.com/mesh-provisioner/mesh-provisioner/internal/auth"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/meshfile"
)

func init() { commands = append(commands, newAuthCmd) }

// newAuthCmd returns "auth", the mesh's NATS users.
func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make the mesh's NATS users and their permissions (docs/trust.md)",
	}
	cmd.AddCommand(newAuthGenCmd(), newAuthPushCmd(), newAuthRenewCmd(), newAuthRotateCmd())
	return cmd
}

func newAuthGenCmd() *cobra.Command {
	var file, dir, store string
	var operators []string
	var expiry time.Duration
	var p pushFlags
	var c clusterFlags
	var leaves []string
	var domain string
	cmd := &cobra.Command{
		Use:   "gen -f MESHFILE -o DIR",
		Short: "Write the mesh's NATS trust (operator, accounts, one credentials file per party) and push it to running servers",
		Long: `gen writes into DIR the mesh's NATS trust in operator mode: ` + auth.IncludeFile + ` (the operator's JWT, the
system account and every account's JWT), the account "` + auth.AccountName + `" with JetStream, and one credentials
file per party (<user>.creds, mode 0600), each user's JWT carrying its party's permissions (docs/trust.md),
signed by the account's signing key and expiring after --expiry:

  mesh-provisioner   the seat: alone writes registry, plans, provisions, refused and its lease
  mesh-asks          the ask router: its records; answers asks.*, mesh-asks.answer.*, withdraw, list
  mesh-vault         the vault: its entries; answers mesh-vault.secret.*.*, .consumers.*.*, .rotate
  <module>           each module: asks mesh-vault.secret.<module>.<module>; a provider (state names bound)
                     also writes <module>_bound, reads plans and provisions, asks
                     mesh-vault.consumers.<module>.<module>
  client-<node>      each node's client: writes <node>.> of applied and collect, reads its node's keys,
                     asks mesh-vault.secret.<placed module>.client-<node>
  <operator>         each operator (--operator, default "operator"): applies the mesh file, reads
                     everything, answers asks as mesh-asks.answer.<operator>, rotates credentials

Each operator also gets a system-account user, DIR/` + auth.SystemDir + `/<operator>.creds, for the server's own
reports only (nats --creds DIR/` + auth.SystemDir + `/operator.creds --inbox-prefix _INBOX_operator server report
jetstream; server list, info, ping, check): it may not push accounts, purge, kick or reload.

` + auth.ConfigFile + ` is written only when DIR has none: it includes ` + auth.IncludeFile + ` and names the JetStream
store and the full resolver's directory; from then on it is yours (listen, cluster, TLS, monitoring).
Seeds of the operator and the accounts are kept in DIR/keys (mode 0600). Running gen again keeps every
key and every file that holds what it would write (the same mesh file gives the same bytes; a server's
"nats-server --signal reload" takes it); a party no longer in the file has its credentials moved to
DIR/revoked and is revoked in its account's JWT, and so are the older JWTs of a party whose permissions
changed. With --push, the accounts' JWTs go to the running servers at once: a revoked party's
connections are closed and its old credentials refused on every server.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" || dir == "" {
				return usageError{fmt.Errorf("auth gen needs -f MESHFILE and -o DIR")}
			}
			f, err := meshfile.ParseFile(file)
			if err != nil {
				return err
			}
			parties, err := access.Parties(auth.MeshOf(f, operators))
			if err != nil {
				return err
			}
			// A new server file's max store holds the mesh's buckets.
			reserved := access.StoreReserved(assemble.Providers(f))
			res, err := auth.Gen(dir, parties, auth.Options{StoreDir: store, Source: file, Expiry: expiry, Domain: domain, MaxStore: reserved})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, wroteLine(res, dir))
			if res.ConfigKept {
				fmt.Fprintf(out, "kept %s as it is (yours)\n", res.Config)
			} else {
				fmt.Fprintf(out, "wrote %s (yours to edit from now on; gen never writes it again)\n", res.Config)
			}
			fmt.Fprintf(out, "keys made: %s\n", list(res.Made))
			fmt.Fprintf(out, "signed anew: %s\n", list(someOfList(res.Signed, 8)))
			if len(res.Revoked) > 0 {
				fmt.Fprintf(out, "revoked (no longer in %s): %s\n", file, list(res.Revoked))
			}
			if len(res.Narrowed) > 0 {
				fmt.Fprintf(out, "older credentials revoked (permissions changed): %s\n", list(res.Narrowed))
				// Their parties run on with the files of this directory only: the
				// renewed ones are theirs to be handed (a party elsewhere still
				// holds the revoked one).
				for _, u := range res.Narrowed {
					fmt.Fprintf(out, "  hand %s to %s (its older file is refused now)\n", res.Creds[u], u)
				}
			}
			if op := firstOperator(operators); res.System[op] != "" {
				sys := res.System[op]
				fmt.Fprintf(out, "the operator's system user: %s (nats --creds %s --inbox-prefix %s server report jetstream)\n",
					sys, sys, access.InboxPrefix(op))
			}
			if len(c.servers) > 0 {
				c.domain, c.maxStore = domain, reserved
				paths, err := c.write(dir)
				if err != nil {
					return err
				}
				for _, path := range paths {
					fmt.Fprintf(out, "server: nats-server -c %s\n", path)
				}
				if w := c.plainWarning(); w != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), w)
				}
			}
			if err := writeLeaves(out, leaves, res.Authority.Domain(), c.ca, dir, file, parties, res); err != nil {
				return err
			}
			if p.url == "" {
				fmt.Fprintf(out, "run: nats-server -c %s; a running server takes a change from \"auth push -o %s --nats URL\"\n", res.Config, dir)
				return nil
			}
			p.ca = c.ca
			return p.push(cmd, res.Authority, res.Accounts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "file", "f", "", "the mesh file")
	fl.StringVarP(&dir, "output", "o", "", "the directory to write into (created, mode 0700; refused when its group or others may write it or anything in it)")
	fl.StringVar(&store, "store", "", "JetStream store directory written into a new "+auth.ConfigFile+" (default DIR/jetstream)")
	fl.StringArrayVar(&operators, "operator", nil, "an operator's user name (repeat for several; default operator)")
	fl.DurationVar(&expiry, "expiry", 0, "life of each user's JWT, renewed by gen or \"auth renew\" once a third is left (default 720h, or what DIR keeps from the last run given one)")
	c.add(cmd)
	p.add(cmd, "push")
	fl.StringVar(&domain, "domain", "", "the JetStream domain of the mesh's servers (written into new server files; the users may also call JetStream's API in it; kept in DIR for later runs): needed by --leaf")
	fl.StringArrayVar(&leaves, "leaf", nil, "an edge node's leafnode server, NODE[:PORT]=URL[,URL...] with the hub's leafnode URLs (nats-leaf://host:7422): writes DIR/"+auth.LeavesDir+"/NODE/"+auth.ConfigFile+" when missing")
	return cmd
}

// clusterFlags describe a cluster whose servers' files auth gen writes.
type clusterFlags struct {
	name, cert, key, ca string
	domain              string
	maxStore            int64 // each server's max_file_store, bytes
	servers             []string
}

func (c *clusterFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&c.name, "cluster", "mesh", "with --server: the cluster's name")
	fl.StringArrayVar(&c.servers, "server", nil, "a server of a cluster, NAME=HOST[:PORT[:CLUSTERPORT[:HTTPPORT[:LEAFPORT]]]] (repeat, 3 or 5; default ports 4222, 6222, 8222, 7422): writes DIR/"+auth.ServersDir+"/NAME/"+auth.ConfigFile+" when missing")
	fl.StringVar(&c.cert, "tls-cert", "", "with --server: each server's certificate file (client, route and leafnode TLS)")
	fl.StringVar(&c.key, "tls-key", "", "with --server: its key file")
	fl.StringVar(&c.ca, "tls-ca", "", "with --server: the CA file that signs the peers' certificates (--push checks the servers' against it too)")
}

// write writes the servers' files into dir.
func (c *clusterFlags) write(dir string) ([]string, error) {
	cl := auth.Cluster{Name: c.name, Domain: c.domain, MaxStore: c.maxStore}
	for _, s := range c.servers {
		srv, err := auth.ParseServer(s)
		if err != nil {
			return nil, usageError{err}
		}
		cl.Servers = append(cl.Servers, srv)
	}
	if c.cert != "" || c.key != "" || c.ca != "" {
		if c.cert == "" || c.key == "" || c.ca == "" {
			return nil, usageError{fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")}
		}
		cl.TLS = &auth.TLSFiles{Cert: c.cert, Key: c.key, CA: c.ca}
	}
	return cl.Write(dir)
}

// plainWarning returns the warning auth gen says of a cluster whose
// servers listen beyond loopback without TLS ("" with TLS, or on loopback
// only): every value the vault answers and the route password would cross
// the network in clear.
func (c *clusterFlags) plainWarning() string {
	if c.cert != "" {
		return ""
	}
	var off []string
	for _, s := range c.servers {
		srv, err := auth.ParseServer(s)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(srv.Host); ip == nil || !ip.IsLoopback() {
			if srv.Host != "localhost" {
				off = append(off, srv.Name+"="+srv.Host)
			}
		}
	}
	if len(off) == 0 {
		return ""
	}
	return "warning: the servers " + strings.Join(off, ", ") + " listen beyond loopback without TLS: every value the vault answers, " +
		"and the route password, cross the network in clear; give --tls-cert, --tls-key and --tls-ca (docs/trust.md)"
}

// firstOperator returns the first of the --operator names, or the
// default operator.
func firstOperator(operators []string) string {
	if len(operators) == 0 {
		return access.DefaultOperator
	}
	return operators[0]
}

// pushFlags say where the accounts' JWTs are pushed.
type pushFlags struct {
	url     string
	servers int
	// ca is the CA file the servers' certificates are checked against
	// (--tls-ca), "" for servers without TLS.
	ca string
}

// add adds the flags of a push to cmd: name is the URL's flag; --tls-ca
// is added unless cmd has one already (auth gen's, which the caller copies
// into p.ca).
func (p *pushFlags) add(cmd *cobra.Command, name string) {
	cmd.Flags().StringVar(&p.url, name, "", "push the accounts' JWTs to the running servers at this NATS URL (a comma-separated list for a cluster), as DIR/"+auth.SystemDir+"/"+auth.PushUser+auth.CredsExt)
	cmd.Flags().IntVar(&p.servers, "servers", 1, "how many servers must take each account's JWT (the cluster's size)")
	if cmd.Flags().Lookup("tls-ca") == nil {
		cmd.Flags().StringVar(&p.ca, "tls-ca", "", "the CA file (PEM) that signs the servers' certificates, for servers with TLS")
	}
}

// push delivers jwts to the servers at p.url as a's pushing system user.
func (p *pushFlags) push(cmd *cobra.Command, a *auth.Authority, jwts []string) error {
	creds, err := a.SystemCreds()
	if err != nil {
		return err
	}
	nc, _, err := bus.Connect(bus.Dial{URL: p.url, Name: auth.PushUser, Creds: creds, CA: p.ca})
	if err != nil {
		return err
	}
	defer nc.Close()
	// The servers' copies first: a revocation whose record in DIR was
	// lost is kept from them, never undone by this push.
	merged := false
	for _, pub := range a.AccountKeys() {
		token, err := bus.LookupClaims(cmd.Context(), nc, pub)
		if err != nil {
			return err
		}
		changed, err := a.Merge(token)
		if err != nil {
			return err
		}
		merged = merged || changed
	}
	if merged {
		if jwts, err = a.Accounts(); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "kept the servers' revocations that DIR had lost\n")
	}
	if err := bus.PushClaims(cmd.Context(), nc, jwts, p.servers); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "pushed %d accounts' JWTs to %s (%s took each)\n", len(jwts), p.url, plural(max(p.servers, 1), "server"))
	return nil
}

func newAuthPushCmd() *cobra.Command {
	var dir string
	var p pushFlags
	cmd := &cobra.Command{
		Use:   "push -o DIR --nats URL",
		Short: "Push the accounts' JWTs of DIR to the running servers (revocations take effect at once)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || p.url == "" {
				return usageError{fmt.Errorf("auth push needs -o DIR and --nats URL")}
			}
			a, err := auth.Open(dir, auth.Options{})
			if err != nil {
				return err
			}
			jwts, err := a.Accounts()
			if err != nil {
				return err
			}
			return p.push(cmd, a, jwts)
		},
	}
	cmd.Flags().StringVarP(&dir, "output", "o", "", "the directory auth gen wrote")
	p.add(cmd, "nats")
	return cmd
}

func newAuthRenewCmd() *cobra.Command {
	var dir string
	var expiry time.Duration
	cmd := &cobra.Command{
		Use:   "renew -o DIR",
		Short: "Sign anew, same key and permissions, every credentials file of DIR whose JWT has a third of its life left or less",
		Long: `renew signs anew every credentials file of DIR (and DIR/` + auth.SystemDir + `) whose JWT is due: a third of
--expiry left or less, or expired. Hand each renewed file to its party (the node or component that runs
with it) in place of the old one: a running component reads its file again when it reconnects, which the
server makes it do when the old JWT expires. Nothing needs pushing: the accounts do not change.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageError{fmt.Errorf("auth renew needs -o DIR")}
			}
			a, err := auth.Open(dir, auth.Options{Expiry: expiry})
			if err != nil {
				return err
			}
			renewed, err := a.Renew()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "renewed: %s\n", list(renewed))
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "output", "o", "", "the directory auth gen wrote")
	cmd.Flags().DurationVar(&expiry, "expiry", 0, "life of each renewed JWT (default what DIR keeps, else 720h)")
	return cmd
}

func newAuthRotateCmd() *cobra.Command {
	var file, dir string
	var operators []string
	var expiry time.Duration
	var p pushFlags
	cmd := &cobra.Command{
		Use:   "rotate -f MESHFILE -o DIR USER",
		Short: "Give a party a new key in every account it has a user in: each of its credentials files is written anew and every JWT of its old keys revoked",
		Long: `rotate gives USER a new key for each of its users: DIR/<USER>.creds, DIR/` + string(access.Services) + `/<USER>.creds and
DIR/` + string(access.Requests) + `/<USER>.creds where it has them, and an operator's DIR/` + auth.SystemDir + `/<USER>.creds; every JWT
of each old key is revoked in its account. With --push the accounts are pushed at once: every server refuses
the old files and closes their connections. Hand the new files to the party (the machine that runs it), each
where the old one was: a running component reconnects with the files it finds there.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" || dir == "" {
				return usageError{fmt.Errorf("auth rotate needs -f MESHFILE and -o DIR")}
			}
			f, err := meshfile.ParseFile(file)
			if err != nil {
				return err
			}
			parties, err := access.Parties(auth.MeshOf(f, operators))
			if err != nil {
				return err
			}
			i := slices.IndexFunc(parties, func(p access.Party) bool { return p.User == args[0] })
			if i < 0 {
				return usageError{fmt.Errorf("%s is no party of %s", args[0], file)}
			}
			a, err := auth.Open(dir, auth.Options{Expiry: expiry})
			if err != nil {
				return err
			}
			issued, err := a.Rotate(parties[i])
			if err != nil {
				return err
			}
			jwts, err := a.Accounts()
			if err != nil {
				return err
			}
			paths := make([]string, len(issued))
			for j, is := range issued {
				paths[j] = is.Path
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated %s: a new key in each of its files (%s); its old keys are revoked once pushed\n",
				args[0], strings.Join(paths, ", "))
			if p.url == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "push it: auth push -o %s --nats URL\n", dir)
				return nil
			}
			return p.push(cmd, a, jwts)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "file", "f", "", "the mesh file")
	fl.StringVarP(&dir, "output", "o", "", "the directory auth gen wrote")
	fl.StringArrayVar(&operators, "operator", nil, "an operator's user name (repeat for several; default operator)")
	fl.DurationVar(&expiry, "expiry", 0, "life of the new JWT (default what DIR keeps, else 720h)")
	p.add(cmd, "push")
	return cmd
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// exactArgs wants n arguments, else a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("takes %d argument(s), got %d", n, len(args))}
		}
		return nil
	}
}

// someOfList returns s as one element naming its first n ([someOf]),
// none when s is empty.
func someOfList(s []string, n int) []string {
	if len(s) == 0 {
		return nil
	}
	return []string{someOf(s, n)}
}

// writeLeaves writes the leafnode servers' files of --leaf: one remote
// per account the node's client has a user in, over TLS checked against
// ca (--tls-ca) when it is set.
func writeLeaves(out io.Writer, leaves []string, domain, ca, dir, file string, parties []access.Party, res *auth.Result) error {
	for _, spec := range leaves {
		l, err := auth.ParseLeaf(spec)
		if err != nil {
			return usageError{err}
		}
		l.CA = ca
		if domain == "" {
			return usageError{fmt.Errorf("--leaf needs --domain: an edge node's client reaches the hub's JetStream in its domain")}
		}
		i := slices.IndexFunc(parties, func(p access.Party) bool { return p.User == access.ClientUser(l.Node) })
		if i < 0 {
			return usageError{fmt.Errorf("--leaf %s: %s names no node %s", spec, file, l.Node)}
		}
		var remotes []auth.Remote
		for _, in := range parties[i].Accounts() {
			remotes = append(remotes, auth.Remote{Account: res.Authority.AccountKey(string(in)),
				Creds: auth.AccountCredsPath(dir, in, parties[i].User)})
		}
		path, err := l.Write(dir, remotes)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "leaf of %s: nats-server -c %s (on %s; its client: --nats nats://127.0.0.1:%d --domain %s)\n",
			l.Node, path, l.Node, l.ListenPort(), domain)
	}
	return nil
}

// wroteLine says what auth gen wrote in dir: the include file when its
// bytes changed, and the credentials files of the parties it signed anew
// (every other file is kept byte for byte), or that nothing changed.
func wroteLine(res *auth.Result, dir string) string {
	var wrote []string
	if res.IncludeWritten {
		wrote = append(wrote, res.Include)
	}
	switch n := len(res.Signed); n {
	case 0:
	case 1:
		wrote = append(wrote, "1 credentials file")
	default:
		wrote = append(wrote, fmt.Sprintf("%d credentials files", n))
	}
	if len(wrote) == 0 {
		return fmt.Sprintf("nothing changed in %s: every file already holds what gen writes", dir)
	}
	return fmt.Sprintf("wrote %s in %s", strings.Join(wrote, " and "), dir)
}
