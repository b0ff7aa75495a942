// What a generated config needs mounted into the gateway (credential and
// CA Secrets), published beside it for the chart and the checks.

package praxisconfig

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	sigsyaml "sigs.k8s.io/yaml"
)

// requirements collects the Secret files a config reads, grouped by
// purpose and Secret; two Secrets' keys at one path is an error.
type requirements struct {
	byPath map[string]string // path → namespace/name/key
	groups map[[3]string]map[RequirementItem]bool
	err    error
}

func newRequirements() *requirements {
	return &requirements{byPath: map[string]string{}, groups: map[[3]string]map[RequirementItem]bool{}}
}

func (r *requirements) add(purpose, namespace, name, key, file string) {
	if r.err != nil {
		return
	}
	if namespace == "" || name == "" || !validKey(key) || !cleanAbsolute(file) {
		r.err = fail(ReasonPraxisConfigRenderFailed, "the Secret reference read at %s is incomplete or invalid", file)
		return
	}
	who := namespace + "/" + name + "/" + key
	if other, ok := r.byPath[file]; ok && other != who {
		r.err = fail(ReasonPraxisConfigRenderFailed, "two Secret keys would be mounted at %s", file)
		return
	}
	r.byPath[file] = who
	g := [3]string{purpose, namespace, name}
	if r.groups[g] == nil {
		r.groups[g] = map[RequirementItem]bool{}
	}
	r.groups[g][RequirementItem{Key: key, Path: file}] = true
}

func (r *requirements) list() []Requirement {
	out := make([]Requirement, 0, len(r.groups))
	for g, items := range r.groups {
		req := Requirement{Purpose: g[0], Secret: RequirementSecret{Namespace: g[1], Name: g[2]}}
		for it := range items {
			req.Items = append(req.Items, it)
		}
		slices.SortFunc(req.Items, func(a, b RequirementItem) int { return cmp.Compare(a.Path, b.Path) })
		out = append(out, req)
	}
	slices.SortFunc(out, func(a, b Requirement) int {
		return cmp.Or(cmp.Compare(a.Purpose, b.Purpose), cmp.Compare(a.Secret.Namespace, b.Secret.Namespace), cmp.Compare(a.Secret.Name, b.Secret.Name))
	})
	return out
}

// RequirementsKey is the mount-requirements ConfigMap's key.
const RequirementsKey = "mount-requirements.json"

// RequirementsConfigMapName is the reference-only ConfigMap listing the
// Secret mounts a generated config expects:
// grid-mount-requirements-<first 16 hex of SHA-256(configMapName)>.
func RequirementsConfigMapName(configMapName string) string {
	sum := sha256.Sum256([]byte(configMapName))
	return "grid-mount-requirements-" + hex.EncodeToString(sum[:])[:16]
}

// RequirementsDocument is the mount-requirements document: which Secret
// keys the config reads at which paths. References only.
type RequirementsDocument struct {
	SchemaVersion string             `json:"schemaVersion"`
	Network       string             `json:"network"`
	Gateway       RequirementGateway `json:"gateway"`
	ConfigMapName string             `json:"configMapName"`
	Requirements  []Requirement      `json:"requirements"`
}

// RequirementGateway names the gateway whose config reads the files.
type RequirementGateway struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// Requirements is the mount-requirements document of a rendered config,
// as deterministic JSON.
func Requirements(in Input, res Result) ([]byte, error) {
	reqs := res.Requirements
	if reqs == nil {
		reqs = []Requirement{}
	}
	return json.Marshal(RequirementsDocument{
		SchemaVersion: "v1", Network: in.Network,
		Gateway:       RequirementGateway{Name: in.Gateway, Namespace: in.Namespace},
		ConfigMapName: ConfigMapName(in.Spec), Requirements: reqs,
	})
}

// AppliedClusters reads the load_balancer clusters of a config this
// package rendered earlier (the last applied one), so that while a new
// render fails the gateway's overlay names only clusters the config it
// runs can reach.
// It returns each cluster's endpoints.
func AppliedClusters(doc []byte) (map[string][]string, error) {
	var cfg struct {
		FilterChains []struct {
			Filters []struct {
				Filter   string `json:"filter"`
				Clusters []struct {
					Name      string   `json:"name"`
					Endpoints []string `json:"endpoints"`
				} `json:"clusters"`
			} `json:"filters"`
		} `json:"filter_chains"`
	}
	if err := sigsyaml.Unmarshal(doc, &cfg); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, chain := range cfg.FilterChains {
		for _, f := range chain.Filters {
			if f.Filter != "load_balancer" {
				continue
			}
			for _, c := range f.Clusters {
				out[c.Name] = c.Endpoints
			}
		}
	}
	return out, nil
}
