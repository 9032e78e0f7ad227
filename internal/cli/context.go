package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
)

// natsContext is what mesh-provisioner reads of a context of the nats
// CLI: a JSON file $XDG_CONFIG_HOME/nats/context/NAME.json (else
// ~/.config/nats/context/NAME.json), as "nats context add" writes it.
// Only a URL and a credentials file are taken; a context that logs in
// another way is refused, naming the field, rather than connected without
// it.
type natsContext struct {
	URL   string `json:"url"`
	Creds string `json:"creds"`
	// The other ways of logging in, which mesh-provisioner does not take:
	// each mesh party has a credentials file.
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	NKey     string `json:"nkey"`
	UserJWT  string `json:"user_jwt"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	NSC      string `json:"nsc"`
}

// contextPath returns the file of the nats CLI's context name.
func contextPath(name string) (string, error) {
	if name == "" || strings.Contains(name, "..") || strings.ContainsRune(name, os.PathSeparator) {
		return "", fmt.Errorf("context %q: not a context's name", name)
	}
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("context %s: %w", name, err)
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "nats", "context", name+".json"), nil
}

// loadContext reads the nats CLI's context name.
func loadContext(name string) (natsContext, error) {
	var c natsContext
	path, err := contextPath(name)
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("context %s: no such context (%s; nats context add %s --server URL --creds FILE makes one)", name, path, name)
	}
	if err != nil {
		return c, fmt.Errorf("context %s: %w", name, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("context %s: %s does not decode: %w", name, path, err)
	}
	for _, f := range []struct{ name, v string }{{"user", c.User}, {"password", c.Password}, {"token", c.Token}, {"nkey", c.NKey},
		{"user_jwt", c.UserJWT}, {"cert", c.Cert}, {"key", c.Key}, {"ca", c.CA}, {"nsc", c.NSC}} {
		if f.v != "" {
			return c, fmt.Errorf("context %s sets %q: mesh-provisioner connects with a credentials file only (the context's creds, or --creds)", name, f.name)
		}
	}
	c.Creds = expandPath(c.Creds)
	return c, nil
}

// expandPath expands a leading ~ and environment variables in a path, as
// the nats CLI does for a context's files.
func expandPath(p string) string {
	if p == "" {
		return p
	}
	p = os.ExpandEnv(p)
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, p[1:])
		}
	}
	return p
}

// resolve sets the URL and credentials the command connects with from,
// in order: --nats and --creds; the nats CLI's context --context NAME (or
// $NATS_CONTEXT); $NATS_URL and $NATS_CREDS; then the defaults (the
// local up's URL, and its operator's credentials when --data is the
// default: see credsOrDefault). It says where each came from in f.from.
func (f *busFlags) resolve(fs *pflag.FlagSet) error {
	name := f.context
	if name == "" && !fs.Changed("context") {
		name = os.Getenv("NATS_CONTEXT")
	}
	var c natsContext
	if name != "" {
		var err error
		if c, err = loadContext(name); err != nil {
			return usageError{err}
		}
	}
	if !fs.Changed("nats") {
		switch {
		case c.URL != "":
			f.url, f.from = c.URL, "context "+name
		case os.Getenv("NATS_URL") != "":
			f.url, f.from = os.Getenv("NATS_URL"), "$NATS_URL"
		}
	}
	if !fs.Changed("creds") {
		switch {
		case c.Creds != "":
			f.creds = c.Creds
		case os.Getenv("NATS_CREDS") != "":
			f.creds = expandPath(os.Getenv("NATS_CREDS"))
		}
	}
	return nil
}
