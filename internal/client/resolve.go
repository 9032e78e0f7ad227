package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/access"
	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// vaultRequest is the request of the vault's verbs (kit.VaultRequest):
// Node narrows the answer to the values of that node.
type vaultRequest struct {
	Node string `json:"node,omitempty"`
}

// vaultAnswer is the part of the vault's answer (kit.VaultAnswer) that
// rendering reads.
type vaultAnswer struct {
	Credentials []struct {
		Key        string `json:"key"`
		Generation int64  `json:"generation"`
		Value      string `json:"value"`
	} `json:"credentials"`
	Secrets []struct {
		Node   string `json:"node"`
		Module string `json:"module"`
		Name   string `json:"name"`
		Value  string `json:"value"`
	} `json:"secrets"`
	Error string `json:"error"`
}

// AskVault returns a [VerbFunc] that asks the vault's verbs the way the
// vault answers them (package kit): the subject
// "<verb>.<module>.client-<node>" (the module asked for, then the asker,
// the node's client: the server lets that user publish only subjects
// ending in its own name, and the vault answers it only its node's values)
// with {"node":<node>}, waiting up to timeout (zero means 5 s). Of the
// answer it takes the module's secret on the node whose name is name, or
// else the credential whose key is name or whose key's last token is name
// (for example "postgres_database_main").
func AskVault(nc *nats.Conn, timeout time.Duration) VerbFunc {
	return func(ctx context.Context, verb, node, module, name string) (string, error) {
		v, _, err := askVault(ctx, nc, timeout, verb, node, module, name)
		return v, err
	}
}

// held is a credential a rendered value came from: its key and the
// generation answered (zero for a secret).
type held struct {
	key        string
	generation int64
}

// askVault is [AskVault]'s ask, returning also the credential the value
// is (its key and generation), none for a secret.
func askVault(ctx context.Context, nc *nats.Conn, timeout time.Duration, verb, node, module, name string) (string, held, error) {
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	subject := verb + "." + module + "." + access.ClientUser(node)
	body, _ := json.Marshal(vaultRequest{Node: node})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := bus.Request(ctx, nc, subject, body) // a subject the server refuses is said at once
	if err != nil {
		return "", held{}, fmt.Errorf("asking %s: %w", subject, err)
	}
	var a vaultAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return "", held{}, fmt.Errorf("the answer of %s does not decode: %w", subject, err)
	}
	if a.Error != "" {
		return "", held{}, fmt.Errorf("%s says: %s", subject, a.Error)
	}
	for _, s := range a.Secrets {
		if s.Node == node && s.Module == module && s.Name == name {
			return s.Value, held{}, nil
		}
	}
	for _, c := range a.Credentials {
		if c.Key == name || strings.HasSuffix(c.Key, "."+name) {
			return c.Value, held{c.Key, c.Generation}, nil
		}
	}
	return "", held{}, errors.New(whyNotInVault(subject, name))
}

// Render renders the configuration template of module on the client's
// node (see the package function [Render] for the syntax), resolving each
// placeholder through the registry: the registry's answer for the kind
// says where the value is found, and the client reads it there. Dirs and
// ports come from the module's applied record, collections from the
// node's collect keys, a bound provision from its provider's entry (its
// vault-name), a bucket such as mesh-config_resolved by the registry's
// key shape (value {"value":".."} or a JSON string), and a verb from
// [Config.Verbs] or [AskVault]. It returns a [*RenderError] listing every
// placeholder it cannot resolve. Call it after [Client.Ready].
func (c *Client) Render(ctx context.Context, module, template string) (string, error) {
	return c.render(ctx, module, template, nil, nil)
}

// render is [Client.Render]; each credential a value came from is added
// to creds (its key and generation) unless creds is nil. Own, when not
// nil, is the module's applied record being written: its dirs and ports
// resolve from it rather than from the record on the bus (the plan's own
// ${port:..} and ${dir:..} resolve on its first apply).
func (c *Client) render(ctx context.Context, module, template string, creds map[string]int64, own *mesh.Applied) (string, error) {
	return Render(template, func(kind, name string) (string, error) {
		return c.resolve(ctx, module, kind, name, creds, own)
	})
}

