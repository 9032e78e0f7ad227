package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ServersDir holds one folder per server of a cluster, written by
// [Cluster.Write]: "servers/<name>/nats-server.conf".
const ServersDir = "servers"

// Default ports of a cluster's servers.
const (
	DefaultClientPort  = 4222
	DefaultClusterPort = 6222
	DefaultHTTPPort    = 8222
	DefaultLeafPort    = 7422
)

// Cluster describes a NATS cluster of the mesh, for [Cluster.Write].
type Cluster struct {
	// Name is the cluster's name (cluster.name of every server).
	Name string
	// Servers lists the cluster's servers, 3 or 5 for JetStream's R3.
	Servers []Server
	// Domain is the JetStream domain of every server (see
	// [Options.Domain]); empty means none.
	Domain string
	// MaxStore is every server's JetStream max store in bytes (see
	// [Options.MaxStore]): a replicated bucket reserves its bound on each
	// server holding a replica. Zero writes none.
	MaxStore int64
	// TLS, when set, names the certificate files every server uses for
	// its clients, routes and leafnodes (on routes, verify: each server's
	// certificate is checked against CA by the others, so it must allow
	// client authentication too).
	TLS *TLSFiles
}

// Server is one server of a [Cluster].
type Server struct {
	// Name is its server_name.
	Name string
	// Host is the address it listens on and the others reach it at.
	Host string
	// Port, ClusterPort, HTTPPort and LeafPort are its client, route,
	// monitoring and leafnode ports; zero means the defaults (4222, 6222,
	// 8222, 7422).
	Port, ClusterPort, HTTPPort, LeafPort int
}

// TLSFiles are the paths of a server's certificate, its key and the CA
// that signs its peers'.
type TLSFiles struct{ Cert, Key, CA string }

// ParseServer reads a server given as "NAME=HOST[:PORT[:CLUSTERPORT[:HTTPPORT[:LEAFPORT]]]]".
func ParseServer(s string) (Server, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || rest == "" {
		return Server{}, fmt.Errorf("auth: server %q: want NAME=HOST[:PORT[:CLUSTERPORT[:HTTPPORT[:LEAFPORT]]]]", s)
	}
	parts := strings.Split(rest, ":")
	srv := Server{Name: name, Host: parts[0]}
	ports := []*int{&srv.Port, &srv.ClusterPort, &srv.HTTPPort, &srv.LeafPort}
	if len(parts)-1 > len(ports) {
		return Server{}, fmt.Errorf("auth: server %q: more than four ports", s)
	}
	for i, p := range parts[1:] {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return Server{}, fmt.Errorf("auth: server %q: port %q is no port", s, p)
		}
		*ports[i] = n
	}
	return srv, nil
}

func (s Server) ports() (client, cluster, http, leaf int) {
	or := func(n, d int) int {
		if n == 0 {
			return d
		}
		return n
	}
	return or(s.Port, DefaultClientPort), or(s.ClusterPort, DefaultClusterPort), or(s.HTTPPort, DefaultHTTPPort), or(s.LeafPort, DefaultLeafPort)
}

