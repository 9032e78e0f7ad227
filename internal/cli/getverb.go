package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/lookup"
	"github.com/mesh-provisioner/mesh-provisioner/internal/provisioning"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// The kinds of "get" that are read through the seat's verb
// mesh-provisioner.provisioning rather than from the buckets.
func init() {
	getKinds["registry"] = getKind{
		short:  "which module answers each kind of placeholder, and where (verb " + mesh.ProvisioningSubject + ")",
		read:   askVerb(provisioning.WhatRegistry),
		header: []string{"KIND", "MODULE", "WHERE", "ABOUT"},
		row:    registryRow,
	}
	getKinds["applied"] = getKind{
		short:  "what each node's client applied: folders, ports, swept files (verb " + mesh.ProvisioningSubject + ")",
		read:   askVerb(provisioning.WhatApplied),
		header: []string{"NODE", "MODULE", "FP", "DIRS", "PORTS", "SWEPT", "AT"},
		row:    appliedRow,
	}
	getKinds["collect"] = getKind{
		short:  "the items of each node's collections, by contributor (verb " + mesh.ProvisioningSubject + ")",
		read:   askVerb(provisioning.WhatCollect),
		header: []string{"NODE", "COLLECTION", "CONTRIBUTOR", "ITEM"},
		row:    collectRow,
	}
	getKinds["needs"] = getKind{
		short:  "what each module needs, derived from its plan (verb " + mesh.ProvisioningSubject + ")",
		read:   askVerb(provisioning.WhatNeeds),
		header: []string{"NODE", "MODULE", "KIND", "NAME", "VALUE"},
		row:    needRow,
	}
}

// askVerb returns a getKind's read that asks the verb for what, narrowed
// by the query, on a connection of its own.
func askVerb(what string) func(ctx context.Context, q *getQuery) (getAnswer, error) {
	return func(ctx context.Context, q *getQuery) (getAnswer, error) {
		var ans getAnswer
		nc, err := q.bus.connectAsk("get-" + what)
		if err != nil {
			return ans, err
		}
		defer nc.Close()
		body, _ := json.Marshal(provisioning.Request{What: what, Node: q.node, Module: q.module,
			Contributor: q.contributor, Collection: q.collection})
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		msg, err := nc.RequestWithContext(ctx, mesh.ProvisioningSubject, body)
		if errors.Is(err, nats.ErrNoResponders) && q.js != nil {
			// Nobody to wait for when no seat holds the lease: said at
			// once, as apply and status say it.
			if s, serr := lookup.ReadSeat(ctx, q.js); serr == nil && !s.Held {
				return ans, final{fmt.Errorf("no seat holds the lease, so none answers %s: start one (mesh-provisioner serve, or up)", mesh.ProvisioningSubject)}
			}
		}
		if err != nil {
			return ans, fmt.Errorf("asking %s (is the seat running?): %w", mesh.ProvisioningSubject, err)
		}
		var r provisioning.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return ans, fmt.Errorf("the answer of %s does not decode: %w", mesh.ProvisioningSubject, err)
		}
		if r.Error != "" {
			return ans, fmt.Errorf("%s says: %s", mesh.ProvisioningSubject, r.Error)
		}
		for _, e := range r.Entries {
			ans.Items = append(ans.Items, getItem{Key: e.Key, Value: e.Value})
		}
		for _, o := range r.Odd {
			ans.Odd = append(ans.Odd, getOdd{Key: o.Key, Why: o.Why})
		}
		return ans, nil
	}
}

func registryRow(it getItem) []string {
	var a mesh.RegistryAnswer
	_ = json.Unmarshal(it.Value, &a) // the verb decoded it before it became an entry
	where := "verb " + a.Verb
	if a.Verb == "" {
		where = a.Bucket + " " + a.Key
		if a.Field != "" {
			where += " ." + a.Field
		}
		if a.Collection != "" {
			where += " collection " + a.Collection
		}
	}
	return []string{a.Kind, a.Module, where, a.About}
}

func sortedPairs[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func appliedRow(it getItem) []string {
	var a mesh.Applied
	_ = json.Unmarshal(it.Value, &a) // the verb decoded it before it became an entry
	k, _ := mesh.ParseNodeModule(it.Key)
	return []string{k.Node, k.Module, a.Fingerprint, sortedPairs(a.Dirs), sortedPairs(a.Ports),
		fmt.Sprint(len(a.Swept)), a.At.UTC().Format(time.RFC3339)}
}

func collectRow(it getItem) []string {
	var c mesh.CollectItem
	_ = json.Unmarshal(it.Value, &c) // the verb decoded it before it became an entry
	k, _ := mesh.ParseCollectKey(it.Key)
	return []string{k.Node, k.Collection, k.Contributor, strings.ReplaceAll(c.Item, "\n", `\n`)}
}

func needRow(it getItem) []string {
	p := strings.SplitN(it.Key, ".", 4)
	for len(p) < 4 {
		p = append(p, "")
	}
	// A contribution's name is its collection, escaped as a token: shown
	// decoded (shell:zsh:normal).
	if name, err := token.Unescape(p[3]); err == nil {
		p[3] = name
	}
	return []string{p[0], p[1], p[2], p[3], string(it.Value)}
}
