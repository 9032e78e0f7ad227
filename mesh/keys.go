package mesh

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

// ErrKeyShape is wrapped by every error that a Parse function of this
// package returns for a key that is not of its bucket's shape.
var ErrKeyShape = errors.New("mesh: key out of shape")

// KeyError says which key was out of shape and why. It wraps [ErrKeyShape].
type KeyError struct {
	Key string // the key as read
	Why string // what is wrong with it
}

func (e *KeyError) Error() string { return fmt.Sprintf("mesh: key %q: %s", e.Key, e.Why) }

// Unwrap returns [ErrKeyShape].
func (e *KeyError) Unwrap() error { return ErrKeyShape }

// ValidName reports whether s is a valid node, module, provision or local
// name: lower-case [a-z0-9][a-z0-9-]*.
func ValidName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return false
		}
	}
	return true
}

// NameError returns nil when s is a valid name, or an error that says which
// thing (what) has the bad name.
func NameError(what, s string) error {
	if ValidName(s) {
		return nil
	}
	return fmt.Errorf("%s %q is not a valid name (lower-case [a-z0-9][a-z0-9-]*)", what, s)
}

// split cuts key at its dots into at most max (at most 4) tokens, held in
// t: no allocation, where strings.Split made a slice per key parsed (the
// seat and the kit parse a key per change). It returns a [*KeyError] when
// key has fewer than min tokens or more than max.
func split(t *[4]string, key string, min, max int) ([]string, error) {
	n := strings.Count(key, ".") + 1
	if n < min || n > max {
		if min == max {
			return nil, &KeyError{Key: key, Why: fmt.Sprintf("has %d tokens; want %d", n, min)}
		}
		return nil, &KeyError{Key: key, Why: fmt.Sprintf("has %d tokens; want %d to %d", n, min, max)}
	}
	rest := key
	for i := range n - 1 {
		t[i], rest, _ = strings.Cut(rest, ".")
	}
	t[n-1] = rest
	return t[:n], nil
}

func names(key string, parts []string, what ...string) error {
	for i, p := range parts {
		if i < len(what) && !ValidName(p) {
			return &KeyError{Key: key, Why: fmt.Sprintf("%s %q is not a valid name", what[i], p)}
		}
	}
	return nil
}

// NodeModule is the key <node>.<module> of the plans, refused, applied and
// have buckets.
type NodeModule struct {
	Node, Module string
}

// String returns "<node>.<module>".
func (k NodeModule) String() string { return k.Node + "." + k.Module }

// AppendTo appends the key "<node>.<module>" to b and returns the extended
// buffer: the bytes of [NodeModule.String], without a string of its own.
func (k NodeModule) AppendTo(b []byte) []byte {
	b = append(b, k.Node...)
	b = append(b, '.')
	return append(b, k.Module...)
}

// ParseNodeModule parses "<node>.<module>". It returns a [*KeyError] when
// key has not two tokens or either is not a valid name.
func ParseNodeModule(key string) (NodeModule, error) {
	var t [4]string
	p, err := split(&t, key, 2, 2)
	if err != nil {
		return NodeModule{}, err
	}
	if err := names(key, p, "node", "module"); err != nil {
		return NodeModule{}, err
	}
	return NodeModule{Node: p[0], Module: p[1]}, nil
}

// WantKey is the key want.<node>.<module> of [WantsBucket].
type WantKey struct {
	Node, Module string
}

// String returns "want.<node>.<module>".
func (k WantKey) String() string { return "want." + k.Node + "." + k.Module }

// ParseWantKey parses "want.<node>.<module>", returning a [*KeyError] when
// key is of another shape.
func ParseWantKey(key string) (WantKey, error) {
	var t [4]string
	p, err := split(&t, key, 3, 3)
	if err != nil {
		return WantKey{}, err
	}
	if p[0] != "want" {
		return WantKey{}, &KeyError{Key: key, Why: `first token is not "want"`}
	}
	if err := names(key, p[1:], "node", "module"); err != nil {
		return WantKey{}, err
	}
	return WantKey{Node: p[1], Module: p[2]}, nil
}

// BuildKey is the key <module>.<fp> of [BuildsBucket].
type BuildKey struct {
	Module, Fingerprint string
}

// String returns "<module>.<fp>".
func (k BuildKey) String() string { return k.Module + "." + k.Fingerprint }

// ParseBuildKey parses "<module>.<fp>". The fingerprint must be a valid
// name too; it returns a [*KeyError] otherwise.
func ParseBuildKey(key string) (BuildKey, error) {
	var t [4]string
	p, err := split(&t, key, 2, 2)
	if err != nil {
		return BuildKey{}, err
	}
	if err := names(key, p, "module", "fingerprint"); err != nil {
		return BuildKey{}, err
	}
	return BuildKey{Module: p[0], Fingerprint: p[1]}, nil
}

// HaveKey is a key of [HaveBucket]: <node>.<module>, or <node> alone for the
// node itself (Module is then empty).
type HaveKey struct {
	Node, Module string
}

// String returns "<node>.<module>", or "<node>" when Module is empty.
func (k HaveKey) String() string {
	if k.Module == "" {
		return k.Node
	}
	return k.Node + "." + k.Module
}

// ParseHaveKey parses "<node>" or "<node>.<module>", returning a
// [*KeyError] for any other shape.
func ParseHaveKey(key string) (HaveKey, error) {
	var t [4]string
	p, err := split(&t, key, 1, 2)
	if err != nil {
		return HaveKey{}, err
	}
	if err := names(key, p, "node", "module"); err != nil {
		return HaveKey{}, err
	}
	k := HaveKey{Node: p[0]}
	if len(p) == 2 {
		k.Module = p[1]
	}
	return k, nil
}