func (c *Client) resolve(ctx context.Context, module, kind, name string, creds map[string]int64, own *mesh.Applied) (string, error) {
	it, ok := c.registry.Get(kind)
	if !ok {
		return "", errors.New(whyNoKind(kind))
	}
	var a mesh.RegistryAnswer
	if err := json.Unmarshal(it.Value, &a); err != nil {
		return "", fmt.Errorf("the registry's answer for %s does not decode: %w", kind, err)
	}
	switch {
	case a.Verb != "":
		return c.ask(ctx, a.Verb, module, name, creds)
	case a.Bucket == mesh.AppliedBucket:
		return c.fromApplied(module, a.Field, name, own)
	case a.Bucket == mesh.CollectBucket:
		return c.fromCollect(collection(a.Collection, kind, name))
	case a.Bucket == mesh.BoundBucket("<provider>"):
		return c.fromBound(ctx, module, name)
	}
	return c.fromBucket(ctx, a, module, name)
}

func (c *Client) ask(ctx context.Context, verb, module, name string, creds map[string]int64) (string, error) {
	if f, ok := c.cfg.Verbs[verb]; ok {
		return f(ctx, verb, c.cfg.Node, module, name)
	}
	if c.cfg.NC == nil {
		return "", errors.New(whyNoVerb(verb))
	}
	nc := c.cfg.Ask
	if nc == nil {
		nc = c.cfg.NC
	}
	v, h, err := askVault(ctx, nc, 0, verb, c.cfg.Node, module, name)
	if err == nil && h.key != "" && creds != nil {
		creds[h.key] = h.generation
	}
	return v, err
}

func (c *Client) fromApplied(module, field, name string, own *mesh.Applied) (string, error) {
	key := mesh.NodeModule{Node: c.cfg.Node, Module: module}.String()
	var rec mesh.Applied
	if own != nil {
		rec = *own
	} else {
		var ok bool
		if rec, ok = c.record(key); !ok {
			return "", waits(whyNoApplied(key))
		}
	}
	switch field {
	case "dirs":
		if p, ok := rec.Dirs[name]; ok {
			return p, nil
		}
	case "ports":
		if n, ok := rec.Ports[name]; ok {
			return fmt.Sprint(n), nil
		}
	}
	return "", errors.New(whyNotApplied(key, field, name))
}

// collection returns the collection a collected kind reads, from the
// registry's pattern: "<name>" is replaced by name; "[:<name>]" is
// ":"+name, or nothing when name is empty.
func collection(pattern, kind, name string) string {
	if pattern == "" {
		pattern = "<name>"
	}
	if name == "" {
		pattern = strings.ReplaceAll(pattern, "[:<name>]", "")
	} else {
		pattern = strings.ReplaceAll(pattern, "[:<name>]", ":<name>")
	}
	return strings.ReplaceAll(pattern, "<name>", name)
}

// fromCollect joins the items of the node's collection coll, one a line,
// in the order of their contributors.
func (c *Client) fromCollect(coll string) (string, error) {
	type item struct{ contributor, item string }
	var items []item
	c.collect.Range(func(key string, it bus.Item) bool {
		k, err := mesh.ParseCollectKey(key)
		if err != nil || k.Node != c.cfg.Node || k.Collection != coll {
			return true
		}
		var ci mesh.CollectItem
		if json.Unmarshal(it.Value, &ci) == nil {
			items = append(items, item{k.Contributor, ci.Item})
		}
		return true
	})
	if len(items) == 0 {
		return "", errors.New(whyEmptyCollection(c.cfg.Node, coll))
	}
	sort.Slice(items, func(i, j int) bool { return items[i].contributor < items[j].contributor })
	lines := make([]string, len(items))
	for i, it := range items {
		lines[i] = it.item
	}
	return strings.Join(lines, "\n"), nil
}

