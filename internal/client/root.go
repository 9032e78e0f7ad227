package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotAFolder is wrapped by the error the client gives (in the log and in
// the applied record's problems) for a path under its root that it will not
// use as a folder: a symlink, which it never follows, or something that is
// not a directory.
var ErrNotAFolder = errors.New("client: not a folder of the root")

// rootFS returns the folder holding the root and the quarantine folder as
// an [os.Root], opening it at the first call (and making the root). c.mu
// is held.
func (c *Client) rootFS() (*os.Root, error) {
	if c.fs != nil {
		return c.fs, nil
	}
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		return nil, fmt.Errorf("client: root folder: %w", err)
	}
	r, err := os.OpenRoot(filepath.Dir(c.root))
	if err != nil {
		return nil, fmt.Errorf("client: root folder: %w", err)
	}
	c.fs = r
	return r, nil
}

// inRoot returns rel (relative to the root, "/" between folders) as a
// name in the root's parent, as c.fs takes it.
func (c *Client) inRoot(rel string) string {
	return filepath.Join(filepath.Base(c.root), filepath.FromSlash(rel))
}

// inQuarantine returns rel (relative to the quarantine folder) as a name
// in the root's parent.
func (c *Client) inQuarantine(rel string) string {
	return filepath.Join(filepath.Base(c.quarantine), filepath.FromSlash(rel))
}

// folder makes rel (a folder relative to the root, "/" between names) a
// directory, making each missing part. It never follows a symlink: a part
// that is a symlink, or not a directory, is refused with an error wrapping
// [ErrNotAFolder] that names its path (and a symlink's target). c.mu is
// held.
func (c *Client) folder(rel string) error {
	r, err := c.rootFS()
	if err != nil {
		return err
	}
	cur := ""
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		name := c.inRoot(filepath.ToSlash(cur))
		full := filepath.Join(c.root, cur)
		fi, err := r.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			if err := r.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("folder %s: %w", full, err)
			}
			fi, err = r.Lstat(name)
		}
		if err != nil {
			return fmt.Errorf("folder %s: %w", full, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			to, _ := r.Readlink(name)
			return fmt.Errorf("%w: %s is a symlink (to %s); the client never follows one under its root, and left it alone", ErrNotAFolder, full, to)
		case !fi.IsDir():
			return fmt.Errorf("%w: %s is not a directory (%s); the client left it alone", ErrNotAFolder, full, fi.Mode().Type())
		}
	}
	return nil
}
