package kit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/internal/jsonhead"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// The vault's verbs (module mesh-vault). Each verb's subject names the
// module it asks for and ends in the asker's bus user name:
// "mesh-vault.secret.<module>.<asker>", where a module asking its own
// values is both (its user is its module name) and a node's client asking
// for a module placed on its node is "client-<node>". The bus permissions
// let each user publish only the subjects ending in its own name, so the
// subject's last token is the server's word for who asked; the vault
// answers a module all its values, and a node's client that node's only.
const (
	// SecretVerb answers a module its own credentials (those whose consumer
	// it is, and those its provisions depend on) and its own secrets (those
	// its plans name). Subject "mesh-vault.secret.<module>.<asker>".
	SecretVerb = mesh.VaultModule + ".secret"
	// ConsumersVerb answers a provider the credentials of its consumers:
	// those that provisions of which it is the provider depend on. Subject
	// "mesh-vault.consumers.<provider>.<asker>".
	ConsumersVerb = mesh.VaultModule + ".consumers"
	// RotateVerb gives a credential a new value at the next generation.
	// Subject "mesh-vault.rotate"; only operators may publish on it.
	RotateVerb = mesh.VaultModule + ".rotate"
)

// SecretSubject returns "mesh-vault.secret.<module>.<asker>": asker's
// request for module's values.
func SecretSubject(module, asker string) string { return SecretVerb + "." + module + "." + asker }

// ConsumersSubject returns "mesh-vault.consumers.<provider>.<asker>":
// asker's request for the credentials of provider's consumers.
func ConsumersSubject(provider, asker string) string {
	return ConsumersVerb + "." + provider + "." + asker
}

// VaultRequest is the request of [SecretVerb] and [ConsumersVerb]; both
// fields narrow the answer and may be empty. Key asks only the credentials
// the provision at that key depends on (or that key itself, for a
// credential key); Node asks only values of that node.
type VaultRequest struct {
	Key  string `json:"key,omitempty"`
	Node string `json:"node,omitempty"`
}

// Credential is a credential as the vault answers it: the credential's
// provision key, its vault name and generation, and its value.
type Credential struct {
	Key        string `json:"key"`
	VaultName  string `json:"vault-name"`
	Generation int64  `json:"generation"`
	Value      string `json:"value"`
}

// Secret is one of a module's own secrets (a name its manifest's secrets
// list) on a node, as the vault answers it.
type Secret struct {
	Node       string `json:"node"`
	Module     string `json:"module"`
	Name       string `json:"name"`
	VaultName  string `json:"vault-name"`
	Generation int64  `json:"generation"`
	Value      string `json:"value"`
}

// VaultAnswer is the answer of the vault's verbs: the values asked for, or
// an error text.
type VaultAnswer struct {
	Credentials []Credential `json:"credentials,omitempty"`
	Secrets     []Secret     `json:"secrets,omitempty"`
	Error       string       `json:"error,omitempty"`
}

// RotateRequest is the request of [RotateVerb]. Now puts the new value in
// force at once, with no grace: the old one is refused by its provider as
// soon as it sets the new one (for a credential that leaked).
type RotateRequest struct {
	Key string `json:"key"`
	Now bool   `json:"now,omitempty"`
}

