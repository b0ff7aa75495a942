package convert

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Schemas are the current CRDs' structural schemas, by kind: what a
// converted manifest is checked against, so that a field the API server
// would prune is refused here with its path.
type Schemas map[string]*node

type node struct {
	Properties      map[string]*node `json:"properties"`
	Items           *node            `json:"items"`
	Additional      json.RawMessage  `json:"additionalProperties"`
	PreserveUnknown bool             `json:"x-kubernetes-preserve-unknown-fields"`
}

type crd struct {
	Spec struct {
		Names    struct{ Kind string } `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema *node `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// LoadSchemas reads the v1alpha1 schema of every CRD in fsys (*.yaml).
func LoadSchemas(fsys fs.FS) (Schemas, error) {
	paths, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := Schemas{}
	for _, p := range paths {
		raw, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		var c crd
		if err := yaml.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, v := range c.Spec.Versions {
			if v.Name == "v1alpha1" && v.Schema.OpenAPIV3Schema != nil {
				out[c.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
			}
		}
	}
	return out, nil
}

// Unknown lists the paths of a Grid object's fields that its kind's
// schema has no place for (none for a kind it does not know).
func (s Schemas) Unknown(obj map[string]any) []string {
	kind, _ := obj["kind"].(string)
	return s[kind].unknown("", obj)
}

// unknown lists the paths in v that the schema has no place for. The
// object's metadata is the API server's, and its status is not written
// by a manifest.
func (n *node) unknown(path string, v any) []string {
	if n == nil || n.PreserveUnknown {
		return nil
	}
	switch t := v.(type) {
	case map[string]any:
		var out []string
		for k, x := range t {
			if path == "" && (k == "metadata" || k == "status" || k == "apiVersion" || k == "kind") {
				continue
			}
			at := strings.TrimPrefix(path+"."+k, ".")
			child, ok := n.Properties[k]
			switch {
			case ok:
				out = append(out, child.unknown(at, x)...)
			case len(n.Additional) > 0 && string(n.Additional) != "false":
				var add node
				if json.Unmarshal(n.Additional, &add) == nil {
					out = append(out, add.unknown(at, x)...)
				}
			default:
				out = append(out, at)
			}
		}
		slices.Sort(out)
		return out
	case []any:
		var out []string
		for i, x := range t {
			out = append(out, n.Items.unknown(fmt.Sprintf("%s[%d]", path, i), x)...)
		}
		return out
	}
	return nil
}
