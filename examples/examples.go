// Package examples holds the bundled example mesh that "up" runs when it
// is given no file.
package examples

import _ "embed"

// Homelab is the text of homelab.yaml: one control node and three workers,
// fifteen modules.
//
//go:embed homelab.yaml
var Homelab []byte
