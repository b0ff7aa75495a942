// Package convert rewrites Grid manifests of upstream's earlier releases
// (the grid.praxis-proxy.io API group, the earlier field names, nulls for
// absent fields) into the current ones, and refuses what has no
// equivalent instead of letting an API server prune it.
package convert

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Groups of the Grid API.
const (
	Group        = "grid.praxis.fast"
	EarlierGroup = "grid.praxis-proxy.io"
)

// Kinds this release serves.
var kinds = []string{"GridNetwork", "GridSite", "InferenceProvider"}

// rename is one field written under an earlier name: at is the path of
// the object holding it ("*" for every item of a list).
type rename struct {
	at       []string
	old, cur string
}

// renames are upstream's earlier names, by kind, a holder's rename before
// the renames inside it.
var renames = map[string][]rename{
	"GridNetwork": {
		{[]string{"spec"}, "gatewayRefs", "consumerGateways"},
		{[]string{"spec", "consumerGateways", "*"}, "localSiteName", "siteName"},
		{[]string{"spec", "consumerGateways", "*"}, "consumerConfig", "praxisConfig"},
		{[]string{"spec", "consumerGateways", "*", "praxisConfig"}, "enabled", "generate"},
		{[]string{"spec", "consumerGateways", "*", "praxisConfig"}, "credentialMountBase", "credentialMountPath"},
		{[]string{"spec", "tls"}, "swimKeyRef", "swimKeySecretRef"},
	},
	"GridSite": {
		{[]string{"spec"}, "egress", "gatewayEndpoint"},
	},
	"InferenceProvider": {
		{[]string{"spec"}, "routingClusterRef", "clusterName"},
		{[]string{"spec", "auth"}, "manual", "credentialsManagedExternally"},
		{[]string{"spec", "metricsConfig"}, "metricsEndpoint", "endpoint"},
	},
}

// Object converts one manifest in place. Objects of other API groups pass
// unchanged; a Grid kind this release does not serve, two names of one
// field holding different values, and a field the current schema does not
// have are errors naming the field.
func Object(obj map[string]any, schemas Schemas) error {
	group, version, _ := strings.Cut(fmt.Sprint(obj["apiVersion"]), "/")
	if group != EarlierGroup && group != Group {
		return nil
	}
	kind, _ := obj["kind"].(string)
	name := ""
	if md, ok := obj["metadata"].(map[string]any); ok {
		name, _ = md["name"].(string)
	}
	what := fmt.Sprintf("%s %q", kind, name)
	if !slices.Contains(kinds, kind) {
		return fmt.Errorf("%s: %s/%s has no equivalent in this release (it serves %s)", what, group, kind, strings.Join(kinds, ", "))
	}
	if version != "v1alpha1" {
		return fmt.Errorf("%s: version %q has no equivalent (v1alpha1 only)", what, version)
	}
	obj["apiVersion"] = Group + "/" + version
	dropNulls(obj)
	for _, r := range renames[kind] {
		for _, holder := range holders(obj, r.at) {
			old, hasOld := holder[r.old]
			if !hasOld {
				continue
			}
			if cur, hasCur := holder[r.cur]; hasCur && !reflect.DeepEqual(old, cur) {
				return fmt.Errorf("%s: %s and %s are one field under its earlier and its current name and hold different values", what, r.old, r.cur)
			}
			holder[r.cur] = old
			delete(holder, r.old)
		}
	}
	if kind == "GridNetwork" {
		for _, pt := range holders(obj, []string{"spec", "peerTrust"}) {
			if pt["mode"] == "pin" {
				pt["mode"] = "pinned"
			}
		}
	}
	if extra := schemas.Unknown(obj); len(extra) > 0 {
		return fmt.Errorf("%s: %s has no equivalent in this release", what, strings.Join(extra, ", "))
	}
	return nil
}

// holders are the objects at path; "*" steps into every item of a list.
func holders(obj map[string]any, path []string) []map[string]any {
	if len(path) == 0 {
		return []map[string]any{obj}
	}
	next := obj[path[0]]
	rest := path[1:]
	if len(rest) > 0 && rest[0] == "*" {
		items, _ := next.([]any)
		var out []map[string]any
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				out = append(out, holders(m, rest[1:])...)
			}
		}
		return out
	}
	m, ok := next.(map[string]any)
	if !ok {
		return nil
	}
	return holders(m, rest)
}

// dropNulls removes fields written as null: upstream writes null for an
// absent optional field.
func dropNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			dropNulls(x)
		}
	case []any:
		for _, x := range t {
			dropNulls(x)
		}
	}
}
