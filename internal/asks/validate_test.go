package asks_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/asks"
	"github.com/mesh-provisioner/mesh-provisioner/internal/retire"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func TestValidate(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	long := mesh.CredentialKey("a-very-long-node-name", "a-very-long-consumer-name", "a-very-long-provider", "a-long-provision", "and-a-long-local")
	good := retire.Ask(mesh.ProvisionKey{Node: "ace", Consumer: "gitea", Provision: "database", Local: "main"}, mesh.Provision{}, now, 0)
	digest := mesh.ActDigest("k", "a", "yes")
	for _, c := range []struct {
		name   string
		change func(a *mesh.Ask)
		why    string // "" for valid
	}{
		{"a retiring key's ask", func(*mesh.Ask) {}, ""},
		{"a long credential key's ask", func(a *mesh.Ask) { *a = retire.Ask(long, mesh.Provision{}, now, 0) }, ""},
		{"an id of several tokens", func(a *mesh.Ask) { a.ID = "vault.rotate=3A1" }, ""},
		{"no id", func(a *mesh.Ask) { a.ID = "" }, "asks: bad ask: ask has no id"},
		{"an empty token", func(a *mesh.Ask) { a.ID = "retire..x" }, `asks: bad ask: ask id "retire..x" has an empty token`},
		{"a leading dot", func(a *mesh.Ask) { a.ID = ".x" }, `has an empty token`},
		{"a wildcard", func(a *mesh.Ask) { a.ID = "retire-*" }, `holds '*', which a record key cannot`},
		{"too long", func(a *mesh.Ask) { a.ID = strings.Repeat("x", 256) }, "is longer than 255 bytes"},
		{"no headline", func(a *mesh.Ask) { a.Headline = " " }, good.ID + ": no headline"},
		{"no expiry", func(a *mesh.Ask) { a.Expires = time.Time{} }, good.ID + ": no expiry"},
		{"no options", func(a *mesh.Ask) { a.Options = nil }, good.ID + ": no options"},
		{"an option without id", func(a *mesh.Ask) { a.Options[0].ID = "" },
			`option 1 has the id "", not a valid name`},
		{"an option offered twice", func(a *mesh.Ask) { a.Options[1].ID = "yes" }, `option "yes" is offered twice`},
		{"binds no digest", func(a *mesh.Ask) { a.Options[0].Binds = "sha256:" + digest },
			`option "yes" binds "sha256:` + digest + `", not the hex SHA-256 of its act`},
		{"binds upper-case hex", func(a *mesh.Ask) { a.Options[1].Binds = strings.ToUpper(digest) },
			`option "no" binds`},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := good
			a.Options = append([]mesh.AskOption(nil), good.Options...)
			c.change(&a)
			err := asks.Validate(a)
			if c.why == "" {
				if err != nil {
					t.Errorf("Validate(%s) = %v; want nil", a.ID, err)
				}
				return
			}
			if !errors.Is(err, asks.ErrBadAsk) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("Validate = %v; want %v saying %q", err, asks.ErrBadAsk, c.why)
			}
		})
	}
}
