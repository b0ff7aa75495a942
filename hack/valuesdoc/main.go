// Command valuesdoc writes a chart's values table into its README, between
// the lines `<!-- values:begin -->` and `<!-- values:end -->`: one row per
// key that values.schema.json declares, with its type and bounds from the
// schema, its default from values.yaml, and its meaning from the schema's
// description or else the comment above the key in values.yaml. The schema
// is the source because it is what Helm enforces: a key the table lists is
// a key the chart takes.
//
//	valuesdoc charts/praxis-gateway charts/gridsync-agent         # rewrite
//	valuesdoc -check charts/praxis-gateway charts/gridsync-agent  # fail when stale
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	begin = "<!-- values:begin -->"
	end   = "<!-- values:end -->"
)

// schema is the part of JSON Schema the charts use.
type schema struct {
	Type                 any                `json:"type"`
	Description          string             `json:"description"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Enum                 []any              `json:"enum"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	Pattern              string             `json:"pattern"`
	MaxLength            *int               `json:"maxLength"`
}

// row is one key of the table.
type row struct {
	key, kind, def, meaning string
}

func main() {
	check := flag.Bool("check", false, "exit 1 when a README's table is not what the schema gives")
	flag.Parse()
	stale := false
	for _, chart := range flag.Args() {
		changed, err := run(chart, *check)
		if err != nil {
			fmt.Fprintf(os.Stderr, "valuesdoc: %s: %v\n", chart, err)
			os.Exit(2)
		}
		if changed && *check {
			fmt.Fprintf(os.Stderr, "valuesdoc: %s/README.md: the values table is stale: run make docs\n", chart)
			stale = true
		}
	}
	if stale {
		os.Exit(1)
	}
}

func run(chart string, check bool) (changed bool, err error) {
	raw, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		return false, err
	}
	var s schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return false, fmt.Errorf("values.schema.json: %w", err)
	}
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return false, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return false, fmt.Errorf("values.yaml: %w", err)
	}
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	var rows []row
	walk(&s, root, "", "", &rows)
	table := render(rows)

	readme := filepath.Join(chart, "README.md")
	text, err := os.ReadFile(readme)
	if err != nil {
		return false, err
	}
	updated, err := splice(text, table)
	if err != nil {
		return false, fmt.Errorf("README.md: %w", err)
	}
	if bytes.Equal(updated, text) {
		return false, nil
	}
	if check {
		return true, nil
	}
	return true, os.WriteFile(readme, updated, 0o644)
}

// walk adds a row for every leaf of s: a key with no declared properties
// of its own (maps and lists are one row each). parentComment is what
// explains the enclosing key.
func walk(s *schema, node *yaml.Node, prefix, parentComment string, rows *[]row) {
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		child := s.Properties[k]
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		value, comment := lookup(node, k)
		if len(child.Properties) > 0 {
			walk(child, value, key, cmp.Or(child.Description, comment, parentComment), rows)
			continue
		}
		// A key with nothing of its own is explained by its parent's
		// comment ("The gateway's listener." for port.name).
		meaning := cmp.Or(child.Description, comment, usual[key], parentComment, usual[lastSegment(key)])
		*rows = append(*rows, row{key: key, kind: kind(child), def: defaultOf(value), meaning: meaning})
	}
}

// lookup finds key in a YAML mapping, with the comment written above it.
// A key with no comment of its own, written on the line right after a
// commented sibling, shares that sibling's comment: one comment above a
// group of keys speaks for the group.
func lookup(m *yaml.Node, key string) (*yaml.Node, string) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, ""
	}
	shared, lastLine := "", -1
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		own := commentText(k.HeadComment, k.LineComment)
		switch {
		case own != "":
			shared = own
		case k.Line != lastLine+1:
			shared = "" // a blank line or a block ends the group
		}
		if k.Value == key {
			return v, shared
		}
		lastLine = endLine(v)
	}
	return nil, ""
}

