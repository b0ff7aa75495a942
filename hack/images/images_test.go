package images

import (
	"archive/tar"
	"bufio"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dockerfile is what the final stage of a Dockerfile says of its image.
type dockerfile struct {
	base       string
	copied     []string // absolute paths of the files COPY puts in
	user       string
	entrypoint []string
}

// parseDockerfile reads the final stage of one of the project's
// Dockerfiles: FROM, COPY --from=build <files...> <folder>/, USER and
// ENTRYPOINT in exec form.
func parseDockerfile(t *testing.T, file string) dockerfile {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var d dockerfile
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "FROM":
			d = dockerfile{base: fields[1]} // a new stage starts afresh
		case "COPY":
			if len(fields) < 3 || !strings.HasPrefix(fields[1], "--from=") {
				continue
			}
			dest := fields[len(fields)-1]
			require.True(t, strings.HasSuffix(dest, "/"), "COPY to a folder: %s", sc.Text())
			for _, src := range fields[2 : len(fields)-1] {
				d.copied = append(d.copied, path.Join(dest, path.Base(src)))
			}
		case "USER":
			d.user = fields[1]
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(sc.Text(), "ENTRYPOINT")), &d.entrypoint))
		}
	}
	require.NoError(t, sc.Err())
	return d
}

// entry is one file of an image's tree.
type entry struct {
	mode int64
	uid  int
	dir  bool
}

// tree reads the files of an image, all layers applied.
func tree(t *testing.T, s Spec, binDir string) (map[string]entry, Spec) {
	t.Helper()
	img, err := Build(s, binDir, runtime.GOARCH, Meta{})
	require.NoError(t, err)
	out := map[string]entry{}
	walkImage(t, img, func(hdr *tar.Header, _ io.Reader) {
		out["/"+strings.TrimSuffix(hdr.Name, "/")] = entry{mode: hdr.Mode, uid: hdr.Uid, dir: hdr.Typeflag == tar.TypeDir}
	})
	return out, s
}

// walkImage calls fn with every entry of an image's tree, all layers
// applied, and the entry's content.
func walkImage(t *testing.T, img v1.Image, fn func(*tar.Header, io.Reader)) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		fn(hdr, tr)
	}
}

// fakeBinaries writes a small file for each binary the specs name.
func fakeBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, s := range All {
		for _, b := range s.Binaries {
			require.NoError(t, os.WriteFile(filepath.Join(dir, b), []byte("binary "+b), 0o755))
		}
	}
	return dir
}

// The images built without a container engine have the file tree the
// Dockerfiles give theirs: the binaries where COPY puts them, executable,
// run as the user USER names with the ENTRYPOINT, on the part of
// distroless/static's tree that the binaries use (the nonroot user in
// /etc/passwd and /etc/group, the CA bundle, /tmp, the home folders). The
// Dockerfile's base also carries tzdata, os-release, licences and dpkg's
// status files, which the static binaries never read; nothing else is in
// these images.
func TestImagesHaveTheDockerfilesTree(t *testing.T) {
	bins := fakeBinaries(t)
	for file, spec := range map[string]Spec{"Dockerfile.sidecar": Sidecar, "Dockerfile.agent": Agent} {
		t.Run(file, func(t *testing.T) {
			d := parseDockerfile(t, filepath.Join("..", "..", file))
			assert.Equal(t, "gcr.io/distroless/static-debian12:nonroot", d.base, "the tree below is distroless/static's")
			files, _ := tree(t, spec, bins)

			var copied []string
			for p, e := range files {
				if strings.HasPrefix(p, "/usr/local/bin/") && !e.dir {
					copied = append(copied, p)
				}
			}
			sort.Strings(copied)
			want := append([]string(nil), d.copied...)
			sort.Strings(want)
			assert.Equal(t, want, copied, "the binaries COPY puts in")
			for _, p := range d.copied {
				assert.Equal(t, int64(0o755), files[p].mode, "%s is executable", p)
			}

			base := map[string]entry{
				"/etc": {mode: 0o755, dir: true}, "/etc/passwd": {mode: 0o644}, "/etc/group": {mode: 0o644},
				"/etc/nsswitch.conf": {mode: 0o644}, "/etc/ssl": {mode: 0o755, dir: true},
				"/etc/ssl/certs": {mode: 0o755, dir: true}, "/etc/ssl/certs/ca-certificates.crt": {mode: 0o644},
				"/home": {mode: 0o755, dir: true}, "/home/nonroot": {mode: 0o700, uid: NonRoot, dir: true},
				"/root": {mode: 0o700, dir: true}, "/tmp": {mode: 0o1777, dir: true},
				"/usr": {mode: 0o755, dir: true}, "/usr/local": {mode: 0o755, dir: true}, "/usr/local/bin": {mode: 0o755, dir: true},
			}
			for p, e := range files {
				if strings.HasPrefix(p, "/usr/local/bin/") {
					continue
				}
				want, ok := base[p]
				if assert.True(t, ok, "%s is not in distroless/static's tree", p) {
					assert.Equal(t, want, e, p)
				}
			}
			for p := range base {
				assert.Contains(t, files, p)
			}

			img, err := Build(spec, bins, runtime.GOARCH, Meta{})
			require.NoError(t, err)
			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, d.user, cfg.Config.User)
			assert.Equal(t, d.entrypoint, cfg.Config.Entrypoint)
			uid, err := strconv.Atoi(strings.SplitN(cfg.Config.User, ":", 2)[0])
			require.NoError(t, err, "the user is numeric, so that runAsNonRoot can check it")
			assert.NotZero(t, uid)
		})
	}
}

