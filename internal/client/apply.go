package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

func nameCheck(module, dir string) error {
	if err := mesh.NameError("module", module); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := mesh.NameError("directory", dir); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// apply applies the plan of module, or removes what the client wrote for
// it when its plan is gone.
func (c *Client) apply(ctx context.Context, module string) error {
	key := mesh.NodeModule{Node: c.cfg.Node, Module: module}.String()
	it, ok := c.plans.Get(key)
	if !ok {
		return c.remove(ctx, module)
	}
	var plan mesh.Plan
	if err := json.Unmarshal(it.Value, &plan); err != nil {
		return fmt.Errorf("plan %s does not decode; left as it was applied: %w", key, err)
	}
	if plan.Node != c.cfg.Node || plan.Module != module {
		return fmt.Errorf("plan %s names %s.%s; left as it was applied", key, plan.Node, plan.Module)
	}
	old, _ := c.record(key)

	rec := mesh.Applied{Fingerprint: plan.Fingerprint, Dirs: map[string]string{}, Ports: map[string]int{}, Swept: []string{}}
	var problems []string
	faults := false // a problem that is not only a wait for another party's write
	for _, d := range plan.Dirs {
		path, swept, err := c.dir(module, d)
		if err != nil {
			problems = append(problems, err.Error())
			faults = true
			continue
		}
		rec.Dirs[d.Name] = path
		rec.Swept = append(rec.Swept, swept...)
	}
	for _, s := range old.Swept { // still in quarantine: still said
		if _, err := os.Lstat(s); err == nil {
			rec.Swept = append(rec.Swept, s)
		}
	}
	sort.Strings(rec.Swept)
	rec.Swept = compact(rec.Swept)
	if err := c.ports(key, plan, old, &rec); err != nil {
		problems = append(problems, err.Error())
		faults = true
	}
	tp, tw := c.applyTemplates(ctx, module, plan, old, &rec)
	problems = append(problems, tp...)
	faults = faults || !tw
	if len(problems) > 0 {
		rec.Problems = problems
	}
	c.sayApplied(key, old.Problems, problems, faults)
	if err := c.putRecord(ctx, key, old, rec); err != nil {
		return err
	}
	if err := c.contribute(ctx, module, plan.Contributes); err != nil {
		return err
	}
	return nil
}

// applyTemplates renders the plan's templates into rec's directories and
// runs the plan's reload after a render that changed a file (or one whose
// reload has not run: the old record says so) once the providers hold
// every credential generation the files hold; rec says those generations
// and whether the reload ran. It returns what it could not do, and
// whether all of that only waits for other parties' writes (an entry not
// yet provided, a generation not yet in force).
func (c *Client) applyTemplates(ctx context.Context, module string, plan mesh.Plan, old mesh.Applied, rec *mesh.Applied) ([]string, bool) {
	c.templatedMu.Lock()
	if len(plan.Templates) == 0 {
		delete(c.templated, module)
	} else {
		c.templated[module] = true
	}
	c.templatedMu.Unlock()
	if len(plan.Templates) == 0 {
		return nil, true
	}
	c.followTemplated()
	creds, changed, problems, onlyWaits := c.templates(ctx, module, plan, rec)
	rec.Credentials = creds
	// A file not rendered is no file to reload: the reload waits for
	// every template.
	if len(plan.Reload) == 0 || len(problems) > 0 {
		return problems, onlyWaits
	}
	if !changed && old.Reloaded {
		rec.Reloaded = true
		return problems, onlyWaits
	}
	if why := c.behind(creds); why != "" {
		return append(problems, why), onlyWaits
	}
	if !c.cfg.Reload {
		return append(problems, whyNoReload(plan.Reload)), false
	}
	if err := c.reload(ctx, module, plan.Reload); err != nil {
		return append(problems, err.Error()), false
	}
	rec.Reloaded = true
	return problems, onlyWaits
}

// sayApplied logs a plan applied in part once per change of its problems
// (was: the old record's): at WARN when any is a fault, at INFO when each
// only waits for another party's write (the normal order of a start); and
// says at INFO when a plan applied in part is applied whole.
func (c *Client) sayApplied(key string, was, problems []string, faults bool) {
	switch {
	case len(problems) == 0:
		if len(was) > 0 {
			c.log.Info("client: plan applied whole", "bucket", mesh.AppliedBucket, "key", key)
		}
	case slices.Equal(was, problems):
	case faults:
		c.log.Warn("client: plan applied in part", "bucket", mesh.AppliedBucket, "key", key, "problems", problems)
	default:
		c.log.Info("client: plan applied in part; it waits for other parties' writes", "bucket", mesh.AppliedBucket, "key", key, "problems", problems)
	}
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// record returns the applied record at key as the copy holds it.
func (c *Client) record(key string) (mesh.Applied, bool) {
	it, ok := c.applied.Get(key)
	if !ok {
		return mesh.Applied{}, false
	}
	var a mesh.Applied
	if err := json.Unmarshal(it.Value, &a); err != nil {
		c.log.Warn("client: applied record does not decode; written anew", "bucket", mesh.AppliedBucket, "key", key, "err", err)
		return mesh.Applied{}, false
	}
	return a, true
}

// putRecord writes rec unless it equals old but for at.
func (c *Client) putRecord(ctx context.Context, key string, old, rec mesh.Applied) error {
	rec.At = old.At
	same, _ := json.Marshal(rec)
	was, _ := json.Marshal(old)
	if _, ok := c.applied.Get(key); ok && bytes.Equal(same, was) {
		return nil
	}
	rec.At = c.cfg.Now().UTC()
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("applied %s: %w", key, err)
	}
	if _, err := bus.PutIfChanged(ctx, c.applied, key, b); err != nil {
		return err
	}
	c.log.Info("client: applied", "bucket", mesh.AppliedBucket, "key", key, "fp", rec.Fingerprint,
		"dirs", len(rec.Dirs), "ports", rec.Ports, "swept", len(rec.Swept))
	return nil
}

// dir makes the module's directory d and sweeps it when its unknown is
// sweep; it returns its path and the quarantine paths of what it swept.
func (c *Client) dir(module string, d mesh.Dir) (string, []string, error) {
	if err := nameCheck(module, d.Name); err != nil {
		return "", nil, err
	}
	path := filepath.Join(c.root, module, d.Name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.folder(module + "/" + d.Name); err != nil {
		return "", nil, fmt.Errorf("directory %s: %w", d.Name, err)
	}
	if d.Unknown != mesh.UnknownSweep {
		return path, nil, nil
	}
	var swept []string
	err := c.sweep(module+"/"+d.Name, &swept)
	return path, swept, err
}

// sweep moves every entry under rel (relative to the root) that the client
// did not write to the same place under the quarantine folder. A folder
// that holds a written file is swept inside instead of moved whole. c.mu
// is held.
func (c *Client) sweep(rel string, swept *[]string) error {
	f, err := c.fs.Open(c.inRoot(rel))
	if err != nil {
		return fmt.Errorf("sweep %s: %w", rel, err)
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("sweep %s: %w", rel, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var problems []error
	for _, e := range entries {
		r := rel + "/" + e.Name()
		file, inside := c.written.holds(r)
		switch {
		case file:
			continue
		case inside && e.IsDir():
			if err := c.sweep(r, swept); err != nil {
				problems = append(problems, err)
			}
			continue
		}
		to, err := c.moveAside(r)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		c.log.Warn("client: swept a file the client did not write into quarantine", "from", filepath.Join(c.root, r), "to", to)
		*swept = append(*swept, to)
	}
	return errors.Join(problems...)
}

// moveAside renames rel into the quarantine folder, never over an
// existing file: a name taken gets ".1", ".2", ... appended. Both ends are
// reached through c.fs (a symlink is moved, never followed); the folders
// of rel were checked by the sweep that found it. c.mu is held.
func (c *Client) moveAside(rel string) (string, error) {
	base := filepath.FromSlash(rel)
	if err := c.fs.MkdirAll(c.inQuarantine(filepath.Dir(base)), 0o755); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", rel, err)
	}
	to := base
	for n := 1; ; n++ {
		if _, err := c.fs.Lstat(c.inQuarantine(to)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = base + "." + strconv.Itoa(n)
	}
	if err := c.fs.Rename(c.inRoot(rel), c.inQuarantine(to)); err != nil {
		return "", fmt.Errorf("quarantine %s (left in place): %w", rel, err)
	}
	return filepath.Join(c.quarantine, to), nil
}

// ports assigns the plan's ports into rec: a port the old record holds
// keeps its number; a new one gets a free number of the range that no
// other port of the node holds.
func (c *Client) ports(key string, plan mesh.Plan, old mesh.Applied, rec *mesh.Applied) error {
	used := map[int]bool{}
	c.applied.Range(func(k string, it bus.Item) bool {
		if k == key {
			return true
		}
		var a mesh.Applied
		if json.Unmarshal(it.Value, &a) == nil {
			for _, p := range a.Ports {
				used[p] = true
			}
		}
		return true
	})
	var problems []string
	for _, p := range plan.Ports {
		if n, ok := old.Ports[p.Name]; ok && !used[n] {
			rec.Ports[p.Name] = n
			used[n] = true
		}
	}
	for _, p := range plan.Ports {
		if _, ok := rec.Ports[p.Name]; ok {
			continue
		}
		n, err := c.freePort(key+"."+p.Name, used)
		if err != nil {
			problems = append(problems, fmt.Sprintf("port %s: %v", p.Name, err))
			continue
		}
		rec.Ports[p.Name] = n
		used[n] = true
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// freePort returns a number of the range that is not used and that can be
// listened on now, starting at a place derived from seed so that the same
// port tends to get the same number.
func (c *Client) freePort(seed string, used map[int]bool) (int, error) {
	r := c.cfg.Ports
	size := r.High - r.Low + 1
	h := fnv.New32a()
	h.Write([]byte(seed))
	start := int(h.Sum32() % uint32(size))
	for i := 0; i < size; i++ {
		n := r.Low + (start+i)%size
		if used[n] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(n))
		if err != nil {
			continue
		}
		l.Close()
		return n, nil
	}
	return 0, fmt.Errorf("no free number in %d-%d", r.Low, r.High)
}

// contribute makes the module's keys in collect be exactly its
// contributions: one key per collection (items of one collection joined by
// a newline), the others deleted.
func (c *Client) contribute(ctx context.Context, module string, items []mesh.Contribution) error {
	want := map[string][]byte{}
	var order []string
	joined := map[string]string{}
	for _, it := range items {
		if prev, ok := joined[it.Collection]; ok {
			joined[it.Collection] = prev + "\n" + it.Item
			continue
		}
		joined[it.Collection] = it.Item
		order = append(order, it.Collection)
	}
	for _, coll := range order {
		k := mesh.CollectKey{Node: c.cfg.Node, Collection: coll, Contributor: module}.String()
		b, err := json.Marshal(mesh.CollectItem{Item: joined[coll], Module: module, Collection: coll})
		if err != nil {
			return fmt.Errorf("collect %s: %w", k, err)
		}
		want[k] = b
	}
	var errs []error
	for _, k := range c.contributed(module) {
		if _, ok := want[k]; !ok {
			if _, err := bus.DeleteIfPresent(ctx, c.collect, k); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, coll := range order {
		k := mesh.CollectKey{Node: c.cfg.Node, Collection: coll, Contributor: module}.String()
		wrote, err := bus.PutIfChanged(ctx, c.collect, k, want[k])
		if err != nil {
			errs = append(errs, err)
		} else if wrote {
			c.log.Info("client: contributed", "bucket", mesh.CollectBucket, "key", k, "module", module)
		}
	}
	return errors.Join(errs...)
}

// contributed returns the keys of collect whose contributor is module.
func (c *Client) contributed(module string) []string {
	var keys []string
	c.collect.Range(func(key string, _ bus.Item) bool {
		if k, err := mesh.ParseCollectKey(key); err == nil && k.Contributor == module {
			keys = append(keys, key)
		}
		return true
	})
	return keys
}

// remove deletes the module's applied record and contributions; its
// directories and their data stay.
func (c *Client) remove(ctx context.Context, module string) error {
	key := mesh.NodeModule{Node: c.cfg.Node, Module: module}.String()
	var errs []error
	if gone, err := bus.DeleteIfPresent(ctx, c.applied, key); err != nil {
		errs = append(errs, err)
	} else if gone {
		c.log.Info("client: plan gone; applied record deleted, directories kept", "bucket", mesh.AppliedBucket, "key", key)
	}
	for _, k := range c.contributed(module) {
		if _, err := bus.DeleteIfPresent(ctx, c.collect, k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
