package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ReloadTimeout bounds one run of a module's reload command: a command
// still running then is killed, and the run counts as failed.
const ReloadTimeout = time.Minute

// templates renders the plan's templates (see [mesh.Template]) into the
// module's directories, each file written only when its bytes change
// (mode 0600: it may hold a credential), and returns the generation of
// each credential the files hold, whether a file changed, and what could
// not be rendered (a template with a placeholder not resolved is not
// written: its file keeps what it held), and whether each of those only
// waits for another party's write (see [RenderError.Waits]). Rec is the
// module's applied record being written: its dirs and ports resolve the
// module's own placeholders.
func (c *Client) templates(ctx context.Context, module string, plan mesh.Plan, rec *mesh.Applied) (map[string]int64, bool, []string, bool) {
	creds := map[string]int64{}
	changed := false
	var problems []string
	onlyWaits := true
	for _, t := range plan.Templates {
		what := t.Dir + "/" + t.File
		if _, ok := rec.Dirs[t.Dir]; !ok || !mesh.ValidFile(t.File) {
			problems = append(problems, whyTemplateNoDir(what))
			onlyWaits = false
			continue
		}
		out, err := c.render(ctx, module, t.Text, creds, rec)
		if err != nil {
			problems = append(problems, whyTemplateNotRendered(what, err))
			var re *RenderError
			if !errors.As(err, &re) || !re.Waits() {
				onlyWaits = false
			}
			continue
		}
		rel := module + "/" + t.Dir + "/" + t.File
		if cur, err := c.readFile(rel); err == nil && bytes.Equal(cur, []byte(out)) {
			continue
		}
		if err := c.writeFile(module, t.Dir, t.File, []byte(out), 0o600); err != nil {
			problems = append(problems, err.Error())
			onlyWaits = false
			continue
		}
		changed = true
		c.log.Info("client: rendered", "module", module, "file", filepath.Join(c.root, rel))
	}
	if len(creds) == 0 {
		creds = nil
	}
	return creds, changed, problems, onlyWaits
}

// readFile reads the file rel (relative to the root) through the root.
func (c *Client) readFile(rel string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.rootFS()
	if err != nil {
		return nil, err
	}
	return r.ReadFile(c.inRoot(rel))
}

// behind says, of the credentials creds the module's files hold (key ->
// generation), the first one whose providers do not hold that generation
// yet, and what holds less: the credential's own provision (its reference
// names the generation in force) or a provision of the node that depends
// on it (its provider's entry names the generation it set, as the
// postgres provider's does); "" when they all hold it.
func (c *Client) behind(creds map[string]int64) string {
	keys := make([]string, 0, len(creds))
	for k := range creds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	provisions := map[string]mesh.Provision{}
	c.provisions.Range(func(k string, it bus.Item) bool {
		var p mesh.Provision
		if json.Unmarshal(it.Value, &p) == nil {
			provisions[k] = p
		}
		return true
	})
	dependents := make([]string, 0, len(provisions))
	for k := range provisions {
		dependents = append(dependents, k)
	}
	sort.Strings(dependents)
	for _, key := range keys {
		gen := creds[key]
		p, ok := provisions[key]
		if !ok || p.State != mesh.Provided || p.Reference == nil || p.Reference.Generation < gen {
			return whyNotInForce(key, gen, p, ok)
		}
		for _, k := range dependents {
			d := provisions[k]
			if !slices.Contains(d.DependsOn, key) {
				continue
			}
			if d.State != mesh.Provided || d.Reference != nil && d.Reference.ID == key && d.Reference.Generation < gen {
				return whyProviderBehind(key, gen, k, d)
			}
		}
	}
	return ""
}

// reload runs the module's reload command (the plan's reload: the command
// and its arguments, no shell) in the module's folder under the root, with
// MESH_NODE and MESH_MODULE set, for at most [ReloadTimeout]. It returns
// an error that says the command, how it ended and the end of what it
// printed.
func (c *Client) reload(ctx context.Context, module string, argv []string) error {
	ctx, cancel := context.WithTimeout(ctx, ReloadTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(c.root, module)
	cmd.Env = append(os.Environ(), "MESH_NODE="+c.cfg.Node, "MESH_MODULE="+module)
	out, err := cmd.CombinedOutput()
	if err != nil {
		text := strings.TrimSpace(string(out))
		if len(text) > 400 {
			text = "…" + text[len(text)-400:]
		}
		return fmt.Errorf("reload %q: %w (it printed: %q)", strings.Join(argv, " "), err, text)
	}
	c.log.Info("client: reloaded", "module", module, "command", strings.Join(argv, " "))
	return nil
}

// writeFile writes data to the file name in the module's directory dir
// with mode perm, and records it as written by the client (see
// [Client.Write]).
func (c *Client) writeFile(module, dir, name string, data []byte, perm fs.FileMode) error {
	if err := c.Write(module, dir, name, data); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.rootFS()
	if err != nil {
		return err
	}
	if err := r.Chmod(c.inRoot(module+"/"+dir+"/"+name), perm); err != nil {
		return fmt.Errorf("client: write %s/%s/%s: %w", module, dir, name, err)
	}
	return nil
}
