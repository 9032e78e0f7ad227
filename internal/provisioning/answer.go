package provisioning

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// Source is one bucket's keys and values, such as a [*bus.Copy]. Range
// calls f for each key until f returns false; f must not keep the value.
type Source interface {
	Range(f func(key string, it bus.Item) bool)
}

// Sources are the buckets the verb reads, by bucket name: the registry,
// plans, provisions, refused, applied and collect buckets of
// mesh-provisioner. A bucket that is missing reads as empty.
type Sources map[string]Source

// Buckets lists the buckets [Sources] should hold.
var Buckets = []string{mesh.RegistryBucket, mesh.PlansBucket, mesh.ProvisionsBucket, mesh.RefusedBucket,
	mesh.AppliedBucket, mesh.CollectBucket}

// ParseRequest decodes a request body. An empty body is the request {}
// (the registry). It returns an error for a body that is not one JSON
// object of the request's fields, or that names an unknown what; the
// error's text is meant for the error answer.
func ParseRequest(body []byte) (Request, error) {
	var req Request
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return Request{}, errors.New(whyBadJSON(err))
		}
		if dec.More() {
			return Request{}, errors.New(whyBadJSON(errors.New("text after the JSON object")))
		}
	}
	if req.What == "" {
		req.What = WhatRegistry
	}
	known := false
	for _, w := range Whats {
		known = known || w == req.What
	}
	if !known {
		return req, errors.New(whyUnknownWhat(req.What))
	}
	return req, nil
}

// Handle answers one request body with the JSON reply body: the answer of
// [Answer], or a reply whose error says why the request was not answered;
// that error is returned too, for the log.
func Handle(body []byte, src Sources) ([]byte, error) {
	var reply Reply
	req, err := ParseRequest(body)
	if err != nil {
		reply = Reply{What: req.What, Entries: []Entry{}, Odd: []Odd{}, Error: err.Error()}
	} else {
		reply = Answer(req, src)
	}
	out, merr := json.Marshal(reply)
	if merr != nil { // cannot happen: every value is valid JSON
		out = []byte(fmt.Sprintf(`{"what":%q,"entries":[],"odd":[],"error":%q}`, req.What, merr.Error()))
	}
	return out, err
}

// Answer answers a parsed request from the buckets in src. It reads only.
// Keys whose shape or value is odd are listed under Odd; an odd key whose
// shape could not be read is narrowed by its first token as the node only.
func Answer(req Request, src Sources) Reply {
	a := answerer{req: req, reply: Reply{What: req.What, Entries: []Entry{}, Odd: []Odd{}}}
	switch req.What {
	case WhatRegistry:
		a.registry(src[mesh.RegistryBucket])
	case WhatNeeds:
		a.needs(src[mesh.PlansBucket])
	case WhatApplied:
		a.nodeModule(src[mesh.AppliedBucket], "an applied record", func(k mesh.NodeModule, b []byte) string {
			var v mesh.Applied
			return decode(b, &v, "an applied record")
		})
	case WhatCollect:
		a.collect(src[mesh.CollectBucket])
	case WhatPlans:
		a.nodeModule(src[mesh.PlansBucket], "a plan", func(k mesh.NodeModule, b []byte) string {
			var p mesh.Plan
			if why := decode(b, &p, "a plan"); why != "" {
				return why
			}
			if p.Node != k.Node || p.Module != k.Module {
				return whyNotItsKey("plan", p.Node+"."+p.Module)
			}
			return ""
		})
	case WhatProvisions:
		a.provisions(src[mesh.ProvisionsBucket])
	case WhatRefused:
		a.refusals(src[mesh.RefusedBucket], func(k mesh.RefusalKey, b []byte) string {
			var r mesh.Refusal
			if why := decode(b, &r, "a refusal"); why != "" {
				return why
			}
			if r.Node != k.Node || r.Module != k.Module {
				return whyNotItsKey("refusal", r.Node+"."+r.Module)
			}
			return ""
		})
	case WhatStatus:
		a.reply = status(req, src)
	case WhatDigests:
		a.reply = digests(req, src)
	default:
		a.reply.Error = whyUnknownWhat(req.What)
	}
	sort.Slice(a.reply.Entries, func(i, j int) bool { return a.reply.Entries[i].Key < a.reply.Entries[j].Key })
	sort.Slice(a.reply.Odd, func(i, j int) bool { return a.reply.Odd[i].Key < a.reply.Odd[j].Key })
	return a.reply
}

type answerer struct {
	req   Request
	reply Reply
}

// match reports whether want is unset or equal to got.
func match(want, got string) bool { return want == "" || want == got }

// oddKey lists a key whose shape could not be read, narrowed by its first
// token as the node.
func (a *answerer) oddKey(key string, err error) {
	first, _, _ := strings.Cut(key, ".")
	if match(a.req.Node, first) {
		a.reply.Odd = append(a.reply.Odd, Odd{Key: key, Why: whyKey(err)})
	}
}

func (a *answerer) add(key string, value []byte, why string) {
	if why != "" {
		a.reply.Odd = append(a.reply.Odd, Odd{Key: key, Why: why})
		return
	}
	a.reply.Entries = append(a.reply.Entries, Entry{Key: key, Value: json.RawMessage(value)})
}

// decode decodes a JSON object into v, its names exact (spec 2,
// [jsonhead.Decode]), and returns the why when it does not or when a name
// is the spec's in another case, or "" when it decodes.
func decode(b []byte, v any, what string) string {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return whyValue(what, errors.New("not a JSON object"))
	}
	if err := jsonhead.Decode(t, v); err != nil {
		if name := (*jsonhead.NameError)(nil); errors.As(err, &name) {
			return whyNames(what, err)
		}
		return whyValue(what, err)
	}
	return ""
}

