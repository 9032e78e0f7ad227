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
// an [os.Root], opening it at the first call and making the root and the
// quarantine folder in it. Neither may be a symlink (os.Root follows a
// relative one that stays in the parent: another local user who may write
// there would get the module's files), nor anything but a directory of
// this process's user: such a root or quarantine is refused with an error
// wrapping [ErrNotAFolder] naming it, and tried again at the next call.
// c.mu is held.
func (c *Client) rootFS() (*os.Root, error) {
	if c.fs != nil {
		return c.fs, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.root), 0o755); err != nil {
		return nil, fmt.Errorf("client: root folder: %w", err)
	}
	r, err := os.OpenRoot(filepath.Dir(c.root))
	if err != nil {
		return nil, fmt.Errorf("client: root folder: %w", err)
	}
	for _, dir := range []string{c.root, c.quarantine} {
		if err := ownFolder(r, dir); err != nil {
			r.Close()
			return nil, err
		}
	}
	c.fs = r
	return r, nil
}

// madeFolder makes name (in r; full is its path, for errors) a directory
// unless something is there, and returns what is there: an error wrapping
// [ErrNotAFolder] naming full when it is a symlink (never followed) or not
// a directory.
func madeFolder(r *os.Root, name, full string) (fs.FileInfo, error) {
	fi, err := r.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err := r.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("folder %s: %w", full, err)
		}
		fi, err = r.Lstat(name)
	}
	if err != nil {
		return nil, fmt.Errorf("folder %s: %w", full, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		to, _ := r.Readlink(name)
		return nil, fmt.Errorf("%w: %s is a symlink (to %s); the client never follows one, and left it alone", ErrNotAFolder, full, to)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s is not a directory (%s); the client left it alone", ErrNotAFolder, full, fi.Mode().Type())
	}
	return fi, nil
}

// ownFolder makes dir (a name in r's folder) a directory unless it is
// one, and checks that it is a directory of this process's user, not a
// symlink: else an error wrapping [ErrNotAFolder].
func ownFolder(r *os.Root, dir string) error {
	fi, err := madeFolder(r, filepath.Base(dir), dir)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if owner, ok := ownerOf(fi); ok && owner != os.Getuid() {
		return fmt.Errorf("%w: %s belongs to the user %d, not to the client's (%d): another user could read and swap what the client writes there", ErrNotAFolder, dir, owner, os.Getuid())
	}
	return nil
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
		if _, err := madeFolder(r, name, full); err != nil {
			return err
		}
	}
	return nil
}
