package envelope

import (
	"fmt"
	"hash/fnv"
)

// ConfigMap keys, labels and annotations of the contract.
const (
	DataKeyEnvelope = "routing-overlay.json"
	DataKeyBare     = "routing-config.json"

	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelGateway   = "grid.praxis.fast/gateway"
	LabelNetwork   = "grid.praxis.fast/network"

	AnnotationSchemaVersion = "grid.praxis.fast/overlay-schema-version"
	AnnotationRevision      = "grid.praxis.fast/overlay-revision"
	AnnotationContentDigest = "grid.praxis.fast/overlay-content-digest"

	// LegacyPrefix is the prefix of the same labels and annotations in
	// releases of the Grid operator before the API group was renamed; a
	// producer replacing that operator takes over ConfigMaps carrying it.
	LegacyPrefix = "grid.praxis-proxy.io/"
	// LegacyProducer is the Grid operator's managed-by value.
	LegacyProducer = "grid-operator"
)

// maxObjectName is the longest ConfigMap name the contract produces (a DNS
// label, so that the name also fits where labels are required).
const maxObjectName = 63

// ConfigMapName returns the overlay ConfigMap's name for a gateway:
// grid-overlay-<network>-<gateway>, or, when that exceeds 63 bytes, both
// parts cut to 20 characters followed by the FNV-1a hash of
// "<network>/<gateway>" so that distinct long names stay distinct.
func ConfigMapName(network, gateway string) string {
	name := "grid-overlay-" + network + "-" + gateway
	if len(name) <= maxObjectName {
		return name
	}
	return fmt.Sprintf("grid-overlay-%s-%s-%s", firstChars(network, 20), firstChars(gateway, 20), FNV1a32(network+"/"+gateway))
}

// FNV1a32 returns the 32-bit FNV-1a hash of s's UTF-8 bytes as 8 lowercase
// hex digits.
func FNV1a32(s string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s)) // hash.Hash never returns an error
	return fmt.Sprintf("%08x", h.Sum32())
}

// StableID is a candidate's stable identity: FNV-1a of kind/name/site/cluster.
func StableID(kind, name, site, cluster string) string {
	return FNV1a32(kind + "/" + name + "/" + site + "/" + cluster)
}

// firstChars cuts s to n characters (not bytes), so a multi-byte name is
// never split inside a character.
func firstChars(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