// The nonroot user the images run as is the one their /etc/passwd names.
func TestImagesNameTheirUser(t *testing.T) {
	base, err := baseFiles()
	require.NoError(t, err)
	files := map[string]string{}
	for _, f := range base {
		files[f.path] = string(f.data)
	}
	require.Contains(t, files, "etc/passwd")
	require.Contains(t, files, "etc/group")
	assert.Contains(t, files["etc/passwd"], "\nnonroot:x:65532:65532:nonroot:/home/nonroot:")
	assert.Contains(t, files["etc/group"], "\nnonroot:x:65532:")
}

// The same binaries give the same image, byte for byte: the layers, the
// config and the manifest have the same digests.
func TestImagesAreReproducible(t *testing.T) {
	bins := fakeBinaries(t)
	a, err := Build(Sidecar, bins, "arm64", testMeta)
	require.NoError(t, err)
	b, err := Build(Sidecar, bins, "arm64", testMeta)
	require.NoError(t, err)
	da, err := a.Digest()
	require.NoError(t, err)
	db, err := b.Digest()
	require.NoError(t, err)
	assert.Equal(t, da, db)

	// And a changed binary changes it.
	require.NoError(t, os.WriteFile(filepath.Join(bins, "gridsync-sidecar"), []byte("another"), 0o755))
	c, err := Build(Sidecar, bins, "arm64", testMeta)
	require.NoError(t, err)
	dc, err := c.Digest()
	require.NoError(t, err)
	assert.NotEqual(t, da, dc)
}

var testMeta = Meta{Version: "v1.2.3", Revision: strings.Repeat("ab", 20), Source: "https://github.com/gridsync/gridsync"}

// goBinary is a folder whose binaries of spec are copies of this test's
// own executable: a real Go binary, with build information to read.
func goBinary(t *testing.T, spec Spec) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	dir := t.TempDir()
	for _, b := range spec.Binaries {
		require.NoError(t, os.WriteFile(filepath.Join(dir, b), data, 0o755))
	}
	return dir
}

// binaryWithDeps builds, for each of spec's binaries, a program that
// depends on a module (testdata/withdeps): a copy of the test binary
// would do for the layout, but its build information lists no module,
// and the SBOM's check of the modules would check nothing.
func binaryWithDeps(t *testing.T, spec Spec) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range spec.Binaries {
		cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", filepath.Join(dir, b), "./testdata/withdeps")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return dir
}

