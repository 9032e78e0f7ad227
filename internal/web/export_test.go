package web

import (
	"context"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// NewStill returns a page that follows no bucket: a test feeds it with
// Take, as its copies would.
func NewStill(ctx context.Context, cfg Config) *Page { return newPage(ctx, cfg) }

// Take takes one change as if a copy had reported it.
func (p *Page) Take(ch bus.Change) { p.take(ch) }