func each(src Source, f func(key string, value []byte)) {
	if src == nil {
		return
	}
	src.Range(func(k string, it bus.Item) bool { f(k, it.Value); return true })
}

func (a *answerer) registry(src Source) {
	each(src, func(key string, value []byte) {
		if !mesh.ValidName(key) {
			a.oddKey(key, &mesh.KeyError{Key: key, Why: fmt.Sprintf("kind %q is not a valid name", key)})
			return
		}
		var r mesh.RegistryAnswer
		why := decode(value, &r, "a registry answer")
		if why == "" {
			if err := r.Check(); err != nil {
				why = "the registry answer is not valid: " + err.Error()
			} else if r.Kind != key {
				why = whyNotItsKey("registry answer", "kind "+r.Kind)
			}
		}
		if match(a.req.Module, r.Module) || why != "" {
			a.add(key, value, why)
		}
	})
}

func (a *answerer) nodeModule(src Source, what string, check func(mesh.NodeModule, []byte) string) {
	each(src, func(key string, value []byte) {
		k, err := mesh.ParseNodeModule(key)
		if err != nil {
			a.oddKey(key, err)
			return
		}
		if match(a.req.Node, k.Node) && match(a.req.Module, k.Module) {
			a.add(key, value, check(k, value))
		}
	})
}

// refusals lists the refusals; their module token is escaped (a module
// held for a name that is not valid has one too).
func (a *answerer) refusals(src Source, check func(mesh.RefusalKey, []byte) string) {
	each(src, func(key string, value []byte) {
		k, err := mesh.ParseRefusalKey(key)
		if err != nil {
			a.oddKey(key, err)
			return
		}
		if match(a.req.Node, k.Node) && match(a.req.Module, k.Module) {
			a.add(key, value, check(k, value))
		}
	})
}

func (a *answerer) provisions(src Source) {
	each(src, func(key string, value []byte) {
		k, err := mesh.ParseProvisionKey(key)
		if err != nil {
			a.oddKey(key, err)
			return
		}
		if !match(a.req.Node, k.Node) || !match(a.req.Module, k.Consumer) {
			return
		}
		var p mesh.Provision
		a.add(key, value, decode(value, &p, "a provision"))
	})
}

func (a *answerer) collect(src Source) {
	each(src, func(key string, value []byte) {
		k, err := mesh.ParseCollectKey(key)
		if err != nil {
			a.oddKey(key, err)
			return
		}
		if !match(a.req.Node, k.Node) || !match(a.req.Module, k.Contributor) ||
			!match(a.req.Contributor, k.Contributor) || !match(a.req.Collection, k.Collection) {
			return
		}
		var it mesh.CollectItem
		why := decode(value, &it, "a collect item")
		if why == "" && it.Module != "" && it.Module != k.Contributor {
			why = whyNotItsKey("collect item", "module "+it.Module)
		}
		a.add(key, value, why)
	})
}

// needs derives the items each module needs from the plans: the key
// <node>.<module>.<kind>.<name> with kind dir, port, secret, config,
// provision (name <provision>[_<local>]) or contribution (name the escaped
// collection), and the plan's item as value.
func (a *answerer) needs(src Source) {
	each(src, func(key string, value []byte) {
		k, err := mesh.ParseNodeModule(key)
		if err != nil {
			a.oddKey(key, err)
			return
		}
		if !match(a.req.Node, k.Node) || !match(a.req.Module, k.Module) {
			return
		}
		var p mesh.Plan
		why := decode(value, &p, "a plan")
		if why == "" && (p.Node != k.Node || p.Module != k.Module) {
			why = whyNotItsKey("plan", p.Node+"."+p.Module)
		}
		if why != "" {
			a.add(key, nil, why)
			return
		}
		for _, n := range Needs(k, p) {
			a.reply.Entries = append(a.reply.Entries, n)
		}
	})
}

// Need kinds of the needs answer.
const (
	NeedDir          = "dir"
	NeedPort         = "port"
	NeedSecret       = "secret"
	NeedConfig       = "config"
	NeedProvision    = "provision"
	NeedContribution = "contribution"
)

// Needs derives what one plan at key k needs, as entries keyed
// <node>.<module>.<kind>.<name>: dir (value {"name","unknown"}, unknown
// "program" when unset), port ({"name"}), secret and config ({"name"}),
// provision (name <provision> or <provision>_<local>; value the plan's
// provision) and contribution (name the collection escaped as a token;
// value {"collection","item"}).
func Needs(k mesh.NodeModule, p mesh.Plan) []Entry {
	var out []Entry
	add := func(kind, name string, v any) {
		b, _ := json.Marshal(v) // plain structs always encode
		out = append(out, Entry{Key: k.String() + "." + kind + "." + name, Value: b})
	}
	type named struct {
		Name string `json:"name"`
	}
	for _, d := range p.Dirs {
		if d.Unknown == "" {
			d.Unknown = mesh.UnknownProgram
		}
		add(NeedDir, d.Name, struct {
			Name    string `json:"name"`
			Unknown string `json:"unknown"`
		}{d.Name, d.Unknown})
	}
	for _, port := range p.Ports {
		add(NeedPort, port.Name, named{port.Name})
	}
	for _, s := range p.Secrets {
		add(NeedSecret, s, named{s})
	}
	for _, c := range p.Config {
		add(NeedConfig, c, named{c})
	}
	for _, pp := range p.Provisions {
		name := pp.Provision
		if pp.Local != "" {
			name += "_" + pp.Local
		}
		add(NeedProvision, name, pp)
	}
	for _, c := range p.Contributes {
		add(NeedContribution, token.Escape(c.Collection), c)
	}
	return out
}
