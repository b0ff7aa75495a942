// Package publish_test publishes a release to a real OCI registry.
package publish_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gridsync/gridsync/hack/release/kube"
	"github.com/gridsync/gridsync/hack/release/publish"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testregistry"
)

// root is the repository's root, from this package's folder.
var root = filepath.Join("..", "..")

// The release `make release` writes, published with `make publish` to the
// pinned distribution registry over TLS on loopback: every image index is
// served by the digest in its layout (and by its tag), its referrers are
// the layout's SBOM and provenance with their artifact types, each chart
// is pulled by the pinned helm from oci:// and pins the digests pushed;
// publishing again writes nothing and gives the same digests, and keeps a
// referrer attached in between.
//
// It is signed with a key pair the real cosign made: make publish refuses
// to publish without the key unless told to; with it, make verify and the
// real cosign (verify, verify-attestation) accept every image and chart
// and each image's provenance, and both refuse an image replaced under
// the agent's tag and a signature or attestation copied onto another
// digest. Cosign runs offline: nothing is sent off loopback.
func TestPublishPushesTheReleaseByDigest(t *testing.T) {
	helm := pinnedHelm(t)
	dir := t.TempDir()
	cosign := newCosign(t, dir)
	key, pub := cosign.generateKeyPair(t, filepath.Join(dir, "keys"))
	release := filepath.Join(dir, "release")
	runMake(t, "release", "RELEASE_DIR="+release, "BIN_DIR="+filepath.Join(dir, "bin"))

	host, ca, opts := startRegistry(t)
	record := filepath.Join(dir, "published.json")
	publishArgs := []string{"RELEASE_DIR=" + release, "BIN_DIR=" + filepath.Join(dir, "bin"),
		"REGISTRY=" + host, "REGISTRY_CA=" + ca, "PUBLISHED=" + record}
	refused := runMakeFails(t, "publish", publishArgs...)
	assert.Contains(t, refused, "refusing to publish unsigned", "without a key, publishing must be asked for")
	reg, err := name.NewRegistry(host)
	require.NoError(t, err)
	catalog, err := remote.Catalog(t.Context(), reg, opts...)
	require.NoError(t, err)
	assert.Empty(t, catalog, "nothing was pushed")

	publishArgs = append(publishArgs, "SIGNING_KEY="+key)
	printed := runMake(t, "publish", publishArgs...)
	t.Logf("make publish:\n%s", printed)
	first := readRecord(t, record)

	images := map[string]v1.Hash{} // image name → its index's digest in the layout
	var indexes, charts []publish.Pushed
	for _, p := range first {
		assert.False(t, p.Existed, "%s: the registry was empty", p)
		assert.Contains(t, printed, p.Repository, "each pushed reference is printed")
		assert.Contains(t, printed, p.Digest, "with its digest")
		switch p.Kind {
		case publish.Image:
			indexes = append(indexes, p)
		case publish.Chart:
			charts = append(charts, p)
		}
	}
	require.Len(t, indexes, 2, "the agent and the sidecar")
	require.Len(t, charts, 2, "the agent's chart and the gateway's")

	for _, p := range indexes {
		imageName := filepath.Base(p.Repository)
		lp, err := layout.FromPath(filepath.Join(release, "images", imageName))
		require.NoError(t, err)
		li, err := lp.ImageIndex()
		require.NoError(t, err)
		top, err := li.IndexManifest()
		require.NoError(t, err)
		var want v1.Hash
		attached := map[string]string{} // digest → artifact type, the layout's
		for _, d := range top.Manifests {
			if d.MediaType.IsIndex() {
				want = d.Digest
			} else {
				attached[d.Digest.String()] = d.ArtifactType
			}
		}
		images[imageName] = want
		assert.Equal(t, host+"/gridsync/"+imageName, p.Repository, "the release's repository, on REGISTRY")
		assert.Equal(t, want.String(), p.Digest, "%s: the digest pushed is the layout's", imageName)

		repo, err := name.NewRepository(p.Repository)
		require.NoError(t, err)
		byDigest, err := remote.Index(repo.Digest(want.String()), opts...)
		require.NoError(t, err, "%s is fetchable by digest", imageName)
		got, err := byDigest.Digest()
		require.NoError(t, err)
		assert.Equal(t, want, got)
		im, err := byDigest.IndexManifest()
		require.NoError(t, err)
		var platforms []string
		for _, d := range im.Manifests {
			platforms = append(platforms, d.Platform.String())
			_, err := remote.Image(repo.Digest(d.Digest.String()), opts...)
			assert.NoError(t, err, "%s's %s image", imageName, d.Platform)
		}
		assert.ElementsMatch(t, []string{"linux/amd64", "linux/arm64"}, platforms)
		tagged, err := remote.Head(repo.Tag(p.Tag), opts...)
		require.NoError(t, err)
		assert.Equal(t, want, tagged.Digest, "the tag %s names the same index", p.Tag)

		refs := referrers(t, repo, want, opts)
		var types []string
		for _, d := range refs {
			types = append(types, d.ArtifactType)
			assert.Equal(t, attached[d.Digest.String()], d.ArtifactType, "%s: a referrer of the layout's", imageName)
			m, err := remote.Image(repo.Digest(d.Digest.String()), opts...)
			require.NoError(t, err)
			mf, err := m.Manifest()
			require.NoError(t, err)
			require.NotNil(t, mf.Subject)
			assert.Equal(t, want, mf.Subject.Digest, "the referrer's subject is the index")
		}
		assert.Len(t, refs, len(attached), "%s: every attachment of the layout is a referrer", imageName)
		assert.True(t, slices.ContainsFunc(types, func(s string) bool {
			return s == "application/spdx+json" || strings.HasPrefix(s, "application/vnd.cyclonedx")
		}), "%s: an SBOM among %v", imageName, types)
		assert.Contains(t, types, "application/vnd.in-toto+json", "%s: the provenance", imageName)
	}

	// Helm pulls each chart from the registry, and what it pulled pins the
	// digests pushed.
	helmEnv := []string{"HELM_CACHE_HOME=" + filepath.Join(dir, "helm", "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "helm", "config"), "HELM_DATA_HOME=" + filepath.Join(dir, "helm", "data")}
	pins := map[string]struct{ key, image, set string }{
		"gridsync-agent": {"image.digest", "gridsync-agent", ""},
		"praxis-gateway": {"overlay.sidecar.image.digest", "gridsync-sidecar",
			"overlay.sidecar.enabled=true,overlay.sidecar.expectedNetwork=n,overlay.sidecar.expectedLocalSite=s,overlay.sidecar.expectedGateway=g"},
	}
	for _, c := range charts {
		chartName := filepath.Base(c.Repository)
		pin, ok := pins[chartName]
		require.True(t, ok, chartName)
		assert.Equal(t, host+"/gridsync/charts/"+chartName, c.Repository)
		url := "oci://" + c.Repository
		shown := runHelm(t, helm, helmEnv, "show", "chart", url, "--version", c.Tag, "--ca-file", ca)
		assert.Contains(t, shown, "name: "+chartName)
		assert.Contains(t, shown, "version: "+c.Tag)
		pulled := filepath.Join(dir, "pulled")
		out := runHelm(t, helm, helmEnv, "pull", url, "--version", c.Tag, "--ca-file", ca, "--untar", "--untardir", pulled)
		assert.Contains(t, out, c.Digest, "helm pulled the digest pushed")
		values, err := os.ReadFile(filepath.Join(pulled, chartName, "values.yaml"))
		require.NoError(t, err)
		assert.Equal(t, images[pin.image].String(), valueAt(t, values, pin.key), "%s pins the pushed %s", chartName, pin.image)
		args := []string{"template", "r", filepath.Join(pulled, chartName), "--kube-version", kube.Version}
		if pin.set != "" {
			args = append(args, "--set", pin.set)
		}
		assert.Contains(t, runHelm(t, helm, helmEnv, args...), "/"+pin.image+"@"+images[pin.image].String()+`"`)
	}

	verifyArgs := []string{"PUBLIC_KEY=" + pub, "PUBLISHED=" + record, "REGISTRY=" + host, "REGISTRY_CA=" + ca, "BIN_DIR=" + filepath.Join(dir, "bin")}
	checkSigned(t, cosign, first, verifyArgs, pub, ca)

	// Another tool attaches its own referrer to an index; publishing again
	// writes nothing (no signature either), gives the same digests and
	// keeps it.
	agent, err := name.NewRepository(host + "/gridsync/gridsync-agent")
	require.NoError(t, err)
	extra := attach(t, agent, images["gridsync-agent"], opts)
	fallback := func() v1.Hash {
		// The registry has no referrers API: the fallback tag holds them.
		d, err := remote.Head(agent.Tag(strings.Replace(images["gridsync-agent"].String(), ":", "-", 1)), opts...)
		require.NoError(t, err)
		return d.Digest
	}
	before := fallback()
	printed = runMake(t, "publish", publishArgs...)
	second := readRecord(t, record)
	require.Len(t, second, len(first))
	for i, p := range second {
		assert.True(t, p.Existed, "%s: already in the registry", p)
		p.Existed = false
		assert.Equal(t, first[i], p, "the same reference and digest")
	}
	assert.Equal(t, len(first), strings.Count(printed, "(already there)"), printed)
	assert.Equal(t, before, fallback(), "the referrers were not written again")
	assert.True(t, slices.ContainsFunc(referrers(t, agent, images["gridsync-agent"], opts), func(d v1.Descriptor) bool {
		return d.Digest == extra
	}), "a referrer attached after publishing is kept")

	i := slices.IndexFunc(first, func(p publish.Pushed) bool { return p.Kind == publish.Image && p.Repository == agent.Name() })
	require.GreaterOrEqual(t, i, 0)
	checkTamperingRefused(t, cosign, first[i], verifyArgs, pub, ca, opts)
	assert.Empty(t, cosign.trap.requests(), "cosign sent nothing off loopback")
}

// tool is the pinned tool `make tools` built: its absence fails the
// test, so that a run without it is not taken for a pass.
func tool(t *testing.T, toolName string) string {
	t.Helper()
	dir, err := controlplane.BinDir()
	require.NoError(t, err)
	p := filepath.Join(dir, toolName)
	_, err = os.Stat(p)
	require.NoError(t, err, "the pinned %s is not built: run `make tools` (or set %s)", toolName, controlplane.BinDirEnv)
	return p
}

// pinnedHelm is the pinned helm, as the node tests find it.
func pinnedHelm(t *testing.T) string {
	t.Helper()
	p, err := testnode.Helm()
	require.NoError(t, err)
	return p
}

// runMake runs make target from the repository's root and returns what it
// printed.
func runMake(t *testing.T, target string, vars ...string) string {
	t.Helper()
	printed, err := makeCommand(t, target, vars...).CombinedOutput()
	require.NoError(t, err, "make %s:\n%s", target, printed)
	return string(printed)
}

// makeCommand is make target run from the repository's root.
func makeCommand(t *testing.T, target string, vars ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"--no-print-directory", target}, vars...)
	cmd := exec.CommandContext(t.Context(), "make", args...)
	cmd.Dir = root
	// Run from `make test`, the outer make's jobserver is not this one's.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	return cmd
}