// Write writes into dir/servers/<name>/nats-server.conf the configuration
// of each server of c that has none (a file there is the operator's, kept
// as it is), and returns the paths of every server's file. Each includes
// dir's [IncludeFile] (so the trust is the one [Gen] writes), and names its
// server_name, its client, monitoring and leafnode listeners, its
// JetStream store and full resolver directory in its folder, and the
// cluster block: the routes to every other server, authenticated by a
// route user whose password is made once and kept in dir/keys/route.secret
// (mode 0600), with TLS when c.TLS is set. It returns an error for fewer
// than 3 servers, a name that repeats, or a file that cannot be written.
func (c Cluster) Write(dir string) ([]string, error) {
	if len(c.Servers) < 3 {
		return nil, fmt.Errorf("auth: a cluster of %d servers: JetStream's replicas need 3 or 5", len(c.Servers))
	}
	if c.Name == "" {
		return nil, fmt.Errorf("auth: the cluster has no name")
	}
	seen := map[string]bool{}
	for _, s := range c.Servers {
		if seen[s.Name] || s.Name == "" || s.Host == "" {
			return nil, fmt.Errorf("auth: server %q: a name and a host each, and no name twice", s.Name)
		}
		seen[s.Name] = true
	}
	if err := CheckTree(dir); err != nil {
		return nil, err
	}
	secret, err := routeSecret(dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	var paths []string
	for _, s := range c.Servers {
		folder := filepath.Join(abs, ServersDir, s.Name)
		if err := os.MkdirAll(folder, 0o700); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		path := filepath.Join(folder, ConfigFile)
		paths = append(paths, path)
		have, err := readIfThere(path)
		if err != nil {
			return nil, err
		}
		if have != nil {
			continue
		}
		if err := writeFile(path, c.config(s, folder, secret), 0o600); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// monitorHost returns the loopback address of the family of host (an
// IPv6 address gets ::1, anything else 127.0.0.1): where a server's
// monitoring port listens.
func monitorHost(host string) string {
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		return "::1"
	}
	return "127.0.0.1"
}

// config returns the text of server s's configuration, whose folder is
// folder.
func (c Cluster) config(s Server, folder, secret string) []byte {
	client, cluster, http, leaf := s.ports()
	var b bytes.Buffer
	fmt.Fprintf(&b, "# nats-server configuration of %s, one of the %d servers of the cluster %q. Yours to edit:\n", s.Name, len(c.Servers), c.Name)
	b.WriteString("# \"mesh-provisioner auth gen\" wrote it once and never writes it again. Run it with\n")
	fmt.Fprintf(&b, "# nats-server -c %s\n\n", filepath.Join(folder, ConfigFile))
	fmt.Fprintf(&b, "include %q\n\n", filepath.Join("..", "..", IncludeFile))
	fmt.Fprintf(&b, "server_name: %s\n", s.Name)
	fmt.Fprintf(&b, "listen: %s\n", net.JoinHostPort(s.Host, strconv.Itoa(client)))
	// Monitoring answers anyone who reaches it, without credentials, and
	// names every connection's user key, every consumer and its deliver
	// subject: on loopback only, for the server's own host.
	b.WriteString("# Monitoring has no authentication and lists every user's key, consumer and inbox: keep it\n")
	b.WriteString("# on loopback (reports over the bus: the operator's system user, nats server report).\n")
	fmt.Fprintf(&b, "http: %s\n", net.JoinHostPort(monitorHost(s.Host), strconv.Itoa(http)))
	c.tls(&b, "", false)
	b.WriteString("\njetstream: {\n")
	fmt.Fprintf(&b, "  store_dir: %q\n", filepath.Join(folder, "jetstream"))
	maxStore(&b, c.MaxStore)
	if c.Domain != "" {
		fmt.Fprintf(&b, "  domain: %s\n", c.Domain)
	}
	b.WriteString("}\n\n")
	b.WriteString(resolverBlock(filepath.Join(folder, ResolverDir)))
	b.WriteString("\ncluster: {\n")
	fmt.Fprintf(&b, "  name: %s\n", c.Name)
	fmt.Fprintf(&b, "  listen: %s\n", net.JoinHostPort(s.Host, strconv.Itoa(cluster)))
	fmt.Fprintf(&b, "  authorization: {\n    user: route\n    password: %q\n  }\n", secret)
	b.WriteString("  routes: [\n")
	for _, o := range c.Servers {
		if o.Name == s.Name {
			continue
		}
		_, oc, _, _ := o.ports()
		fmt.Fprintf(&b, "    \"nats-route://route:%s@%s\"\n", secret, net.JoinHostPort(o.Host, strconv.Itoa(oc)))
	}
	b.WriteString("  ]\n")
	c.tls(&b, "  ", true)
	b.WriteString("}\n\n")
	b.WriteString("# Edge nodes' leafnode servers connect here (remotes: nats-leaf://<host>:<port>, with a party's\n")
	b.WriteString("# credentials); see docs/deploying.md.\n")
	fmt.Fprintf(&b, "leafnodes: {\n  listen: %s\n", net.JoinHostPort(s.Host, strconv.Itoa(leaf)))
	// A leaf authenticates with its node's credentials, as a client
	// does: no certificate of its own is asked for.
	c.tls(&b, "  ", false)
	b.WriteString("}\n")
	return b.Bytes()
}

// tls writes c's TLS block with indent, or a comment saying where one
// goes; verify checks the peer's certificate.
func (c Cluster) tls(b *bytes.Buffer, indent string, verify bool) {
	if c.TLS == nil {
		fmt.Fprintf(b, "%s# tls: { cert_file: \"server.pem\", key_file: \"server-key.pem\", ca_file: \"ca.pem\"%s }\n", indent, map[bool]string{true: ", verify: true", false: ""}[verify])
		return
	}
	fmt.Fprintf(b, "%stls: {\n%s  cert_file: %q\n%s  key_file: %q\n%s  ca_file: %q\n", indent, indent, c.TLS.Cert, indent, c.TLS.Key, indent, c.TLS.CA)
	if verify {
		fmt.Fprintf(b, "%s  verify: true\n", indent)
	}
	fmt.Fprintf(b, "%s}\n", indent)
}

// routeSecret returns the routes' password kept in dir/keys/route.secret,
// made (24 random bytes, base64url) when there is none.
func routeSecret(dir string) (string, error) {
	path := filepath.Join(dir, KeysDir, "route.secret")
	b, err := readIfThere(path)
	if err != nil {
		return "", err
	}
	if b != nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("auth: route secret: %w", err)
	}
	s := base64.RawURLEncoding.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	return s, writeFile(path, []byte(s+"\n"), 0o600)
}

// LeavesDir holds one folder per edge node's leafnode server, written by
// [Leaf.Write]: "leaves/<node>/nats-server.conf".
const LeavesDir = "leaves"

// Leaf describes the leafnode server of an edge node: a nats-server on
// the node's site, without JetStream, that its client connects to, linked
// to the hub's leafnode ports; the client reaches the hub's JetStream in
// its domain ([Options.Domain]).
type Leaf struct {
	// Node is the edge node.
	Node string
	// Port is the leaf's client port on loopback; zero means 4222.
	Port int
	// Hubs are the hub's leafnode URLs ("nats-leaf://host:7422").
	Hubs []string
	// CA, when set, is the CA file that signs the hub's certificate (the
	// cluster's TLS): the links require TLS and check the hub against it.
	CA string
}

// ParseLeaf reads a leaf given as "NODE[:PORT]=URL[,URL...]".
func ParseLeaf(s string) (Leaf, error) {
	left, urls, ok := strings.Cut(s, "=")
	if !ok || left == "" || urls == "" {
		return Leaf{}, fmt.Errorf("auth: leaf %q: want NODE[:PORT]=URL[,URL...]", s)
	}
	l := Leaf{Hubs: strings.Split(urls, ",")}
	node, port, hasPort := strings.Cut(left, ":")
	l.Node = node
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n <= 0 || n > 65535 {
			return Leaf{}, fmt.Errorf("auth: leaf %q: port %q is no port", s, port)
		}
		l.Port = n
	}
	return l, nil
}