// RotateAnswer is the answer of [RotateVerb]: the credential's new vault
// name and generation (never its value), or an error text.
type RotateAnswer struct {
	Key        string `json:"key,omitempty"`
	VaultName  string `json:"vault-name,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// InForce is the generation in force when the vault answered:
	// Generation, or the one before while the consumer's node renders the
	// new one (the vault's rotation grace).
	InForce int64  `json:"in-force,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ErrVault is wrapped by the errors of [AskSecrets], [AskConsumers] and
// [AskRotate] when the vault answers with an error text.
var ErrVault = errors.New("kit: the vault refused")

// ErrRefused is wrapped when the server refuses the request's subject: the
// user may not ask it (another module's values, a module not placed on the
// client's node, the wrong credentials). Asking again does not help.
var ErrRefused = errors.New("kit: the server refuses the request")

// ErrNoVault is wrapped when no vault answers the verb's subject (no
// vault runs, or the bus does not let the request through in time).
var ErrNoVault = errors.New("kit: no vault answers")

// AskSecrets asks the vault, as user, for user's own credentials and
// secrets (narrowed by req). It blocks until the answer or ctx is done
// (give ctx a deadline).
func AskSecrets(ctx context.Context, nc *nats.Conn, user string, req VaultRequest) (VaultAnswer, error) {
	var a VaultAnswer
	err := ask(ctx, nc, SecretSubject(user, user), req, &a, func() string { return a.Error })
	return a, err
}

// AskSecretsAs asks the vault, as the user asker, for module's credentials
// and secrets (narrowed by req): a node's client ("client-<node>") asks so
// for a module placed on its node, and is answered that node's values
// only. It blocks like [AskSecrets].
func AskSecretsAs(ctx context.Context, nc *nats.Conn, module, asker string, req VaultRequest) (VaultAnswer, error) {
	var a VaultAnswer
	err := ask(ctx, nc, SecretSubject(module, asker), req, &a, func() string { return a.Error })
	return a, err
}

// AskConsumers asks the vault, as the provider user, for the credentials of
// its consumers (narrowed by req). It blocks like [AskSecrets].
func AskConsumers(ctx context.Context, nc *nats.Conn, user string, req VaultRequest) (VaultAnswer, error) {
	var a VaultAnswer
	err := ask(ctx, nc, ConsumersSubject(user, user), req, &a, func() string { return a.Error })
	return a, err
}

// AskConsumersAs asks the vault, as the user asker, for the credentials
// of provider's consumers (narrowed by req): a node's client
// ("client-<node>") asks so for a provider placed on its node, and is
// answered that node's values only. It blocks like [AskSecrets].
func AskConsumersAs(ctx context.Context, nc *nats.Conn, provider, asker string, req VaultRequest) (VaultAnswer, error) {
	var a VaultAnswer
	err := ask(ctx, nc, ConsumersSubject(provider, asker), req, &a, func() string { return a.Error })
	return a, err
}

// AskRotate asks the vault to rotate the credential at key: the new value
// comes in force once the consumer's node has applied it, or after the
// vault's grace. It blocks like [AskSecrets].
func AskRotate(ctx context.Context, nc *nats.Conn, key string) (RotateAnswer, error) {
	return askRotate(ctx, nc, RotateRequest{Key: key})
}

// AskRotateNow is [AskRotate] with the new value in force at once (see
// [RotateRequest] Now).
func AskRotateNow(ctx context.Context, nc *nats.Conn, key string) (RotateAnswer, error) {
	return askRotate(ctx, nc, RotateRequest{Key: key, Now: true})
}

func askRotate(ctx context.Context, nc *nats.Conn, req RotateRequest) (RotateAnswer, error) {
	var a RotateAnswer
	err := ask(ctx, nc, RotateVerb, req, &a, func() string { return a.Error })
	return a, err
}

func ask(ctx context.Context, nc *nats.Conn, subject string, req, answer any, refused func() string) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("kit: %s: %w", subject, err)
	}
	msg, err := bus.Request(ctx, nc, subject, b)
	if errors.Is(err, nats.ErrPermissionViolation) {
		return fmt.Errorf("%w: %s: %w", ErrRefused, subject, err)
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("%w on %s: %w", ErrNoVault, subject, err)
	}
	if err != nil {
		return fmt.Errorf("kit: %s: %w", subject, err)
	}
	// The answer's names are exact (spec 2): one in another case is no
	// vault's answer.
	if err := jsonhead.Decode(msg.Data, answer); err != nil {
		return fmt.Errorf("kit: %s: the answer does not decode: %w", subject, err)
	}
	if why := refused(); why != "" {
		return fmt.Errorf("%w on %s: %s", ErrVault, subject, why)
	}
	return nil
}