func runHelm(t *testing.T, helm string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), helm, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helm %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// startRegistry runs the registry (package testregistry) for the test,
// and returns its host:port, the CA's file and the client options that
// trust it.
func startRegistry(t *testing.T) (string, string, []remote.Option) {
	t.Helper()
	reg, err := testregistry.Start(t.Context(), t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the end of the registry's log:\n%s", reg.LogTail())
		}
		assert.NoError(t, reg.Stop())
	})
	return reg.Host, reg.CAFile, []remote.Option{remote.WithTransport(reg.Transport), remote.WithContext(t.Context())}
}

func readRecord(t *testing.T, file string) []publish.Pushed {
	t.Helper()
	out, err := publish.ReadRecord(file)
	require.NoError(t, err)
	return out
}

// referrers are the descriptors the registry lists as referring to the
// manifest digest in repo.
func referrers(t *testing.T, repo name.Repository, digest v1.Hash, opts []remote.Option) []v1.Descriptor {
	t.Helper()
	idx, err := remote.Referrers(repo.Digest(digest.String()), opts...)
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	return m.Manifests
}

// attach pushes a small artifact whose subject is the index digest in
// repo, as a signing step would, and returns its digest.
func attach(t *testing.T, repo name.Repository, digest v1.Hash, opts []remote.Option) v1.Hash {
	t.Helper()
	idx, err := remote.Index(repo.Digest(digest.String()), opts...)
	require.NoError(t, err)
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: static.NewLayer([]byte(`{"signed":"in a test"}`), "application/vnd.dev.test.signature+json"),
	})
	require.NoError(t, err)
	a, ok := mutate.Subject(img, descriptorOf(t, idx)).(v1.Image)
	require.True(t, ok)
	d, err := a.Digest()
	require.NoError(t, err)
	require.NoError(t, remote.Write(repo.Digest(d.String()), a, opts...))
	return d
}

func descriptorOf(t *testing.T, idx v1.ImageIndex) v1.Descriptor {
	t.Helper()
	d, err := idx.Digest()
	require.NoError(t, err)
	size, err := idx.Size()
	require.NoError(t, err)
	mt, err := idx.MediaType()
	require.NoError(t, err)
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}
}

// valueAt is the string at the dotted key of a values file.
func valueAt(t *testing.T, values []byte, key string) string {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(values, &v))
	for _, k := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: %s is not a mapping", key, k)
		v = m[k]
	}
	s, _ := v.(string)
	require.Regexp(t, regexp.MustCompile(`^sha256:[0-9a-f]{64}$`), s, key)
	return s
}
