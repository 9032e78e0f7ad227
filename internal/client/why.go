package client

import (
	"fmt"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// Whys of placeholders that cannot be resolved.

// waitsError is a placeholder's why that is no fault: the value comes once
// another party writes it (a provider's entry, a value in a bucket, the
// client's own applied record). A plan applied in part only for such whys
// is said at INFO, not WARN.
type waitsError struct{ why string }

func (e waitsError) Error() string { return e.why }

// waits returns why as a [waitsError].
func waits(why string) error { return waitsError{why} }

const whyUnclosed = `"${" is not closed by "}"`

func whyBadKind(kind string) string {
	return fmt.Sprintf("kind %q is not a valid kind ([a-z0-9-]+)", kind)
}

func whyNoKind(kind string) string {
	return fmt.Sprintf("the registry (%s) has no kind %s", mesh.RegistryBucket, kind)
}

func whyNoApplied(key string) string {
	return fmt.Sprintf("%s holds no record %s yet: the client has not applied the module's plan", mesh.AppliedBucket, key)
}

func whyNotApplied(key, field, name string) string {
	return fmt.Sprintf("%s %s holds no %s named %q", mesh.AppliedBucket, key, field, name)
}

func whyEmptyCollection(node, coll string) string {
	return fmt.Sprintf("node %s has no item in collection %q", node, coll)
}

func whyNoProvision(module, name string) string {
	return fmt.Sprintf("the plan of %s has no provision %q (write ${bound:<provision>} or ${bound:<provision>:<local>})", module, name)
}

func whyNotProvided(bucket, key string, state mesh.State, why string) string {
	return fmt.Sprintf("the entry %s in %s is %s, not provided: %s", key, bucket, state, why)
}

func whyNoVaultName(bucket, key string) string {
	return fmt.Sprintf("the entry %s in %s is provided but names no vault-name", key, bucket)
}

func whyNoValue(bucket, key string) string {
	return fmt.Sprintf("%s holds no key %s", bucket, key)
}

func whyKeyShape(shape string) string {
	return fmt.Sprintf("the registry's key shape %q names a part this client does not know", shape)
}

func whyNoVerb(verb string) string {
	return fmt.Sprintf("no way to ask the verb %s is configured (the client has no bus connection for it)", verb)
}

func whyNoName(kind string) string {
	return fmt.Sprintf("a %s placeholder needs a name: ${%s:<name>}", kind, kind)
}

func whyNotInVault(subject, name string) string {
	return fmt.Sprintf("%s answered no secret or credential named %q", subject, name)
}

// Whys of templates and their reload, said in the applied record's
// problems.

func whyTemplateNoDir(file string) string {
	return fmt.Sprintf("template %s: its directory was not made, so it is not rendered", file)
}

func whyTemplateNotRendered(file string, err error) string {
	return fmt.Sprintf("template %s not rendered (the file keeps what it held): %v", file, err)
}

// whyNotInForce says that the credential key, rendered at generation gen,
// is not in force at it yet: its provision p (ok false: none) names less.
func whyNotInForce(key string, gen int64, p mesh.Provision, ok bool) string {
	switch {
	case !ok:
		return fmt.Sprintf("the reload waits: the files hold generation %d of %s, whose provision the client does not see", gen, key)
	case p.State != mesh.Provided:
		return fmt.Sprintf("the reload waits: the files hold generation %d of %s, which is %s (%s)", gen, key, p.State, p.Why)
	case p.Reference == nil:
		return fmt.Sprintf("the reload waits: the files hold generation %d of %s, whose provision names no generation", gen, key)
	}
	return fmt.Sprintf("the reload waits: the files hold generation %d of %s; generation %d is in force (the vault puts the new one in force once this node's applied record says it, or after its grace)", gen, key, p.Reference.Generation)
}

// whyProviderBehind says that the provision dep, which depends on the
// credential key rendered at gen, does not hold it yet.
func whyProviderBehind(key string, gen int64, dep string, d mesh.Provision) string {
	if d.State != mesh.Provided {
		return fmt.Sprintf("the reload waits: the files hold generation %d of %s; %s, which depends on it, is %s (%s)", gen, key, dep, d.State, d.Why)
	}
	return fmt.Sprintf("the reload waits: the files hold generation %d of %s; %s's provider %s on %s holds generation %d", gen, key, dep, d.Provider.Module, d.Provider.Node, d.Reference.Generation)
}

// whyNoReload says that a client that runs no reload commands did not run
// argv.
func whyNoReload(argv []string) string {
	return fmt.Sprintf("the reload %q was not run: this client runs no reload commands (client --reload)", strings.Join(argv, " "))
}
