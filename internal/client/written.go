package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// writtenFile is the client's record of the files it wrote under the
// root, one path relative to the root each, kept at <root>/<writtenFile>.
// A module's folders never hold it (module names have no leading dot).
const writtenFile = ".mesh-client-written.json"

// written is the set of files the client wrote, relative to the root. Its
// record is read and written through the root (os.Root), never by a path:
// a symlink planted at the record's name cannot aim the client's write at
// a file outside the root.
type written struct {
	path  string   // the record's path, for messages
	root  *os.Root // the client's root folder
	files map[string]bool
}

func loadWritten(root string) (*written, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("client: root folder: %w", err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("client: root folder: %w", err)
	}
	w := &written{path: filepath.Join(root, writtenFile), root: r, files: map[string]bool{}}
	b, err := r.ReadFile(writtenFile)
	if errors.Is(err, fs.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: record of written files: %w", err)
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("client: record of written files %s: %w", w.path, err)
	}
	for _, f := range list {
		w.files[f] = true
	}
	return w, nil
}

// add records rel and saves the record (written to a temporary file, then
// renamed over the old one).
func (w *written) add(rel string) error {
	if w.files[rel] {
		return nil
	}
	w.files[rel] = true
	list := make([]string, 0, len(w.files))
	for f := range w.files {
		list = append(list, f)
	}
	sort.Strings(list)
	b, _ := json.MarshalIndent(list, "", "  ")
	// A new file of the client's own (whatever held the name is removed,
	// a symlink as a link), renamed over the record.
	tmp := writtenFile + ".new"
	if err := w.root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("client: record of written files: %w", err)
	}
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("client: record of written files: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("client: record of written files: %w", err)
	}
	if err := w.root.Rename(tmp, writtenFile); err != nil {
		return fmt.Errorf("client: record of written files: %w", err)
	}
	return nil
}

// holds reports whether rel was written, or is a folder holding a file
// that was.
func (w *written) holds(rel string) (file, inside bool) {
	if w.files[rel] {
		return true, false
	}
	prefix := rel + "/"
	for f := range w.files {
		if len(f) > len(prefix) && f[:len(prefix)] == prefix {
			return false, true
		}
	}
	return false, false
}

// Write writes data to the file name (a path relative to the directory,
// with "/" between folders) in the module's directory dir, and records it
// as written by the client, so that a sweep leaves it in place. It returns
// an error when the module or directory is not a valid name, name leaves
// the directory, or the file cannot be written.
func (c *Client) Write(module, dir, name string, data []byte) error {
	if err := nameCheck(module, dir); err != nil {
		return err
	}
	clean := filepath.ToSlash(filepath.Clean(filepath.FromSlash(name)))
	if name == "" || !filepath.IsLocal(clean) {
		return fmt.Errorf("client: write %s/%s: %q is not a path inside the directory", module, dir, name)
	}
	rel := module + "/" + dir + "/" + clean
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.folder(path.Dir(rel)); err != nil {
		return fmt.Errorf("client: write %s: %w", rel, err)
	}
	if fi, err := c.fs.Lstat(c.inRoot(rel)); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("client: write %s: %w: %s is %s, not a file", rel, ErrNotAFolder, filepath.Join(c.root, rel), fi.Mode().Type())
	}
	if c.written == nil {
		w, err := loadWritten(c.root)
		if err != nil {
			return err
		}
		c.written = w
	}
	if err := c.written.add(rel); err != nil {
		return err
	}
	if err := c.fs.WriteFile(c.inRoot(rel), data, 0o644); err != nil {
		return fmt.Errorf("client: write %s: %w", rel, err)
	}
	return nil
}
