package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkOutput returns a usage error unless output is one of want (the
// values of -o).
func checkOutput(output string, want ...string) error {
	for _, w := range want {
		if output == w {
			return nil
		}
	}
	return usageError{fmt.Errorf("-o %q; want %s", output, strings.Join(want, ", "))}
}

// writeData writes v as JSON (indented) or, for "yaml", as YAML with the
// same names and order: v is encoded as JSON first, so that both say the
// fields by their JSON names (the spec's).
func writeData(w io.Writer, output string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if output != "yaml" {
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return writeYAML(w, b)
}

// writeYAML writes JSON text as YAML, keeping the order of object names.
func writeYAML(w io.Writer, jsonText []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(jsonText, &doc); err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	plain(&doc)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	return enc.Close()
}

// plain drops the flow style JSON text reads with, so that YAML is
// written in block style, and the double quotes of strings that need none.
func plain(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle
	for _, c := range n.Content {
		plain(c)
	}
}
