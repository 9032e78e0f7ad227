package auth

import (
	"bytes"
	"fmt"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// include returns the text of [IncludeFile]: the operator, the system
// account, the protocol line limit and every account's last JWT,
// preloaded (a server stores each at its start when it is newer than its
// own, and takes the newer ones at runtime from a push). names lists the
// accounts; a.mu is held.
func (a *Authority) include(names []string) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by \"mesh-provisioner auth gen\" and rewritten by each run: do not edit.\n")
	b.WriteString("# The mesh's trust: the operator, its system account, and each account's JWT (its\n")
	b.WriteString("# users' signing key and revocations). The server's own file includes it.\n")
	fmt.Fprintf(&b, "operator: %q\n", a.opToken)
	fmt.Fprintf(&b, "system_account: %s\n", a.accounts[SystemAccountName].pub)
	// A user's JWT travels in its CONNECT line: a client's permissions
	// pass the default limit of 4 KiB.
	fmt.Fprintf(&b, "max_control_line: %d\n", MaxControlLine)
	b.WriteString("resolver_preload: {\n")
	for _, name := range names {
		acc := a.accounts[name]
		fmt.Fprintf(&b, "  # %s\n  %s: %q\n", name, acc.pub, acc.token)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// resolverBlock returns the configuration of a full resolver whose
// directory is dir.
func resolverBlock(dir string) string {
	return fmt.Sprintf("resolver: {\n  type: full\n  dir: %q\n  allow_delete: false\n  interval: \"2m\"\n  timeout: \"1s\"\n}\n", dir)
}

// serverConfig returns the text of [ConfigFile] as Gen writes it when
// there is none: the include, the JetStream store and the resolver's
// directory. It is the operator's from then on.
func serverConfig(opts Options) []byte {
	var b bytes.Buffer
	src := opts.Source
	if src == "" {
		src = "the mesh"
	}
	fmt.Fprintf(&b, "# nats-server configuration of %s. Yours to edit: \"mesh-provisioner auth gen\"\n", src)
	b.WriteString("# wrote it once and never writes it again. It writes " + IncludeFile + " beside it (the operator,\n")
	b.WriteString("# the accounts and their users' keys) and pushes changed accounts to running servers.\n")
	b.WriteString("# Add listen, monitoring (http: 127.0.0.1:8222, loopback only: it answers without credentials and\n")
	b.WriteString("# lists every user's key, consumer and inbox), TLS and cluster blocks here; docs/deploying.md.\n\n")
	fmt.Fprintf(&b, "include %q\n\n", IncludeFile)
	b.WriteString("jetstream: {\n")
	fmt.Fprintf(&b, "  store_dir: %q\n", opts.StoreDir)
	maxStore(&b, opts.MaxStore)
	if opts.Domain != "" {
		fmt.Fprintf(&b, "  domain: %s\n", opts.Domain)
	}
	b.WriteString("}\n\n")
	b.WriteString("# The accounts' JWTs, kept by the server and updated at runtime (full resolver).\n")
	b.WriteString(resolverBlock(opts.ResolverDir))
	return b.Bytes()
}

// maxStore writes the jetstream block's max_file_store line, saying why,
// for n bytes (none for zero).
func maxStore(b *bytes.Buffer, n int64) {
	if n <= 0 {
		return
	}
	b.WriteString("  # What the mesh's buckets reserve: the server reserves each bucket's size bound when it is made\n")
	b.WriteString("  # and refuses one that does not fit. Raise it for more providers (docs/deploying.md).\n")
	fmt.Fprintf(b, "  max_file_store: %s\n", bus.Size(n))
}

// generatedBefore reports whether conf is a configuration an earlier
// version of Gen wrote whole (resolver MEMORY): no operator's text, Gen
// replaces it.
func generatedBefore(conf []byte) bool {
	first, _, _ := bytes.Cut(conf, []byte("\n"))
	return bytes.HasPrefix(first, []byte("# nats-server configuration of ")) &&
		bytes.Contains(first, []byte(`written by "mesh-provisioner auth gen".`)) &&
		bytes.Contains(conf, []byte("\nresolver: MEMORY\n"))
}
