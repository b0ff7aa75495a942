package images

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Index builds s for every architecture in bins (architecture → the
// folder of the binaries built for linux/that architecture) under one OCI
// image index, and the SPDX SBOM of the Go modules those binaries are
// built from and of the CA bundle.
func Index(s Spec, bins map[string]string, m Meta) (v1.ImageIndex, []byte, error) {
	archs := make([]string, 0, len(bins))
	for arch := range bins {
		archs = append(archs, arch)
	}
	sort.Strings(archs) // the index lists them in a stable order
	created := buildTime()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var files []string
	for _, arch := range archs {
		img, err := Build(s, bins[arch], arch, m)
		if err != nil {
			return nil, nil, fmt.Errorf("%s linux/%s: %w", s.Name, arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1, Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
		for _, b := range s.Binaries {
			files = append(files, filepath.Join(bins[arch], b))
		}
	}
	idx = mutate.Annotations(idx, m.labels(s, created)).(v1.ImageIndex)
	sbom, err := SBOM(s, m, files)
	if err != nil {
		return nil, nil, err
	}
	return idx, sbom, nil
}

// The SBOM's media type, as OCI artifacts name SPDX documents.
const SBOMMediaType = "application/spdx+json"

// SBOM is an SPDX 2.3 document of the Go modules compiled into files (the
// image's binaries, every architecture's), read from each binary's build
// information as `go version -m` prints it: what the image runs, not what
// go.mod lists. It also lists the image's CA bundle, third-party content
// the image ships, under the module and version it is made from (its purl
// is the module's, so that a scanner that knows of the module's advisories
// finds them) with the file's SHA-256.
func SBOM(s Spec, m Meta, files []string) ([]byte, error) {
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type checksum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	type pkg struct {
		Name             string     `json:"name"`
		SPDXID           string     `json:"SPDXID"`
		VersionInfo      string     `json:"versionInfo,omitempty"`
		DownloadLocation string     `json:"downloadLocation"`
		FilesAnalyzed    bool       `json:"filesAnalyzed"`
		Checksums        []checksum `json:"checksums,omitempty"`
		SourceInfo       string     `json:"sourceInfo,omitempty"`
		ExternalRefs     []ref      `json:"externalRefs,omitempty"`
		PrimaryPurpose   string     `json:"primaryPackagePurpose,omitempty"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	purl := func(path, version string) []ref {
		return []ref{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}}
	}
	var packages []pkg
	var rels []rel
	modules := map[string]string{} // path → version, every binary's
	var goVersion string           // the toolchain's, the same for every binary of a build
	for _, f := range files {
		info, err := buildinfo.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: build information: %w", f, err)
		}
		id := "SPDXRef-Binary-" + spdxID(filepath.Base(filepath.Dir(f))+"-"+filepath.Base(f))
		packages = append(packages, pkg{Name: filepath.Base(f), SPDXID: id, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: purl(info.Main.Path, m.Version), PrimaryPurpose: "APPLICATION"})
		rels = append(rels, rel{"SPDXRef-DOCUMENT", "DESCRIBES", id})
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			modules[d.Path] = d.Version
			rels = append(rels, rel{id, "DEPENDS_ON", "SPDXRef-Module-" + spdxID(d.Path)})
		}
		rels = append(rels, rel{id, "DEPENDS_ON", "SPDXRef-Module-stdlib"})
		goVersion = strings.TrimPrefix(info.GoVersion, "go")
	}
	paths := make([]string, 0, len(modules))
	for p := range modules {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		packages = append(packages, pkg{Name: p, SPDXID: "SPDXRef-Module-" + spdxID(p), VersionInfo: modules[p],
			DownloadLocation: "https://proxy.golang.org/" + p + "/@v/" + modules[p] + ".zip", ExternalRefs: purl(p, modules[p]), PrimaryPurpose: "LIBRARY"})
	}
	packages = append(packages, pkg{Name: "stdlib", SPDXID: "SPDXRef-Module-stdlib", VersionInfo: goVersion,
		DownloadLocation: "NOASSERTION",
		ExternalRefs:     purl("stdlib", goVersion), PrimaryPurpose: "LIBRARY"})
	ca, err := theCABundle()
	if err != nil {
		return nil, err
	}
	caSum := sha256.Sum256(ca.pem)
	packages = append(packages, pkg{Name: caBundlePath, SPDXID: caBundleSPDXID, VersionInfo: ca.version,
		DownloadLocation: "https://proxy.golang.org/" + ca.module + "/@v/" + ca.version + ".zip",
		Checksums:        []checksum{{Algorithm: "SHA256", Value: hex.EncodeToString(caSum[:])}},
		SourceInfo:       "made from the Go module " + ca.module + " " + ca.version + ": Mozilla's root store, " + strconv.Itoa(ca.roots) + " certificates",
		ExternalRefs:     purl(ca.module, ca.version), PrimaryPurpose: "FILE"})
	rels = append(rels, rel{"SPDXRef-DOCUMENT", "DESCRIBES", caBundleSPDXID})
	sort.Slice(rels, func(i, j int) bool {
		return rels[i].Element+rels[i].Related < rels[j].Element+rels[j].Related
	})
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              s.Name + "-" + m.Version,
		"documentNamespace": "",
		"creationInfo": map[string]any{
			"created":  buildTime().Format("2006-01-02T15:04:05Z"),
			"creators": []string{"Tool: gridsync-images"},
		},
		"packages":      packages,
		"relationships": rels,
	}
	// The namespace must be unique per document: the hash of everything
	// else in it, so that the same build gives the same document.
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	source := strings.TrimSuffix(m.Source, "/")
	if source == "" {
		source = "https://gridsync.local"
	}
	doc["documentNamespace"] = source + "/spdx/" + s.Name + "-" + hex.EncodeToString(sum[:8])
	return json.MarshalIndent(doc, "", "  ")
}

// caBundleSPDXID is the CA bundle's SPDX identifier, apart from the
// modules': a binary may be built with the same module.
const caBundleSPDXID = "SPDXRef-File-ca-certificates.crt"

// spdxID makes an SPDX identifier of s: letters, digits, dots and dashes.
func spdxID(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// emptyConfig is the OCI empty descriptor's content, the config of an
// artifact that has none.
var emptyConfig = []byte("{}")

// attachment is a document attached to the image index as an OCI 1.1
// artifact: the SBOM, the provenance.
type attachment struct {
	mediaType string // the artifact's type and its one layer's
	title     string // the layer's file name
	content   []byte
}

// artifactManifest is the OCI 1.1 artifact manifest carrying a, whose
// subject is the image index: registries that keep referrers list it
// under the index's digest, and `oras discover` or `cosign tree` find it.
func artifactManifest(a attachment, subject v1.Descriptor, created string) ([]byte, error) {
	digest := func(b []byte) string { sum := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(sum[:]) }
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     string(types.OCIManifestSchema1),
		"artifactType":  a.mediaType,
		"config": map[string]any{
			"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest(emptyConfig), "size": len(emptyConfig), "data": "e30=",
		},
		"layers": []any{map[string]any{
			"mediaType": a.mediaType, "digest": digest(a.content), "size": len(a.content),
			"annotations": map[string]string{"org.opencontainers.image.title": a.title},
		}},
		"subject": map[string]any{
			"mediaType": string(subject.MediaType), "digest": subject.Digest.String(), "size": subject.Size,
		},
		"annotations": map[string]string{"org.opencontainers.image.created": created},
	}
	return json.Marshal(manifest)
}

// ProvenanceMediaType is the media type of an in-toto statement.
const ProvenanceMediaType = "application/vnd.in-toto+json"

// ProvenancePredicateType is the predicate type of the provenance the
// layouts attach: SLSA v1, which make verify checks the attestation for
// (`cosign verify-attestation --type slsaprovenance1`).
const ProvenancePredicateType = "https://slsa.dev/provenance/v1"

// Provenance is an in-toto statement with a SLSA v1 provenance predicate
// for the image index named repository with digest: what it was built
// from (the source at its revision), with which parameters and which Go.
// It is not signed: the release pipeline that pushes the images signs what
// it pushes.
func Provenance(repository string, digest v1.Hash, m Meta, platforms []string) ([]byte, error) {
	source := strings.TrimSuffix(m.Source, "/")
	statement := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": repository, "digest": map[string]string{digest.Algorithm: digest.Hex}}},
		"predicateType": ProvenancePredicateType,
		"predicate": map[string]any{
			"buildDefinition": map[string]any{
				"buildType":          source + "/make-images/v1",
				"externalParameters": map[string]any{"source": source, "revision": m.Revision, "version": m.Version, "platforms": platforms},
				"internalParameters": map[string]any{"goVersion": runtime.Version(), "sourceDateEpoch": buildTime().Unix()},
				"resolvedDependencies": []any{map[string]any{
					"uri": "git+" + source + "@" + m.Revision, "digest": map[string]string{"gitCommit": m.Revision},
				}},
			},
			"runDetails": map[string]any{"builder": map[string]any{"id": source + "/make-images"}},
		},
	}
	return json.MarshalIndent(statement, "", "  ")
}

// blob is a byte slice for layout.WriteBlob.
func blob(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
