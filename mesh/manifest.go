package mesh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Manifest is a module's manifest (spec 3), decoded from the JSON text kept
// in [ManifestsBucket].
type Manifest struct {
	Module      string         `json:"module"`
	Requires    []Requirement  `json:"requires,omitempty"`
	Provides    []Offer        `json:"provides,omitempty"`
	Dirs        []Dir          `json:"dirs,omitempty"`
	Ports       []Port         `json:"ports,omitempty"`
	Secrets     []string       `json:"secrets,omitempty"`
	Config      []string       `json:"config,omitempty"`
	Contributes []Contribution `json:"contributes,omitempty"`
	State       []StateName    `json:"state,omitempty"`
	Reads       []string       `json:"reads,omitempty"`
	// Templates are the configuration files the node's client renders
	// for the module; Reload is the command it runs after it rendered any
	// of them anew (see [Template]).
	Templates []Template `json:"templates,omitempty"`
	Reload    []string   `json:"reload,omitempty"`
}

// Template is an item of a manifest's templates: a configuration file the
// node's client renders into the module's directory Dir (one of the
// manifest's dirs), as the file named File (one path element), from Text
// with its placeholders (${kind:name}) resolved through the registry. The
// client renders it when it applies the plan and again whenever a value it
// holds changes (a credential rotated); after a render that changed a file
// it runs the manifest's reload: the command and its arguments (no shell),
// as consul-template's command or Nomad's change_mode "script", once the
// providers hold what it rendered. A rendered file has mode 0600.
type Template struct {
	Dir  string `json:"dir"`
	File string `json:"file"`
	Text string `json:"text"`
}

// Requirement is an item of a manifest's requires: a provision the module
// needs from another module. Local tells two of the same apart; On pins the
// provider's node. Both are optional.
type Requirement struct {
	Provision string `json:"provision"`
	From      string `json:"from"`
	Local     string `json:"local,omitempty"`
	On        string `json:"on,omitempty"`
}

// Offer is an item of a manifest's provides. Credential is "own", "shared"
// or "none" (empty means none). AnsweredBy "helper" means the offer is
// answered by the provider's entries.
type Offer struct {
	Name       string `json:"name"`
	Credential string `json:"credential,omitempty"`
	AnsweredBy string `json:"answered-by,omitempty"`
}

// Unknown says how a client treats a file it did not write in a directory.
const (
	UnknownProgram = "program" // belongs to the program; never touched (the default)
	UnknownSweep   = "sweep"   // moved to quarantine, never deleted
)

// Dir is a directory a module needs on its node.
type Dir struct {
	Name    string `json:"name"`
	Unknown string `json:"unknown,omitempty"`
}

// Port is a port a module needs on its node.
type Port struct {
	Name string `json:"name"`
}

// Contribution is an item a module adds to a collection of its node. The
// collection's name is free text.
type Contribution struct {
	Collection string `json:"collection"`
	Item       string `json:"item"`
}

// StateName is an item of a manifest's state: written as a name or as
// {"name":..}.
type StateName string

// UnmarshalJSON accepts "name" and {"name":"name"}.
func (s *StateName) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*s = StateName(name)
		return nil
	}
	var obj struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return errors.New(`a state is a name or {"name": ..}`)
	}
	*s = StateName(obj.Name)
	return nil
}

// KeepsEntries reports whether the module writes entries as a provider:
// its state names "bound".
func (m *Manifest) KeepsEntries() bool {
	for _, s := range m.State {
		if s == "bound" {
			return true
		}
	}
	return false
}