// ProvisionKey is the key <node>.<consumer>.<provision>[.<local>] of
// [ProvisionsBucket] and of every provider's bound bucket. Node is the
// consumer's node.
type ProvisionKey struct {
	Node, Consumer, Provision, Local string
}

// String returns "<node>.<consumer>.<provision>" with ".<local>" when Local
// is set.
func (k ProvisionKey) String() string {
	s := k.Node + "." + k.Consumer + "." + k.Provision
	if k.Local != "" {
		s += "." + k.Local
	}
	return s
}

// AppendTo appends the key to b and returns the extended buffer: the bytes
// of [ProvisionKey.String], without a string of its own.
func (k ProvisionKey) AppendTo(b []byte) []byte {
	b = append(b, k.Node...)
	b = append(b, '.')
	b = append(b, k.Consumer...)
	b = append(b, '.')
	b = append(b, k.Provision...)
	if k.Local != "" {
		b = append(b, '.')
		b = append(b, k.Local...)
	}
	return b
}

// ParseProvisionKey parses a provision key, returning a [*KeyError] when it
// has not three or four tokens. Node, consumer and local must be valid
// names; the provision token may also hold "_" (a credential's provision is
// "credential" and its local "<provider>_<provision>[_<local>]").
func ParseProvisionKey(key string) (ProvisionKey, error) {
	var t [4]string
	p, err := split(&t, key, 3, 4)
	if err != nil {
		return ProvisionKey{}, err
	}
	if err := names(key, p[:3], "node", "consumer", "provision"); err != nil {
		return ProvisionKey{}, err
	}
	k := ProvisionKey{Node: p[0], Consumer: p[1], Provision: p[2]}
	if len(p) == 4 {
		if !validLocal(p[3]) {
			return ProvisionKey{}, &KeyError{Key: key, Why: fmt.Sprintf("local %q is not a valid name", p[3])}
		}
		k.Local = p[3]
	}
	return k, nil
}

// validLocal admits names joined by "_", the shape of a credential's local.
func validLocal(s string) bool {
	for {
		part, rest, more := strings.Cut(s, "_")
		if !ValidName(part) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// CredentialKey returns the key of the vault credential that consumer on
// node holds for provision of provider: <node>.<consumer>.credential.
// <provider>_<provision>[_<local>]. For a shared credential, node and
// consumer are the provider's own and local is empty.
func CredentialKey(node, consumer, provider, provision, local string) ProvisionKey {
	l := provider + "_" + provision
	if local != "" {
		l += "_" + local
	}
	return ProvisionKey{Node: node, Consumer: consumer, Provision: CredentialProvision, Local: l}
}

// AppendCredentialKey appends the key that [CredentialKey] returns to b and
// returns the extended buffer and the length of the key's local, which ends
// it: the key's local is the last n bytes.
func AppendCredentialKey(b []byte, node, consumer, provider, provision, local string) ([]byte, int) {
	b = ProvisionKey{Node: node, Consumer: consumer, Provision: CredentialProvision}.AppendTo(b)
	b = append(b, '.')
	start := len(b)
	b = append(b, provider...)
	b = append(b, '_')
	b = append(b, provision...)
	if local != "" {
		b = append(b, '_')
		b = append(b, local...)
	}
	return b, len(b) - start
}

// CollectKey is the key <node>.<collection>.<contributor> of
// [CollectBucket]; Collection and Contributor are free text, escaped with
// package token in the key.
type CollectKey struct {
	Node, Collection, Contributor string
}

// String returns the escaped key.
func (k CollectKey) String() string {
	return k.Node + "." + token.Escape(k.Collection) + "." + token.Escape(k.Contributor)
}

// ParseCollectKey parses and unescapes a collect key. It returns a
// [*KeyError] when the key has not three tokens, the node is not a valid
// name, or a token does not decode.
func ParseCollectKey(key string) (CollectKey, error) {
	var t [4]string
	p, err := split(&t, key, 3, 3)
	if err != nil {
		return CollectKey{}, err
	}
	if err := names(key, p[:1], "node"); err != nil {
		return CollectKey{}, err
	}
	coll, err := token.Unescape(p[1])
	if err != nil || coll == "" {
		return CollectKey{}, &KeyError{Key: key, Why: fmt.Sprintf("collection token %q does not decode", p[1])}
	}
	contrib, err := token.Unescape(p[2])
	if err != nil || contrib == "" {
		return CollectKey{}, &KeyError{Key: key, Why: fmt.Sprintf("contributor token %q does not decode", p[2])}
	}
	return CollectKey{Node: p[0], Collection: coll, Contributor: contrib}, nil
}

// RefusalKey is the key <node>.<module> of [RefusedBucket]. The module is
// escaped as a token (package token), so that a module held for a name that
// is not valid still has a refusal; a valid module name escapes to itself.
type RefusalKey struct {
	Node, Module string
}

// String returns "<node>.<escaped module>".
func (k RefusalKey) String() string { return k.Node + "." + token.Escape(k.Module) }

// ParseRefusalKey parses a refusal key. It returns a [*KeyError] when the
// key has not two tokens, the node is not a valid name, or the module token
// does not decode.
func ParseRefusalKey(key string) (RefusalKey, error) {
	var t [4]string
	p, err := split(&t, key, 2, 2)
	if err != nil {
		return RefusalKey{}, err
	}
	if err := names(key, p[:1], "node"); err != nil {
		return RefusalKey{}, err
	}
	m, err := token.Unescape(p[1])
	if err != nil || m == "" {
		return RefusalKey{}, &KeyError{Key: key, Why: fmt.Sprintf("module token %q does not decode", p[1])}
	}
	return RefusalKey{Node: p[0], Module: m}, nil
}