// fromBound reads the provider's entry for the module's provision name
// ("<provision>" or "<provision>:<local>") and returns its vault-name once
// it is provided; with "/<field>" after the name ("database:main/host"),
// that field of the entry's connection (host, port, database, role for a
// database) instead.
func (c *Client) fromBound(ctx context.Context, module, name string) (string, error) {
	if name == "" {
		return "", errors.New(whyNoName(mesh.KindBound))
	}
	name, field, hasField := strings.Cut(name, "/")
	prov, local, hasLocal := strings.Cut(name, ":")
	it, ok := c.plans.Get(mesh.NodeModule{Node: c.cfg.Node, Module: module}.String())
	var plan mesh.Plan
	if !ok || json.Unmarshal(it.Value, &plan) != nil {
		return "", errors.New(whyNoProvision(module, name))
	}
	var found *mesh.PlanProvision
	for i, pp := range plan.Provisions {
		if pp.Provision == prov && (!hasLocal || pp.Local == local) {
			if found != nil {
				return "", fmt.Errorf("the plan of %s has more than one provision %q: name its local", module, prov)
			}
			found = &plan.Provisions[i]
		}
	}
	if found == nil {
		return "", errors.New(whyNoProvision(module, name))
	}
	bucket := mesh.BoundBucket(found.ProviderModule)
	key := mesh.ProvisionKey{Node: c.cfg.Node, Consumer: module, Provision: found.Provision, Local: found.Local}.String()
	b, err := c.get(ctx, bucket, key)
	if err != nil {
		return "", err
	}
	var e mesh.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return "", fmt.Errorf("the entry %s in %s does not decode: %w", key, bucket, err)
	}
	state, why := e.Outcome()
	if state != mesh.Provided {
		if state == mesh.Failed {
			return "", errors.New(whyNotProvided(bucket, key, state, why))
		}
		return "", waits(whyNotProvided(bucket, key, state, why))
	}
	if hasField {
		v, ok := e.Connection[field]
		if !ok {
			return "", fmt.Errorf("the entry %s in %s says no %q of its connection (it says: %s)", key, bucket, field, connectionFields(e.Connection))
		}
		return v, nil
	}
	if e.VaultName == "" {
		return "", errors.New(whyNoVaultName(bucket, key))
	}
	return e.VaultName, nil
}

// fromBucket reads a value from the registry's bucket at its key shape,
// with <node>, <module> and <name> filled in.
func (c *Client) fromBucket(ctx context.Context, a mesh.RegistryAnswer, module, name string) (string, error) {
	if name == "" {
		return "", errors.New(whyNoName(a.Kind))
	}
	key := strings.NewReplacer("<node>", c.cfg.Node, "<module>", module, "<name>", name).Replace(a.Key)
	if a.Key == "" || strings.ContainsAny(key, "<>[]") {
		return "", errors.New(whyKeyShape(a.Key))
	}
	b, err := c.get(ctx, a.Bucket, key)
	if err != nil {
		return "", err
	}
	t := bytes.TrimSpace(b)
	var s string
	if json.Unmarshal(t, &s) == nil {
		return s, nil
	}
	var v struct {
		Value *string `json:"value"`
	}
	if err := json.Unmarshal(t, &v); err != nil || v.Value == nil {
		return "", fmt.Errorf("%s %s is neither a JSON string nor {\"value\":..}", a.Bucket, key)
	}
	return *v.Value, nil
}

// get reads one key of a bucket the client does not follow (a provider's
// entries, resolved configuration): rendering is on request, so it reads
// the key once rather than following the bucket.
func (c *Client) get(ctx context.Context, bucket, key string) ([]byte, error) {
	kv, err := c.cfg.JS.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, waits(whyNoValue(bucket, key))
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, waits(whyNoValue(bucket, key))
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", bucket, key, err)
	}
	return e.Value(), nil
}

// connectionFields lists the fields an entry's connection names, sorted,
// or "nothing".
func connectionFields(c map[string]string) string {
	if len(c) == 0 {
		return "nothing"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}