// endLine is the last line a value's text takes.
func endLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, endLine(c))
	}
	return last
}

// usual is what the keys every chart has mean, for the rows whose
// values.yaml says nothing more.
var usual = map[string]string{
	"nameOverride":               "Replaces the chart's name in the objects' names.",
	"fullnameOverride":           "Replaces the release's full name in the objects' names.",
	"imagePullSecrets":           "Secrets for pulling the images from a private registry.",
	"nodeSelector":               "The pods' node selector.",
	"tolerations":                "The pods' tolerations.",
	"affinity":                   "The pods' affinity.",
	"topologySpreadConstraints":  "The pods' topology spread constraints.",
	"podAnnotations":             "Extra annotations on the pods.",
	"podLabels":                  "Extra labels on the pods.",
	"priorityClassName":          "The pods' priority class.",
	"resources":                  "The container's resources; the memory limit also sets the Go runtime's soft limit.",
	"pullPolicy":                 "The image's pull policy.",
	"repository":                 "The image's repository.",
	"serviceAccount.create":      "Create the ServiceAccount (else it must exist).",
	"serviceAccount.annotations": "Annotations on the ServiceAccount.",
	"annotations":                "Annotations on the object.",
	"enabled":                    "Render this part.",
	"type":                       "The Service's type.",
	"loadBalancerSourceRanges":   "Source ranges a LoadBalancer Service admits.",
}

func lastSegment(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// commentText joins a key's comment lines into one sentence run; a
// helm-docs `# --` marker and the leading hashes go.
func commentText(head, line string) string {
	var parts []string
	for _, l := range strings.Split(head+"\n"+line, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimLeft(l, "#")
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "--"))
		if l != "" {
			parts = append(parts, l)
		}
	}
	// A comment block separated from the key by a blank line belongs to
	// a section, not to the key: yaml.v3 keeps only the block right above.
	return strings.Join(parts, " ")
}

func kind(s *schema) string {
	var t string
	switch v := s.Type.(type) {
	case string:
		t = v
	case []any:
		var ts []string
		for _, x := range v {
			ts = append(ts, fmt.Sprint(x))
		}
		t = strings.Join(ts, " or ")
	default:
		t = "any"
	}
	if t == "array" && s.Items != nil && s.Items.Type != nil {
		t = "array of " + kind(s.Items)
	}
	if t == "object" && len(s.AdditionalProperties) > 0 && string(s.AdditionalProperties) != "false" {
		t = "map"
	}
	var bounds []string
	if len(s.Enum) > 0 {
		var vs []string
		for _, e := range s.Enum {
			b, _ := json.Marshal(e)
			vs = append(vs, string(b))
		}
		bounds = append(bounds, "one of "+strings.Join(vs, ", "))
	}
	if s.Minimum != nil {
		bounds = append(bounds, fmt.Sprintf("≥ %g", *s.Minimum))
	}
	if s.Maximum != nil {
		bounds = append(bounds, fmt.Sprintf("≤ %g", *s.Maximum))
	}
	if s.MaxLength != nil {
		bounds = append(bounds, fmt.Sprintf("at most %d characters", *s.MaxLength))
	}
	if len(bounds) > 0 {
		t += "; " + strings.Join(bounds, "; ")
	}
	return t
}

func defaultOf(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			b, _ := json.Marshal(n.Value)
			return string(b)
		}
		return n.Value
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			return "[]"
		}
	case yaml.MappingNode:
		if len(n.Content) == 0 {
			return "{}"
		}
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func render(rows []row) string {
	var b strings.Builder
	b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, cell(r.kind), code(r.def), cell(r.meaning))
	}
	return b.String()
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, "`", "'"), "|", `\|`) + "`"
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// splice puts table between the markers.
func splice(text []byte, table string) ([]byte, error) {
	s := string(text)
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return nil, errors.New("no " + begin + " ... " + end + " block")
	}
	return []byte(s[:i+len(begin)] + "\n" + table + s[j:]), nil
}