// ListenPort returns the leaf's client port: Port, or 4222.
func (l Leaf) ListenPort() int {
	if l.Port == 0 {
		return DefaultClientPort
	}
	return l.Port
}

// Remote is one account a leaf links to the hubs, with the credentials of
// the user its link connects as.
type Remote struct {
	// Account is the account's public key; Creds the path of a
	// credentials file of one of its users.
	Account, Creds string
}

// Write writes dir/leaves/<node>/nats-server.conf when it is missing (a
// file there is the operator's) and returns its path. The leaf trusts the
// mesh's operator (it includes dir's [IncludeFile]) and keeps the
// accounts in a full resolver of its own; each of remotes binds an account
// to the hubs with the node's client's user of that account, so that what
// crosses the link is what the node's client may do, and a revoked node's
// links are refused by the hubs.
func (l Leaf) Write(dir string, remotes []Remote) (string, error) {
	if l.Node == "" || len(l.Hubs) == 0 || len(remotes) == 0 {
		return "", fmt.Errorf("auth: a leaf needs a node, a hub URL and an account")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	folder := filepath.Join(abs, LeavesDir, l.Node)
	if err := os.MkdirAll(folder, 0o700); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	path := filepath.Join(folder, ConfigFile)
	if have, err := readIfThere(path); err != nil || have != nil {
		return path, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# nats-server configuration of the leafnode server of the edge node %s. Yours to edit:\n", l.Node)
	b.WriteString("# \"mesh-provisioner auth gen\" wrote it once and never writes it again. The node's client\n")
	fmt.Fprintf(&b, "# connects to it (--nats nats://127.0.0.1:%d --domain <the hub's>) with its own credentials.\n\n", l.ListenPort())
	fmt.Fprintf(&b, "include %q\n\n", filepath.Join("..", "..", IncludeFile))
	fmt.Fprintf(&b, "server_name: leaf-%s\n", l.Node)
	fmt.Fprintf(&b, "listen: %s\n\n", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.ListenPort())))
	b.WriteString(resolverBlock(filepath.Join(folder, ResolverDir)))
	b.WriteString("\nleafnodes: {\n  remotes: [\n")
	for _, r := range remotes {
		creds, err := filepath.Abs(r.Creds)
		if err != nil {
			return "", fmt.Errorf("auth: %w", err)
		}
		b.WriteString("    {\n      urls: [")
		for i, u := range l.Hubs {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", u)
		}
		b.WriteString("]\n")
		fmt.Fprintf(&b, "      account: %s\n", r.Account)
		fmt.Fprintf(&b, "      credentials: %q\n", creds)
		if l.CA != "" {
			ca, err := filepath.Abs(l.CA)
			if err != nil {
				return "", fmt.Errorf("auth: %w", err)
			}
			fmt.Fprintf(&b, "      tls: { ca_file: %q }\n", ca)
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return path, writeFile(path, b.Bytes(), 0o600)
}

// AccountKey returns the public key of the account name, "" when the
// authority has no such account loaded.
func (a *Authority) AccountKey(name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if acc, ok := a.accounts[name]; ok {
		return acc.pub
	}
	return ""
}