// Collections returns the names of the collections the manifest
// contributes to, each once, sorted.
func (m *Manifest) Collections() []string {
	var out []string
	for _, c := range m.Contributes {
		out = append(out, c.Collection)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ReadsPlans reports whether the manifest's reads include
// "mesh-provisioner.plans".
func (m *Manifest) ReadsPlans() bool {
	for _, r := range m.Reads {
		if r == "mesh-provisioner.plans" {
			return true
		}
	}
	return false
}

// Offer returns the manifest's offer named name, and whether there is one.
func (m *Manifest) Offer(name string) (Offer, bool) {
	for _, o := range m.Provides {
		if o.Name == name {
			return o, true
		}
	}
	return Offer{}, false
}

// Offered names the manifest's offers for a why or a message, in the
// order it lists them: "database, admin", or "nothing" when it offers none.
func (m *Manifest) Offered() string {
	if len(m.Provides) == 0 {
		return "nothing"
	}
	names := make([]string, len(m.Provides))
	for i, o := range m.Provides {
		names[i] = o.Name
	}
	return strings.Join(names, ", ")
}

// ByEntries reports whether the offer is answered by the provider's entries
// (rather than by its have), as spec section 5 ("Which outcome") says: a
// module whose state does not name "bound" keeps no entries, so none of its
// offers is, whatever they say; of a module that keeps entries, when any
// offer says answered-by helper only those offers are, otherwise every
// offer is.
func (m *Manifest) ByEntries(o Offer) bool {
	if !m.KeepsEntries() {
		return false
	}
	for _, x := range m.Provides {
		if x.AnsweredBy == "helper" {
			return o.AnsweredBy == "helper"
		}
	}
	return true
}

// ParseManifest decodes and validates a manifest JSON text. Unknown fields
// and fields of the wrong type are errors, as is any check of
// [Manifest.Validate].
func ParseManifest(text []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if dec.More() {
		return nil, errors.New("manifest: text after the JSON object")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks that every name in the manifest is a valid token and that
// enumerated fields hold known values. It returns the first problem found,
// naming the field.
func (m *Manifest) Validate() error {
	if err := NameError("manifest: module", m.Module); err != nil {
		return err
	}
	for i, r := range m.Requires {
		if err := NameError(fmt.Sprintf("manifest: requires[%d].provision", i), r.Provision); err != nil {
			return err
		}
		if err := NameError(fmt.Sprintf("manifest: requires[%d].from", i), r.From); err != nil {
			return err
		}
		if r.Local != "" {
			if err := NameError(fmt.Sprintf("manifest: requires[%d].local", i), r.Local); err != nil {
				return err
			}
		}
		if r.On != "" {
			if err := NameError(fmt.Sprintf("manifest: requires[%d].on", i), r.On); err != nil {
				return err
			}
		}
	}
	for i, o := range m.Provides {
		if err := NameError(fmt.Sprintf("manifest: provides[%d].name", i), o.Name); err != nil {
			return err
		}
		switch o.Credential {
		case "", CredentialOwn, CredentialShared, CredentialNone:
		default:
			return fmt.Errorf("manifest: provides[%d].credential %q is not own, shared or none", i, o.Credential)
		}
		switch o.AnsweredBy {
		case "", "helper":
		default:
			return fmt.Errorf("manifest: provides[%d].answered-by %q is not helper", i, o.AnsweredBy)
		}
	}
	for i, d := range m.Dirs {
		if err := NameError(fmt.Sprintf("manifest: dirs[%d].name", i), d.Name); err != nil {
			return err
		}
		switch d.Unknown {
		case "", UnknownProgram, UnknownSweep:
		default:
			return fmt.Errorf("manifest: dirs[%d].unknown %q is not program or sweep", i, d.Unknown)
		}
	}
	for i, p := range m.Ports {
		if err := NameError(fmt.Sprintf("manifest: ports[%d].name", i), p.Name); err != nil {
			return err
		}
	}
	for i, s := range m.Secrets {
		if err := NameError(fmt.Sprintf("manifest: secrets[%d]", i), s); err != nil {
			return err
		}
	}
	for i, c := range m.Contributes {
		if c.Collection == "" {
			return fmt.Errorf("manifest: contributes[%d].collection is empty", i)
		}
	}
	files := map[string]bool{}
	for i, t := range m.Templates {
		if !slices.ContainsFunc(m.Dirs, func(d Dir) bool { return d.Name == t.Dir }) {
			return fmt.Errorf("manifest: templates[%d].dir %q is none of the manifest's dirs", i, t.Dir)
		}
		if !ValidFile(t.File) {
			return fmt.Errorf("manifest: templates[%d].file %q is not a file name (one path element, not . or ..)", i, t.File)
		}
		if files[t.Dir+"/"+t.File] {
			return fmt.Errorf("manifest: templates[%d]: %s/%s is rendered twice", i, t.Dir, t.File)
		}
		files[t.Dir+"/"+t.File] = true
	}
	if len(m.Reload) > 0 && m.Reload[0] == "" {
		return errors.New("manifest: reload[0], the command, is empty")
	}
	return nil
}

// ValidFile reports whether name is a file name a template may be rendered
// to: not empty, no "/" nor NUL, and not "." or "..".
func ValidFile(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}