// The layout holds one image index, named the way ctr import reads it,
// with an image per platform and the OCI labels on the index, the
// manifests and the configs; beside it the SPDX SBOM, an artifact whose
// subject is the index, listing the Go modules the binaries are built
// from.
func TestLayoutHoldsTheIndexItsLabelsAndTheSBOM(t *testing.T) {
	bins := binaryWithDeps(t, Agent)
	out := t.TempDir()
	digest, err := Write(Agent, map[string]string{"amd64": bins, "arm64": bins}, out, Agent.Ref("v1"), testMeta)
	require.NoError(t, err)
	p, err := layout.FromPath(filepath.Join(out, Agent.Name))
	require.NoError(t, err)
	top, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 3, "the image index, its SBOM and its provenance")
	named, sbomDesc, provenanceDesc := m.Manifests[0], m.Manifests[1], m.Manifests[2]
	assert.Equal(t, digest, named.Digest.String())
	assert.Equal(t, "gridsync.local/gridsync-agent:v1", named.Annotations["io.containerd.image.name"])
	assert.Equal(t, "gridsync.local/gridsync-agent:v1", named.Annotations["org.opencontainers.image.ref.name"])
	assert.Equal(t, SBOMMediaType, sbomDesc.ArtifactType)
	assert.Equal(t, ProvenanceMediaType, provenanceDesc.ArtifactType)
	_, err = os.Stat(filepath.Join(out, Agent.Name+".tar"))
	assert.NoError(t, err)

	wantLabels := map[string]string{
		"org.opencontainers.image.title": "gridsync-agent", "org.opencontainers.image.version": "v1.2.3",
		"org.opencontainers.image.revision": testMeta.Revision, "org.opencontainers.image.source": testMeta.Source,
		"org.opencontainers.image.created": buildTime().Format(time.RFC3339), // SOURCE_DATE_EPOCH, or the epoch
	}
	idx, err := top.ImageIndex(named.Digest)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	assert.Equal(t, wantLabels, im.Annotations)
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
		img, err := idx.Image(d.Digest)
		require.NoError(t, err)
		manifest, err := img.Manifest()
		require.NoError(t, err)
		assert.Equal(t, wantLabels, manifest.Annotations)
		cfg, err := img.ConfigFile()
		require.NoError(t, err)
		assert.Equal(t, wantLabels, cfg.Config.Labels)
		assert.Equal(t, d.Platform.Architecture, cfg.Architecture)
		assert.Equal(t, "65532:65532", cfg.Config.User)
	}
	assert.Equal(t, []string{"linux/amd64", "linux/arm64"}, platforms)

	// The artifacts: their subject is the index, their one layer the
	// document.
	attached := func(desc v1.Descriptor, mediaType string) []byte {
		raw, err := os.ReadFile(filepath.Join(out, Agent.Name, "blobs", "sha256", desc.Digest.Hex))
		require.NoError(t, err)
		var artifact struct {
			ArtifactType string `json:"artifactType"`
			Config       struct{ MediaType string }
			Layers       []struct{ MediaType, Digest string }
			Subject      struct{ Digest string }
		}
		require.NoError(t, json.Unmarshal(raw, &artifact))
		assert.Equal(t, digest, artifact.Subject.Digest)
		assert.Equal(t, mediaType, artifact.ArtifactType)
		assert.Equal(t, "application/vnd.oci.empty.v1+json", artifact.Config.MediaType)
		require.Len(t, artifact.Layers, 1)
		assert.Equal(t, mediaType, artifact.Layers[0].MediaType)
		doc, err := os.ReadFile(filepath.Join(out, Agent.Name, "blobs", "sha256", strings.TrimPrefix(artifact.Layers[0].Digest, "sha256:")))
		require.NoError(t, err)
		return doc
	}

	var provenance struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			BuildDefinition struct {
				ExternalParameters   map[string]any `json:"externalParameters"`
				ResolvedDependencies []struct {
					URI    string
					Digest map[string]string
				} `json:"resolvedDependencies"`
			} `json:"buildDefinition"`
		}
	}
	require.NoError(t, json.Unmarshal(attached(provenanceDesc, ProvenanceMediaType), &provenance))
	assert.Equal(t, "https://slsa.dev/provenance/v1", provenance.PredicateType)
	require.Len(t, provenance.Subject, 1)
	assert.Equal(t, "gridsync.local/gridsync-agent", provenance.Subject[0].Name)
	assert.Equal(t, digest, "sha256:"+provenance.Subject[0].Digest["sha256"])
	assert.Equal(t, []any{"linux/amd64", "linux/arm64"}, provenance.Predicate.BuildDefinition.ExternalParameters["platforms"])
	require.Len(t, provenance.Predicate.BuildDefinition.ResolvedDependencies, 1)
	assert.Equal(t, testMeta.Revision, provenance.Predicate.BuildDefinition.ResolvedDependencies[0].Digest["gitCommit"])

	doc := attached(sbomDesc, SBOMMediaType)
	var spdx struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name, VersionInfo string
			ExternalRefs      []struct{ ReferenceLocator string }
		}
	}
	require.NoError(t, json.Unmarshal(doc, &spdx))
	assert.Equal(t, "SPDX-2.3", spdx.SPDXVersion)
	info, err := buildinfo.ReadFile(filepath.Join(bins, Agent.Binaries[0]))
	require.NoError(t, err)
	require.NotEmpty(t, info.Deps, "the binary is built from a module dependency")
	versions := map[string]string{}
	for _, p := range spdx.Packages {
		versions[p.Name] = p.VersionInfo
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		assert.Equal(t, d.Version, versions[d.Path], "the SBOM lists %s at the version built in", d.Path)
	}
	assert.Contains(t, versions, "stdlib")
	assert.Contains(t, versions, "golang.org/x/sys", "the module the binary is built from")
}
