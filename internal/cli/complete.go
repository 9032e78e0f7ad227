package cli

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Shell completion (cobra's dynamic completion: "mesh-provisioner
// completion bash|zsh|fish|powershell" writes the script): kinds, node and
// module names, keys and ask ids, read from the mesh the command's flags
// (--nats, --creds, --context) point at. Each reads keys only, and a key
// only under the node typed so far: never a whole bucket's values.

// completeTimeout bounds what one completion reads.
const completeTimeout = 2 * time.Second

// completeConn dials the mesh cmd's flags name, for a completion; nil
// when it cannot.
func completeConn(cmd *cobra.Command) (jetstream.JetStream, func()) {
	var f busFlags
	fs := cmd.Flags()
	f.url, _ = fs.GetString("nats")
	f.creds, _ = fs.GetString("creds")
	f.context, _ = fs.GetString("context")
	if f.url == "" || f.resolve(fs) != nil {
		return nil, func() {}
	}
	nc, js, err := f.connect("cli-complete")
	if err != nil {
		return nil, func() {}
	}
	return js, nc.Close
}

// keysUnder returns the keys of bucket under patterns (keys only).
func keysUnder(ctx context.Context, js jetstream.JetStream, bucket string, patterns ...string) []string {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil
	}
	var keys []string
	_ = lookup.ReadKeys(ctx, nil, kv, patterns, func(key string, _ []byte, _ uint64) { keys = append(keys, key) })
	sort.Strings(keys)
	return keys
}

// completeNames completes a name from the keys of bucket (a node from the
// placement, a module from the modules).
func completeNames(bucket string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		js, done := completeConn(cmd)
		defer done()
		if js == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
		defer cancel()
		return withPrefix(keysUnder(ctx, js, bucket, ">"), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeKey completes a key of buckets: before the first dot the node
// names (each with its dot, no space after), then the keys under that
// node.
func completeKey(cmd *cobra.Command, toComplete string, buckets ...string) ([]string, cobra.ShellCompDirective) {
	js, done := completeConn(cmd)
	defer done()
	if js == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	node, _, typed := strings.Cut(toComplete, ".")
	if !typed || !mesh.ValidName(node) {
		var out []string
		for _, n := range withPrefix(keysUnder(ctx, js, mesh.PlacementBucket, ">"), toComplete) {
			out = append(out, n+".")
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
	var keys []string
	for _, b := range buckets {
		keys = append(keys, keysUnder(ctx, js, b, node+".>")...)
	}
	sort.Strings(keys)
	return withPrefix(keys, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeAsk completes an open ask's id, then (for answer) its options.
func completeAsk(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var f busFlags
	fs := cmd.Flags()
	f.url, _ = fs.GetString("nats")
	f.creds, _ = fs.GetString("creds")
	f.context, _ = fs.GetString("context")
	if f.resolve(fs) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	nc, err := f.connectAsk("cli-complete")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	l, err := asks.List(ctx, nc, mesh.RecordOpen)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, rec := range l.Records {
		if len(args) == 0 {
			out = append(out, rec.Ask.ID)
			continue
		}
		if rec.Ask.ID == args[0] {
			for _, o := range rec.Ask.Options {
				out = append(out, o.ID)
			}
		}
	}
	sort.Strings(out)
	return withPrefix(out, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeGet completes get's kind, then a key of a kind read from a
// bucket.
func completeGet(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return withPrefix(kindNames(), toComplete), cobra.ShellCompDirectiveNoFileComp
	case 1:
		if k, ok := getKinds[args[0]]; ok && k.bucket != "" {
			return completeKey(cmd, toComplete, k.bucket)
		}
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// withPrefix returns the items that start with prefix.
func withPrefix(items []string, prefix string) []string {
	var out []string
	for _, it := range items {
		if strings.HasPrefix(it, prefix) {
			out = append(out, it)
		}
	}
	return out
}

// addCompletion gives the commands of root their dynamic completion: get,
// why, unkeep, answer, and every --node and --module flag.
func addCompletion(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch c.Name() {
		case "get":
			c.ValidArgsFunction = completeGet
		case "why":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return completeKey(cmd, toComplete, mesh.ProvisionsBucket, mesh.PlansBucket)
			}
		case "unkeep":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return completeKey(cmd, toComplete, mesh.ProvisionsBucket)
			}
		case "answer":
			c.ValidArgsFunction = completeAsk
		}
		for flag, bucket := range map[string]string{"node": mesh.PlacementBucket, "module": mesh.ModulesBucket} {
			if c.Flags().Lookup(flag) == nil || c.Flags().Lookup("nats") == nil {
				continue
			}
			if _, has := c.GetFlagCompletionFunc(flag); !has {
				_ = c.RegisterFlagCompletionFunc(flag, completeNames(bucket)) // the flag exists: no error
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
