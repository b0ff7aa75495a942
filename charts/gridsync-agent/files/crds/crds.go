// Package crds embeds the Grid CRD manifests, so that tests, the demo and
// the benchmarks install exactly what the agent's chart ships. The
// manifests are generated from api/v1alpha1 by `make
// generate`; this folder is their one home.
package crds

import "embed"

// Manifests holds one CustomResourceDefinition per YAML file.
//
//go:embed *.yaml
var Manifests embed.FS
