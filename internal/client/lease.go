package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// LeaseTTL is how long a node's lease outlives its client: the key <node>
// in mesh-provisioner_clients ([mesh.ClientsBucket], a bucket whose keys
// lapse this long after their last write) is renewed every third of it.
// A second client of the same node waits until the key is gone.
const LeaseTTL = 10 * time.Second

// lease is a client's hold of its node's key in mesh-provisioner_clients.
type lease struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream // the connection's, for the delete at the lease's revision
	key string
	id  string
	rev uint64
}

// leaseID names this client in its lease: its node, host name, process id,
// start time and root, as "client-<node>@<host> pid=<pid> at=<unix ns>
// root=<root>".
func leaseID(node, root string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("client-%s@%s pid=%d at=%d root=%s", node, host, os.Getpid(), time.Now().UnixNano(), root)
}

// gone reports whether holder names a client of this node on this machine,
// under the same root, whose process no longer runs (a client killed
// without giving its lease back): its successor need not wait for the
// lease to lapse.
func (c *Client) gone(holder string) bool {
	mine, _, _ := strings.Cut(c.id, " pid=")
	who, rest, ok := strings.Cut(holder, " pid=")
	if !ok || who != mine {
		return false
	}
	pidText, rest, ok := strings.Cut(rest, " at=")
	if !ok {
		return false
	}
	_, root, ok := strings.Cut(rest, " root=")
	if !ok || root != c.root {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// acquire takes the node's lease, waiting (with backoff, said once per
// holder) while another client holds it. It returns ctx's error when ctx
// is done first.
func (c *Client) acquire(ctx context.Context) (*lease, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	said := ""
	failed := "" // the last error said: each change said once
	b, _ := json.Marshal(mesh.Lease{Holder: c.id, Since: c.cfg.Now().UTC()})
	for {
		holder, l, err := c.try(ctx, b)
		if l != nil {
			if said != "" {
				c.log.Info("client: holding the node's lease, taken over from another client", "bucket", mesh.ClientsBucket, "key", c.cfg.Node, "was", said)
			}
			return l, nil
		}
		switch {
		case err != nil && ctx.Err() == nil:
			level := slog.LevelWarn
			if err.Error() == failed {
				level = slog.LevelDebug
			}
			failed = err.Error()
			c.log.Log(ctx, level, "client: cannot take the node's lease yet", "bucket", mesh.ClientsBucket, "key", c.cfg.Node, "err", err)
		case holder != "" && holder != said:
			said = holder
			c.log.Warn("client: another client holds this node's lease; this one waits and applies nothing until it lapses",
				"bucket", mesh.ClientsBucket, "key", c.cfg.Node, "holder", holder)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// try takes the lease once. It returns the lease; or the holder's name when
// another client holds it; or the bus's error. A key held under this
// client's own name (a renewal that failed while the server was away), or
// by a client of the node on this machine and root whose process is gone,
// is taken over.
func (c *Client) try(ctx context.Context, value []byte) (string, *lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := bus.LeaseBucket(ctx, c.cfg.JS, mesh.ClientsBucket, LeaseTTL)
	if err != nil {
		return "", nil, err
	}
	rev, err := kv.Create(ctx, c.cfg.Node, value)
	if err == nil {
		return "", &lease{kv: kv, js: c.cfg.JS, key: c.cfg.Node, id: c.id, rev: rev}, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", nil, fmt.Errorf("client: take the lease of %s: %w", c.cfg.Node, err)
	}
	e, err := kv.Get(ctx, c.cfg.Node)
	if err != nil {
		return "", nil, fmt.Errorf("client: read the lease of %s: %w", c.cfg.Node, err)
	}
	var h mesh.Lease
	if json.Unmarshal(e.Value(), &h) != nil || h.Holder == "" {
		return "another client (its lease does not decode)", nil, nil
	}
	if h.Holder != c.id && !c.gone(h.Holder) {
		return h.Holder, nil, nil
	}
	if h.Holder != c.id {
		c.log.Info("client: taking over the lease of this node's client that is no longer running",
			"bucket", mesh.ClientsBucket, "key", c.cfg.Node, "was", h.Holder)
	}
	rev, err = kv.Update(ctx, c.cfg.Node, value, e.Revision())
	if err != nil {
		return "", nil, fmt.Errorf("client: take back the lease of %s: %w", c.cfg.Node, err)
	}
	return "", &lease{kv: kv, js: c.cfg.JS, key: c.cfg.Node, id: c.id, rev: rev}, nil
}

// renew writes the lease again, expecting its last revision.
func (l *lease) renew(ctx context.Context, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rev, err := l.kv.Update(ctx, l.key, value, l.rev)
	if err != nil {
		return err
	}
	l.rev = rev
	return nil
}

// release gives the lease up at once, so that a waiting client need not
// wait for it to lapse.
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = bus.DeleteAt(ctx, l.js, mesh.ClientsBucket, l.key, l.rev)
}

// keep holds the lease until ctx is done: renewed every third of
// [LeaseTTL]; when a renewal fails the client stops applying (said) and
// waits to take the lease again, then applies every module anew.
func (c *Client) keep(ctx context.Context, l *lease) {
	defer func() {
		if l != nil {
			l.release()
		}
	}()
	b, _ := json.Marshal(mesh.Lease{Holder: c.id, Since: c.cfg.Now().UTC()})
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(LeaseTTL / 3):
		}
		err := l.renew(ctx, b)
		if err == nil || ctx.Err() != nil {
			continue
		}
		c.held.Store(false)
		// A connection away a moment (a server restarting, a reconnect
		// on a user signed anew) is a fault it recovers from: warn.
		level := slog.LevelError
		if bus.Transient(err) {
			level = slog.LevelWarn
		}
		c.log.Log(ctx, level, "client: the node's lease could not be renewed; applying nothing until it is held again",
			"bucket", mesh.ClientsBucket, "key", c.cfg.Node, "err", err)
		l = nil
		got, err := c.acquire(ctx)
		if err != nil {
			return
		}
		l = got
		c.held.Store(true)
		for _, m := range c.modules() {
			c.mark(m)
		}
	}
}
